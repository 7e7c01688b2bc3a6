"""Scenario: one `bbs serve` node and three agents (supervisor, researcher, specialist) run by the reference
runtime with scripted engines.

The supervisor's scheduled synthesis review asks the researcher for a finding; the researcher gets the request
as tier 1, acknowledges it and posts the finding; the specialist's batch of billing notifications crosses its
activation threshold and it contradicts the finding; the researcher gets the contradiction as tier 1 and
responds. The scenario checks the resulting graph and each agent's working memory and prints a transcript.

Run: python -m scenarios.household   (exit status 0 on success, 1 on failure)
"""

from __future__ import annotations

import asyncio
import json
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp

from agent.client import Client
from agent.runtime.config import load_skill, parse_config
from agent.runtime.engines import Prompt, ScriptedEngine
from agent.runtime.loop import AgentRuntime
from agent.runtime.memory import WorkingMemory
from scenarios.fednet import ScenarioFailed, ServedNode
from wire.api import ReadQuery

SOULS = {
    "supervisor": "You coordinate the household's research. You ask precise questions and keep people on task.",
    "researcher": "You measure things carefully and report numbers with their conditions.",
    "specialist": "You know the billing system deeply and correct claims that miss how it behaves.",
}
CONFIGS = {
    "supervisor": """
# The ack of its request (directed, links to its own entry) scores about 5.7: recorded, not engaged.
scoring: {activation_threshold: 8.0}
schedule: {synthesis_review: "* * * * *", hygiene: null}
model: {engine: scripted, profile: small}
""",
    "researcher": """
scoring: {watched_tags: [billing]}
schedule: {synthesis_review: null, hygiene: null}
model: {engine: scripted, profile: medium}
""",
    "specialist": """
# Watches billing: the request and the finding together cross 3.0; so does the researcher's reply (it links to
# the specialist's own entry), which the specialist reads and lets stand.
scoring: {watched_tags: [billing], activation_threshold: 3.0}
schedule: {synthesis_review: null, hygiene: "0 4 * * *"}
model: {engine: scripted, profile: small}
""",
}


class Clock:
    """The agents' shared clock: starts at the real time and moves a minute per round."""

    def __init__(self) -> None:
        self.now = time.time()

    def __call__(self) -> float:
        return self.now


def reply(*actions: dict[str, Any]) -> str:
    return json.dumps({"actions": list(actions)})


def scripts(ids: dict[str, str]) -> dict[str, Callable[[Prompt], str]]:
    asked: list[bool] = []

    def supervisor(p: Prompt) -> str:
        if p.trigger == "synthesis_review" and not asked:
            asked.append(True)
            return reply(
                {
                    "op": "post",
                    "entry_type": "task",
                    "performative": "request",
                    "content": "Please measure the billing API's cache hit rate and report it.",
                    "tags": ["billing"],
                    "directed_to": [ids["researcher"]],
                }
            )
        return reply()

    def researcher(p: Prompt) -> str:
        for env in p.batch:
            if env.performative == "request":
                return reply(
                    {"op": "ack", "request": str(env.entry_id), "note": "On it: measuring over the last day."},
                    {
                        "op": "post",
                        "content": "The billing API's cache hit rate is 41% over the last 24 hours.",
                        "tags": ["billing", "perf"],
                        "confidence": 0.8,
                        "links": [{"target": str(env.entry_id), "link_type": "responds_to"}],
                    },
                )
            if env.reason == "contradiction":
                return reply(
                    {
                        "op": "post",
                        "content": "Agreed: the 41% included the cold-cache hour after the deploy. "
                        "Steady state is 78%.",
                        "tags": ["billing", "perf"],
                        "confidence": 0.85,
                        "links": [
                            {"target": str(env.entry_id), "link_type": "responds_to"},
                            {"target": env.link_targets[0], "link_type": "supersedes"},
                        ],
                    }
                )
        return reply()

    def specialist(p: Prompt) -> str:
        for env in p.batch:
            entry = p.fetched.get(env.record_hash)
            if (
                env.entry_type == "finding"
                and entry is not None
                and "41%" in entry.content
                and "78%" not in entry.content
            ):
                return reply(
                    {
                        "op": "post",
                        "entry_type": "contradiction",
                        "content": "41% is the cold-cache rate right after a deploy; the cache warms within an "
                        "hour and then serves 78%.",
                        "tags": ["billing"],
                        "confidence": 0.9,
                        "links": [{"target": str(env.entry_id), "link_type": "contradicts"}],
                    }
                )
        return reply()

    return {"supervisor": supervisor, "researcher": researcher, "specialist": specialist}


def _sayer(transcript: list[str], who: str) -> Callable[[str], None]:
    return lambda line: transcript.append(f"{who:>10}: {line}")


def check(condition: bool, what: str) -> None:
    if not condition:
        raise ScenarioFailed(what)


async def run(root: Path, transcript: list[str]) -> None:
    """Run the story, appending to `transcript` as it goes (so a failure still shows how far it got)."""
    node = ServedNode("household", root / "node")
    node.init()
    clock = Clock()
    runtimes: dict[str, AgentRuntime] = {}
    async with aiohttp.ClientSession() as session:
        try:
            await node.start(session)
            created = {name: await node.agent(session, name) for name in SOULS}
            keys = {name: c["Authorization"].split()[1] for name, c in created.items()}
            ids = {name: c["X-Agent"] for name, c in created.items()}
            engines = {name: ScriptedEngine(fn) for name, fn in scripts(ids).items()}
            for name in SOULS:
                runtimes[name] = AgentRuntime(
                    parse_config(CONFIGS[name]),
                    SOULS[name],
                    load_skill(),
                    Client(node.url, api_key=keys[name]),
                    engines[name],
                    WorkingMemory(root / f"{name}.sqlite", clock),
                    clock=clock,
                    say=_sayer(transcript, name),
                )
            for rt in runtimes.values():  # every agent is running (subscribed) before anything happens
                await rt.start()
            for n in range(4):
                clock.now += 61  # a minute per round: the supervisor's review comes due each round
                transcript.append(f"--- round {n + 1}")
                for name in ("supervisor", "researcher", "specialist"):
                    await runtimes[name].tick()
            transcript.extend(await verify(node, ids, runtimes))
        finally:
            for rt in runtimes.values():
                await rt.client.close()
                rt.memory.close()
            node.kill()
            if node.log is not None:
                node.log.close()


async def verify(node: ServedNode, ids: dict[str, str], rt: dict[str, AgentRuntime]) -> list[str]:
    """Check the graph and each agent's working memory; return the board as transcript lines."""
    async with Client(node.url, api_key=node.token) as admin:
        by = {name: (await admin.search(author=[ids[name]], limit=50)).entries for name in SOULS}
        check(len(by["supervisor"]) == 1, f"supervisor posted {len(by['supervisor'])} entries, expected 1")
        request = by["supervisor"][0]
        check(request.performative == "request" and request.directed_to == [ids["researcher"]], "the request")
        perf = {e.performative: e for e in by["researcher"]}
        check(
            len(by["researcher"]) == 3 and set(perf) == {"ack", "inform"},
            f"researcher: an ack and two findings, got {[(e.entry_type, e.performative) for e in by['researcher']]}",
        )
        findings = sorted((e for e in by["researcher"] if e.performative == "inform"), key=lambda e: e.id)
        first, revised = findings
        check(len(by["specialist"]) == 1 and by["specialist"][0].entry_type == "contradiction", "the contradiction")
        contradiction = by["specialist"][0]
        links = (await admin.read([str(request.id), str(first.id), str(contradiction.id)])).links
        edges = {(lk.source, lk.link_type, lk.target) for lk in links}
        expected = {
            (perf["ack"].record_hash, "responds_to", request.record_hash),
            (first.record_hash, "responds_to", request.record_hash),
            (contradiction.record_hash, "contradicts", first.record_hash),
            (revised.record_hash, "responds_to", contradiction.record_hash),
            (revised.record_hash, "supersedes", first.record_hash),
        }
        check(expected <= edges, f"graph edges missing: {expected - edges}")
        superseded = (await admin.read([str(first.id)], ReadQuery(include_links=False))).entries[0]
        check(superseded.superseded, "the first finding is marked superseded")
    name_of = {v: k for k, v in ids.items()}
    board = sorted((e for entries in by.values() for e in entries), key=lambda e: e.id)
    lines = ["--- the board"] + [
        f"{name_of[e.author_id]:>10}: #{e.id} {e.entry_type}/{e.performative}: {e.content}" for e in board
    ]
    lines += [
        f"      link: #{ {x.record_hash: x.id for x in board}.get(a, '?') } {t} #"
        f"{ {x.record_hash: x.id for x in board}.get(b, '?') }"
        for a, t, b in sorted(expected)
    ]

    r, s, v = rt["researcher"].memory, rt["supervisor"].memory, rt["specialist"].memory
    tier1 = [e["reason"] for e in r.events("scored") if e["tier"] == 1]
    check(tier1 == ["directed_request", "contradiction"], f"researcher's tier-1 notifications: {tier1}")
    check(all(d["trigger"] == "immediate" for d in r.events("decision")), "researcher engaged only on tier 1")
    check([a["op"] for a in r.actions()] == ["ack", "post", "post"], "researcher's agent_actions")
    check(all(a["status"] == "ok" for m in (r, s, v) for a in m.actions()), "every action succeeded")
    check(r.own_hashes() == {e.record_hash for e in by["researcher"]}, "researcher remembers its own entries")
    check([a["op"] for a in s.actions()] == ["post"], "supervisor's agent_actions")
    quiet = [d for d in s.events("decision") if d["trigger"] == "batch"]
    check(bool(quiet) and not any(d["engaged"] for d in quiet), "the supervisor's ack notification stays below 8.0")
    check(len(s.events("engaged")) == 4, "the supervisor's review ran once per round")
    batches = [d for d in v.events("decision") if d["trigger"] == "batch"]
    check(
        [(d["engaged"], len(d["chosen"])) for d in batches] == [(True, 2), (True, 1)],
        f"specialist: the request and finding engage together, then the reply to its entry ({batches})",
    )
    check(all(d["total"] >= 3.0 for d in batches), "specialist's batch scores cross its threshold")
    links_to_own = [e["features"]["links_to_own"] for e in v.events("scored")]
    check(links_to_own == [0.0, 0.0, 1.0], f"only the reply links to the specialist's entry: {links_to_own}")
    check([a["op"] for a in v.actions()] == ["post"], "specialist's agent_actions")
    threads = r.summaries(limit=5)  # the request, the ack, both findings and the contradiction: one cluster
    check(
        len(threads) == 1 and threads[0]["summary"].count("\n") == 4 and "me (ack)" in threads[0]["summary"],
        f"the researcher's memory holds the exchange as one thread: {threads}",
    )
    check(v.thread_count() >= 1, "the specialist kept thread summaries")
    check(not any(m.events("malformed_output") for m in (r, s, v)), "no malformed model output")
    return lines


def main() -> int:
    transcript: list[str] = []
    with tempfile.TemporaryDirectory(prefix="bbs-household-") as tmp:
        try:
            asyncio.run(run(Path(tmp), transcript))
        except ScenarioFailed as exc:
            print("\n".join(transcript))
            print(f"household scenario: FAILED: {exc}")
            return 1
    print("\n".join(transcript))
    print("household scenario: OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
