"""The default-mode runtime's proposing side: reflect, critic, consolidate, the fixed templates, and listing.

Each reads records and writes candidates (node/default_mode/store.py), reviewed by the critic in the same
transaction. Promotion and human review build on this in node/default_mode/service.py (`DefaultMode`).
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

import msgspec

from identity import canonical
from node.default_mode import critic, salience, store, templates
from node.default_mode.classify import classify
from node.default_mode.store import DEFAULT_MODE_SIGHT, NewCandidate
from node.entries import queries
from node.entries import store as entries_store
from node.errors import InvalidInput, NotFound
from node.spaces.sight import OPERATOR, Sight, Viewer, require_writer
from node.store.conn import Conn
from wire.default_mode import (
    MAX_CANDIDATES_PER_CALL,
    MAX_EVIDENCE,
    MAX_TEXT_CHARS,
    CandidateList,
    CandidateOut,
    CandidateQuery,
    ConsolidateIn,
    CriticIn,
    CriticResult,
    IncubateIn,
    LineScore,
    ReflectIn,
    ReflectResult,
    SalienceWeights,
    SimulateFutureIn,
    StakeholderIn,
    TemplateResult,
)

T = TypeVar("T")
R = TypeVar("R", ReflectResult, CriticResult, CandidateOut, TemplateResult)
MAX_SESSION_ENTRIES = 2_000


class RecordStore(Protocol):
    """What the runtime may use of the node's database: reads, and writes of one transaction each."""

    async def read(self, fn: Callable[[Conn], T]) -> T: ...

    async def write(self, fn: Callable[[Conn], T]) -> T: ...


class SpaceRules(Protocol):
    """What the runtime asks of spaces (node/spaces/store.py, given by `Node`): who reads what, and roles."""

    def sight_of(self, conn: Conn, viewer: Viewer) -> Sight: ...

    def roles_of(self, conn: Conn, pairs: Iterable[tuple[str, str]]) -> dict[tuple[str, str], str | None]: ...


@dataclass(frozen=True)
class Once:
    """A candidate-creating call made with an idempotency key: whose key, which operation, what it replies."""

    agent_id: str
    key: str
    operation: str
    reply_type: type[Any]

    @classmethod
    def of(cls, agent_id: str, key: str | None, operation: str, reply_type: type[Any]) -> Once | None:
        """None when the call has no key."""
        return None if key is None else cls(agent_id, key, f"default-mode:{operation}", reply_type)


class Proposals:
    """Candidates proposed from records, reviewed by the critic as they are stored."""

    def __init__(self, db: RecordStore, now_ms: Callable[[], int], spaces: SpaceRules) -> None:
        self.db = db
        self.now_ms = now_ms
        self.spaces = spaces
        self._promote_lock = asyncio.Lock()  # held by a promotion, a decision, a critic run: one at a time

    async def _evidence(self, refs: list[str], field: str, sight: Sight = DEFAULT_MODE_SIGHT) -> list[str]:
        """Resolve entry ids or record hashes to record hashes (a well-formed unknown hash is kept: it may arrive),
        as `sight` sees them (an entry it does not see is not found)."""
        return await self.db.read(lambda c: evidence(c, refs, field, sight)) if refs else []

    async def _space_of_call(self, agent_id: str, space: str | None) -> Sight:
        """What a call asked in `space` reads: that space and the public federation, for an agent that writes in
        it (its candidates are posted there: 403 `not_a_writer`, 404 `unknown_space`); the public federation for
        a call in no space."""
        if space is not None:
            role = (await self.db.read(lambda c: self.spaces.roles_of(c, [(space, agent_id)])))[(space, agent_id)]
            require_writer(role, "propose")
        return store.in_space(space)

    async def _store_and_review(
        self,
        new: list[NewCandidate],
        existing: list[int] | None = None,
        *,
        reply: Callable[[CriticResult], R],
        once: Once | None = None,
        viewer: Viewer = None,
    ) -> tuple[R, bool]:
        """Insert `new`, run the critic over them and over `existing` ids, and build the call's `reply`, all in
        one transaction. With `once` (an idempotency key), a key already used returns the reply it gave then
        and stores nothing; the bool says whether this call stored anything."""
        now = self.now_ms()
        # never between a promotion's entry and its `promoted` mark: the critic would call the candidate a
        # duplicate of the entry it has just become
        async with self._promote_lock:
            spaces = self.spaces
            return await self.db.write(
                lambda c: store_and_review(c, new, list(existing or []), reply, once, now, spaces.sight_of(c, viewer))
            )

    # ---- reflect ----------------------------------------------------------------------------------------

    async def reflect(self, agent_id: str, body: ReflectIn, key: str | None = None) -> tuple[ReflectResult, bool]:
        """Score a transcript line by line, store the survivors as classified candidates, run the critic.

        With an idempotency `key` already used, the first reply and False (nothing stored)."""
        session = body.session_id is not None or body.project is not None
        if (body.transcript is None) != session:
            raise InvalidInput("give a transcript, or a session (session_id and/or project), not both",
                               field="$.transcript", code="transcript_or_session")  # fmt: skip
        if body.transcript is not None and (body.since is not None or body.until is not None):
            raise InvalidInput("since and until select a session's records; a transcript has none",
                               field="$.since" if body.since is not None else "$.until",
                               code="transcript_or_session")  # fmt: skip
        sight = await self._space_of_call(agent_id, body.space)
        evidence = await self._evidence(body.evidence_refs, "$.evidence_refs", sight)
        line_source: list[str | None]
        if body.transcript is not None:
            lines = body.transcript.split("\n")
            line_source = [None for _ in lines]
        else:
            lines, line_source = await self._session_lines(body, sight)
        scored = salience.score_lines(
            lines,
            body.weights or SalienceWeights(),
            goal_relevance=body.goal_relevance,
            evidence_strength=body.evidence_strength,
        )
        survivors: dict[str, salience.ScoredLine] = {}
        for s in scored:
            if s.kept and s.text.casefold() not in survivors:
                survivors[s.text.casefold()] = s
        best = sorted(survivors.values(), key=lambda s: (-s.score, s.index))[:MAX_CANDIDATES_PER_CALL]
        new = [
            NewCandidate(
                kind=classify(s.text),
                text=s.text[:MAX_TEXT_CHARS],  # a candidate must fit an entry; the line's score used all of it
                salience=s.score,
                confidence=s.score,
                evidence_refs=list(dict.fromkeys([*_present(line_source[s.index]), *evidence]))[:MAX_EVIDENCE],
                truth_state="hypothesis",
                synthetic=False,
                source="reflect-session",
                proposed_by=agent_id,
                tags=list(body.tags),
                payload={
                    "line": s.index,
                    "features": s.features,
                    "session_id": body.session_id,
                    "project": body.project,
                    "source_ref": line_source[s.index],  # the record the line came from: never its duplicate
                },
                space=body.space,
            )
            for s in sorted(best, key=lambda s: s.index)
        ]
        scores = [LineScore(line=s.index, score=s.score, kept=s.kept, features=s.features) for s in scored]

        def reply(result: CriticResult) -> ReflectResult:
            return ReflectResult(
                candidates=result.candidates,
                lines_scored=len(scored),
                dropped=sum(1 for s in scored if not s.kept),
                scores=scores,
            )

        return await self._store_and_review(
            new, reply=reply, once=Once.of(agent_id, key, "reflect-session", ReflectResult)
        )

    async def _session_lines(self, body: ReflectIn, sight: Sight) -> tuple[list[str], list[str | None]]:
        """A session's transcript, oldest first: the lines of its entries (tagged session:<id>) and of its
        project's bus messages, each line with the record hash it came from."""
        since_ms = queries.parse_since(body.since, "$.since")
        until_ms = queries.parse_since(body.until, "$.until")
        if since_ms is not None and until_ms is not None and until_ms < since_ms:
            raise InvalidInput("until is before since", field="$.until", code="invalid_range")
        rows = await self.db.read(
            lambda c: store.session_records(
                c, body.session_id, body.project, since_ms, until_ms, MAX_SESSION_ENTRIES, sight
            )
        )
        if not rows:
            what = " and ".join(
                ([f"entries tagged session:{body.session_id}"] if body.session_id is not None else [])
                + ([f"bus messages of project {body.project!r}"] if body.project is not None else [])
            )
            field = "$.session_id" if body.session_id is not None else "$.project"
            raise NotFound(f"no {what} in that time", field=field, code="session_not_found")
        lines: list[str] = []
        sources: list[str | None] = []
        for row in rows:
            for line in row["text"].split("\n"):
                lines.append(line)
                sources.append(row["record_hash"])
        return lines, sources

    # ---- critic -----------------------------------------------------------------------------------------

    async def critic(self, agent_id: str, body: CriticIn, key: str | None = None) -> tuple[CriticResult, bool]:
        """Review stored candidates, new proposals, or (given neither) every candidate still `proposed`.

        With an idempotency `key` already used, the first reply and False (nothing stored or reviewed)."""
        new = []
        for i, p in enumerate(body.candidates):
            evidence = await self._evidence(p.evidence_refs, f"$.candidates[{i}].evidence_refs")
            text = canonical.normalize_content(p.text)
            if not text:
                raise InvalidInput("text is empty after trimming whitespace", field=f"$.candidates[{i}].text")
            new.append(
                NewCandidate(
                    kind=p.kind,
                    text=text,
                    salience=p.salience,
                    confidence=p.confidence,
                    evidence_refs=evidence,
                    truth_state=p.truth_state,
                    synthetic=p.synthetic,
                    source="critic",
                    proposed_by=agent_id,
                    tags=list(p.tags),
                )
            )
        ids = list(dict.fromkeys(body.candidate_ids))
        if not ids and not new:  # the candidates the agent may see: public ones and those of its spaces
            ids = await self.db.read(
                lambda c: store.proposed_ids(c, MAX_CANDIDATES_PER_CALL, self.spaces.sight_of(c, agent_id))
            )
        return await self._store_and_review(
            new, ids, reply=lambda result: result, once=Once.of(agent_id, key, "critic", CriticResult), viewer=agent_id
        )

    # ---- consolidate ------------------------------------------------------------------------------------

    async def consolidate(
        self, agent_id: str, body: ConsolidateIn, since_ms: int | None, key: str | None = None
    ) -> tuple[CandidateOut, bool]:
        """Summarise the distribution of recent entries into one needs_review hypothesis carrying them all.

        With an idempotency `key` already used, the first reply and False (nothing stored)."""
        sight = await self._space_of_call(agent_id, body.space)
        rows = list(
            reversed(
                await self.db.read(
                    lambda c: store.recent_entries(c, body.limit, body.include_synthetic, body.tags, since_ms, sight)
                )
            )
        )
        if not rows:
            raise InvalidInput("no recent entries match; nothing to consolidate", code="nothing_to_consolidate")
        text, distribution = _distribution(rows)
        new = NewCandidate(
            kind="consolidation",
            text=text,
            salience=0.5,
            confidence=0.5,
            evidence_refs=[r["record_hash"] for r in rows],
            truth_state="hypothesis",
            synthetic=False,
            source="consolidate",
            proposed_by=agent_id,
            payload={"distribution": distribution},
            space=body.space,
        )
        return await self._store_and_review(
            [new], reply=lambda result: result.candidates[0], once=Once.of(agent_id, key, "consolidate", CandidateOut)
        )

    # ---- fixed templates --------------------------------------------------------------------------------

    async def _template(
        self,
        agent_id: str,
        kind: str,
        source: str,
        made: tuple[str, dict[str, Any]],
        refs: list[str],
        synthetic: bool,
        key: str | None,
    ) -> tuple[TemplateResult, bool]:
        evidence = await self._evidence(refs, "$.evidence_refs")
        text, payload = made
        new = NewCandidate(
            kind=kind,
            text=text,
            salience=0.5,
            confidence=0.5,
            evidence_refs=evidence,
            truth_state="simulation" if synthetic else "hypothesis",
            synthetic=synthetic,
            source=source,
            proposed_by=agent_id,
            payload=payload,
        )
        return await self._store_and_review(
            [new],
            reply=lambda result: TemplateResult(candidate=result.candidates[0], template=payload),
            once=Once.of(agent_id, key, source, TemplateResult),
        )

    async def simulate_future(
        self, agent_id: str, body: SimulateFutureIn, key: str | None = None
    ) -> tuple[TemplateResult, bool]:
        """Five named paths of fixed considerations for a goal, stored as a simulation."""
        made = templates.simulate_future(body.goal)
        return await self._template(agent_id, "simulation", "simulate-future", made, body.evidence_refs, True, key)

    async def stakeholder_simulation(
        self, agent_id: str, body: StakeholderIn, key: str | None = None
    ) -> tuple[TemplateResult, bool]:
        """Fixed concerns and message adjustments for a stakeholder, labelled speculative, stored as a simulation."""
        made = templates.stakeholder_simulation(body.stakeholder, body.proposal)
        return await self._template(
            agent_id, "stakeholder_simulation", "stakeholder-simulation", made, body.evidence_refs, True, key
        )

    async def incubate(self, agent_id: str, body: IncubateIn, key: str | None = None) -> tuple[TemplateResult, bool]:
        """The problem crossed with six fixed reframing seeds, stored as a needs_review hypothesis."""
        made = templates.incubate(body.problem)
        return await self._template(agent_id, "incubation", "incubate", made, body.evidence_refs, False, key)

    # ---- listing ----------------------------------------------------------------------------------------

    async def candidates(self, q: CandidateQuery, viewer: Viewer) -> CandidateList:
        """A page of the candidates `viewer` may see (public ones and those of its spaces), newest first."""
        rows = await self.db.read(
            lambda c: store.page(c, list(q.status), q.limit, q.offset, self.spaces.sight_of(c, viewer))
        )
        return CandidateList(
            candidates=[store.out(r) for r in rows], next_offset=q.offset + q.limit if len(rows) == q.limit else None
        )

    async def candidate(self, candidate_id: int, viewer: Viewer) -> CandidateOut:
        """One candidate, to a viewer that may see it (404 otherwise, as for one never proposed)."""
        return store.out(await self._candidate_row(candidate_id, viewer))

    async def _candidate_row(self, candidate_id: int, viewer: Viewer) -> sqlite3.Row:
        rows = await self.db.read(lambda c: store.fetch(c, [candidate_id], self.spaces.sight_of(c, viewer)))
        if not rows:
            raise NotFound(f"no candidate {candidate_id}", field="candidate_id", code="candidate_not_found")
        return rows[0]


# ---- transaction bodies and reads ---------------------------------------------------------------------------


def evidence(conn: Conn, refs: list[str], field: str, sight: Sight) -> list[str]:
    """The record hashes `refs` name, without repeats; 404 `evidence_not_found` naming `field[i]`."""
    return list(
        dict.fromkeys(
            entries_store.require_ref(conn, ref, "evidence", sight, field=f"{field}[{i}]", code="evidence_not_found")
            for i, ref in enumerate(refs)
        )
    )


def store_and_review(
    conn: Conn,
    new: list[NewCandidate],
    ids: list[int],
    reply: Callable[[CriticResult], R],
    once: Once | None,
    now: int,
    sight: Sight,
) -> tuple[R, bool]:
    """`Proposals._store_and_review` in its transaction; `ids` must be candidates `sight` sees (404 otherwise)."""
    if once is not None:
        earlier = store.earlier_reply(conn, once.agent_id, once.key, once.operation)
        if earlier is not None:
            return msgspec.json.decode(earlier, type=once.reply_type), False
    rows = store.fetch(conn, ids, sight)
    found = {r["id"] for r in rows}
    for i, cid in enumerate(ids):
        if cid not in found:
            raise NotFound(f"no candidate {cid}", field=f"$.candidate_ids[{i}]", code="candidate_not_found")
    ids += store.insert(conn, new, now)
    skipped = []
    for row in store.fetch(conn, ids, OPERATOR):
        if row["status"] in ("promoted", "rejected") or row["decision"] is not None:
            skipped.append(int(row["id"]))
            continue
        source = json.loads(row["payload"]).get("source_ref")  # a line is no duplicate of its own source
        verdict = critic.review(
            kind=row["kind"],
            text=row["text"],
            evidence_refs=json.loads(row["evidence_refs"]),
            truth_state=row["truth_state"],
            synthetic=bool(row["synthetic"]),
            duplicate=store.duplicate_of(conn, row["text"], besides=source, sight=store.in_space(row["space"]))
            is not None,
        )
        store.apply_review(conn, int(row["id"]), verdict, now)
    reviewed = [store.out(r) for r in store.fetch(conn, ids, OPERATOR) if int(r["id"]) not in skipped]
    result = reply(CriticResult(candidates=reviewed, skipped=skipped))
    if once is not None:
        store.keep_reply(conn, once.agent_id, once.key, once.operation, msgspec.json.encode(result), now)
    return result, True


def _present(source: str | None) -> list[str]:
    return [] if source is None else [source]


def _distribution(rows: list[sqlite3.Row]) -> tuple[str, dict[str, Any]]:
    """Counts of the entries' types, performatives, truth states, authors and tags, and a sentence saying so."""

    def top(counter: Counter[str], n: int = 5) -> list[list[Any]]:
        return [[k, v] for k, v in sorted(counter.items(), key=lambda kv: (-kv[1], kv[0]))[:n]]

    dist = {
        "entries": len(rows),
        "from": rows[0]["created_at"],
        "to": rows[-1]["created_at"],
        "entry_type": top(Counter(r["entry_type"] for r in rows)),
        "performative": top(Counter(r["performative"] for r in rows), 9),
        "truth_state": top(Counter(r["truth_state"] for r in rows)),
        "authors": len({r["author_id"] for r in rows}),
        "top_authors": top(Counter(r["author_id"] for r in rows), 3),
        "top_tags": top(Counter(t for r in rows for t in json.loads(r["tags"]))),
    }

    def fmt(pairs: list[list[Any]]) -> str:
        return ", ".join(f"{k} {v}" for k, v in pairs) or "none"

    text = (
        f"Consolidation of {dist['entries']} recent entries ({dist['from']} to {dist['to']}):"
        f" entry types {fmt(dist['entry_type'])}; performatives {fmt(dist['performative'])};"
        f" truth states {fmt(dist['truth_state'])}; {dist['authors']} authors; top tags {fmt(dist['top_tags'])}."
    )
    return text, dist
