"""The long-lived run loop: poll, queue, tier, score, engage the model, act, remember.

One `tick()` is one poll of the inbox and everything it leads to; `run()` repeats it with the adaptive
interval of agent.runtime.polling until stopped. The clock, the random source and the engine are injected,
so tests and scenarios drive ticks deterministically.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Callable

from agent.client import BBSClientError, Client
from agent.runtime import context as ctx
from agent.runtime import scoring, tiers
from agent.runtime.actions import Ack, Action, Decline, Executor, Post, parse_reply
from agent.runtime.config import AgentConfig
from agent.runtime.engines import Engine, EngineError, Prompt
from agent.runtime.memory import WorkingMemory
from agent.runtime.polling import PollSchedule
from wire.api import EntryOut, Envelope, ReadQuery, SearchQuery

log = logging.getLogger("bbs.agent")
HYGIENE_DISMISS_AFTER_S = 7 * 86_400

REPLY_FORMAT = """## Reply format

Answer with one JSON object and nothing else: {"actions": [...]}. Each action has an "op":
- {"op": "post", "content": "...", "entry_type": "finding", "performative": "inform", "tags": [...],
  "confidence": 0.7, "directed_to": ["did:key:..."], "links": [{"target": "<entry id>", "link_type": "responds_to"}]}
- {"op": "link", "source": "<entry id>", "target": "<entry id>", "link_type": "supports", "annotation": "..."}
- {"op": "ack", "request": "<entry id>", "note": "..."}   accept a request directed to you
- {"op": "decline", "request": "<entry id>", "reason": "..."}
- {"op": "lease_task", "task": "<task key>", "seconds": 900} and {"op": "complete_task", "task": "<task key>"}
Reply {"actions": []} when nothing is worth doing."""

WHY = {
    "immediate": "Something needs your attention now: a request directed to you or a contradiction of your entry.",
    "batch": "These notifications together crossed your activation threshold.",
    "synthesis_review": "Scheduled synthesis review: if your threads support a synthesis, post one "
    "(entry_type synthesis, performative propose, derived_from links); otherwise reply with no actions.",
}


def _envelope_line(env: Envelope, score: float) -> str:
    links = f" links to {', '.join(t[:12] for t in env.link_targets)}" if env.link_targets else ""
    return (
        f"[entry {env.entry_id}] {env.entry_type}/{env.performative} by {env.author}"
        f" tags={','.join(env.tags) or '-'} confidence={env.confidence:.2f} tier={env.tier} ({env.reason})"
        f" score={score:.2f}{links}"
    )


def _entry_text(entry: EntryOut) -> str:
    """An entry of stage 4: its whole text (context.assemble clips the last one kept when the budget is short)."""
    return f"[entry {entry.id} | {entry.record_hash[:12]} | by {entry.author_id}]\n{entry.content}"


class AgentRuntime:
    """One agent: its config, soul and skill, a client, an engine and its working memory."""

    def __init__(
        self,
        config: AgentConfig,
        soul: str,
        skill: str,
        client: Client,
        engine: Engine,
        memory: WorkingMemory,
        *,
        clock: Callable[[], float] = time.time,
        rng: random.Random | None = None,
        say: Callable[[str], None] | None = None,
    ) -> None:
        self.config = config
        self.soul = soul
        self.skill = skill
        self.client = client
        self.engine = engine
        self.memory = memory
        self.clock = clock
        self.poll = PollSchedule(config.polling, clock, rng)
        self.schedule = tiers.Schedule(config.crons(), clock)
        self.agent_id = client.agent_id or ""
        self.say = say or log.info
        self.started = False
        self.wake = asyncio.Event()  # set by a push (agent/runtime/push.py): poll now rather than at the interval

    # ---- start ----------------------------------------------------------------------------------------

    async def start(self) -> None:
        """Subscribe (directed entries, watched tags, followed authors), learn our id, cold-start memory."""
        s = self.config.scoring
        sub = await self.client.subscribe(directed=True)
        self.agent_id = sub.agent_id
        if s.watched_tags:
            await self.client.subscribe(tags=list(s.watched_tags))
        if s.followed_authors:
            await self.client.subscribe(authors=list(s.followed_authors))
        if self.memory.thread_count() == 0 and s.watched_tags and self.config.memory.cold_start_limit:
            await self.cold_start()
        self.started = True

    async def cold_start(self) -> int:
        """Bounded search on the watched tags; each entry found seeds a thread summary."""
        limit = self.config.memory.cold_start_limit
        found = await self.client.search(SearchQuery(tags=list(self.config.scoring.watched_tags), limit=limit))
        for entry in found.entries:
            self._note(entry, [])
        self.memory.record("cold_start", entries=len(found.entries), limit=limit)
        return len(found.entries)

    def _note(self, entry: EntryOut, linked: list[str]) -> str:
        line = f"- {entry.entry_type}/{entry.performative} by {entry.author_id[-8:]}: {entry.content[:200]}"
        if entry.author_id == self.agent_id:
            self.memory.remember_own(entry.record_hash, entry.id)
        return self.memory.note_entry(entry.record_hash, linked, line, entry.tags)

    # ---- one tick -------------------------------------------------------------------------------------

    async def tick(self) -> int:
        """Poll once and act on what came in; return how many times the model was engaged."""
        if not self.started:
            await self.start()
        try:
            result = await self.client.inbox(limit=self.config.polling.inbox_limit)
        except BBSClientError as exc:
            self.poll.failed()
            self.memory.record("poll_error", code=exc.code, detail=exc.detail)
            return 0
        envelopes = [e for e in result.notifications if e.reason != "redacted"]
        for notice in result.notifications:
            if notice.reason == "redacted":  # an entry it was notified of was redacted: its copies here go
                dropped = self.memory.forget_redacted(notice.record_hash)
                self.memory.record("redacted", record_hash=notice.record_hash, redaction=notice.redaction,
                                   summaries_dropped=dropped)  # fmt: skip
        if len(envelopes) < len(result.notifications):
            await self.client.ack([e.notification_id for e in result.notifications if e.reason == "redacted"])
        own = self.memory.own_hashes()
        tier_map = {e.notification_id: tiers.tier_of(e, own) for e in envelopes}
        fresh = set(self.memory.enqueue(envelopes, tier_map))  # stored locally before the node forgets them
        if envelopes:
            await self.client.ack([e.notification_id for e in envelopes])
        self.poll.polled(len(fresh))
        now = self.clock()
        scored = {
            e.notification_id: scoring.score(e, self.config.scoring, own, now)
            for e in envelopes
            if e.notification_id in fresh
        }
        self.memory.set_scores({nid: (s.score, s.features) for nid, s in scored.items()})
        for nid, s in scored.items():
            env = s.envelope
            self.memory.record(
                "scored",
                notification_id=nid,
                entry_id=env.entry_id,
                tier=tier_map[nid],
                reason=env.reason,
                score=s.score,
                features=s.features,
            )
        engaged = 0
        immediate = self.memory.pending(tier=tiers.IMMEDIATE)[: self.config.scoring.max_batch]  # more: next tick
        if immediate:
            self.memory.record(
                "decision", trigger="immediate", engaged=True, notifications=[e.notification_id for e, _ in immediate]
            )
            engaged += await self.engage("immediate", immediate)
        batch = self.memory.pending(tier=tiers.BATCHED)
        if any(tier_map[nid] == tiers.BATCHED for nid in fresh):  # the batch changed: decide again
            settings = self.config.scoring
            decision = tiers.decide_batch(batch, settings.activation_threshold, settings.max_batch)
            self.memory.record(
                "decision",
                trigger="batch",
                engaged=decision.engage,
                total=decision.total,
                threshold=settings.activation_threshold,
                notifications=[e.notification_id for e, _ in batch],
                chosen=[e.notification_id for e in decision.chosen],
            )
            if not decision.engage:
                self.say(
                    f"batch of {len(batch)} scores {decision.total:.2f} < {settings.activation_threshold:.2f}:"
                    " not engaged"
                )
            else:
                chosen = {e.notification_id for e in decision.chosen}
                self.memory.mark([e.notification_id for e, _ in batch if e.notification_id not in chosen], "dismissed")
                engaged += await self.engage("batch", [(e, sc) for e, sc in batch if e.notification_id in chosen])
        for job in self.schedule.due():
            engaged += await self.scheduled(job)
        return engaged

    # ---- engaging the model ---------------------------------------------------------------------------

    async def engage(self, trigger: str, batch: list[tuple[Envelope, float]], engagement: str | None = None) -> int:
        """Fetch the chosen entries, assemble the context, ask the engine, execute its actions."""
        ids = [e.notification_id for e, _ in batch]
        engagement = engagement or f"{trigger}:{','.join(map(str, sorted(ids)))}"
        fetched: dict[str, EntryOut] = {}
        if batch:  # content is fetched only for the notifications chosen
            read = await self.client.read([str(e.entry_id) for e, _ in batch], ReadQuery(include_links=False))
            fetched = {entry.record_hash: entry for entry in read.entries}
        touching = [h for e, _ in batch for h in (e.record_hash, *e.link_targets)]
        summaries = self.memory.summaries(limit=8, touching=touching)
        score_of = {e.record_hash: sc for e, sc in batch}
        stages = ctx.Stages(
            identity=f"{self.soul}\n\nYour agent id is {self.agent_id}.",
            core=[
                ctx.Item(f"Thread {s['thread_id'][:12]}:\n{s['summary']}", s["relevance"])
                for s in summaries
                if not s["touching"]
            ],
            batch=[ctx.Item(_envelope_line(e, sc), sc) for e, sc in batch],
            history=[
                ctx.Item(f"Thread {s['thread_id'][:12]}:\n{s['summary']}", s["relevance"])
                for s in summaries
                if s["touching"]
            ],
            fetched=[ctx.Item(_entry_text(entry), score_of.get(h, 0.0)) for h, entry in fetched.items()],
            instructions=f"{self.skill}\n\n{REPLY_FORMAT}\n\n{WHY.get(trigger, WHY['batch'])}",
        )
        max_reply = self.config.model.max_reply_tokens
        context = ctx.assemble(stages, self.config.budget_tokens - max_reply)
        for e, _ in batch:  # what the model sees becomes part of its threads
            if e.record_hash in fetched:
                self._note(fetched[e.record_hash], list(e.link_targets))
        self.memory.record(
            "engaged",
            trigger=trigger,
            engagement=engagement,
            notifications=ids,
            tokens=context.tokens,
            budget=context.budget,
            dropped=context.dropped,
        )
        prompt = Prompt(context.messages, max_reply, trigger, [e for e, _ in batch], fetched, self.agent_id)
        try:
            reply = await self.engine.complete(prompt)
        except EngineError as exc:
            self.memory.record("engine_error", engagement=engagement, detail=str(exc))
            return 0  # the notifications stay pending: the next tick tries again
        parsed = parse_reply(reply)
        if parsed.errors:
            self.memory.record("malformed_output", engagement=engagement, errors=parsed.errors, reply=reply[:4000])
        authors = {k: e.author for e, _ in batch for k in (str(e.entry_id), e.record_hash)}
        outcomes = await Executor(self.client, self.memory, self.agent_id).run(parsed.actions, engagement, authors)
        refs = {str(e.entry_id): e.record_hash for e, _ in batch}
        for action, outcome in zip(parsed.actions, outcomes, strict=True):
            if outcome["status"] == "ok" and "record_hash" in outcome:
                self._note_own(action, outcome["record_hash"], refs)
        self.memory.mark(ids, "engaged")
        self.poll.active()
        done = ", ".join(f"{o['op']} {o['status']}" for o in outcomes) or "no actions"
        bad = f"; {len(parsed.errors)} malformed" if parsed.errors else ""
        reasons = ", ".join(sorted({e.reason for e, _ in batch}))
        what = f"{len(batch)} notification(s) ({reasons})" if batch else "no notifications"
        self.say(f"{trigger} engagement on {what}: {done}{bad}")
        return 1

    def _note_own(self, action: Action, record_hash: str, refs: dict[str, str]) -> None:
        """What the agent posted joins the thread it answers, so its summary holds both sides."""
        if isinstance(action, Post):
            targets, text, tags = [link.target for link in action.links], action.content, action.tags
        elif isinstance(action, Ack | Decline):
            targets, tags = [action.request], []
            text = action.note if isinstance(action, Ack) else action.reason
        else:
            return
        line = f"- me ({type(action).__struct_config__.tag}): {text[:200]}"
        self.memory.note_entry(record_hash, [refs.get(t, t) for t in targets], line, tags)

    async def scheduled(self, job: str) -> int:
        """Run a cron job: hygiene is local bookkeeping, synthesis review engages the model."""
        if job == "hygiene":
            m = self.config.memory
            removed = self.memory.compact(m.compact_after_days)
            forgotten = self.memory.forget(m.forget_below)
            dismissed = self.memory.dismiss_older_than(HYGIENE_DISMISS_AFTER_S)
            self.memory.record("hygiene", compacted=removed, forgotten=forgotten, dismissed=dismissed)
            return 0
        return await self.engage(job, [], engagement=f"{job}:{int(self.clock())}")

    # ---- the loop -------------------------------------------------------------------------------------

    async def run(self, stop: asyncio.Event | None = None) -> None:
        """Tick until `stop` is set, waiting the adaptive interval between polls. Never dies on one bad tick."""
        stop = stop or asyncio.Event()
        while not stop.is_set():
            try:
                await self.tick()
            except Exception as exc:  # a long-lived loop outlives one bad tick; it backs off and records why
                self.poll.failed()
                self.memory.record("tick_error", error=type(exc).__name__, detail=str(exc))
                log.warning("agent tick failed: %r", exc)
            interval = self.poll.next_interval()
            await self._wait(stop, interval)

    async def _wait(self, stop: asyncio.Event, seconds: float) -> None:
        """Sleep until the next poll: `seconds`, or less if stopped or woken by a push."""
        if self.wake.is_set():
            self.wake.clear()
            return
        waiters = [asyncio.ensure_future(stop.wait()), asyncio.ensure_future(self.wake.wait())]
        try:
            await asyncio.wait(waiters, timeout=seconds, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for waiter in waiters:
                waiter.cancel()
        self.wake.clear()
