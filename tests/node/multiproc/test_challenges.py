"""Pending key-proof challenges of one node served by two processes (issue 41, docs/decisions.md record 86): asked at
one process, answered at the other, once; bounded per agent and overall as in memory; never through the writer."""

from __future__ import annotations

import asyncio
import time

from node.agents.challenges import MAX_PENDING, PER_AGENT, SharedChallenges
from tests.node.agents.test_sessions import challenge, own_key_agent, own_key_agent_named, proof
from tests.node.multiproc.conftest import TwoProcesses


async def test_a_challenge_asked_at_a_is_answered_at_b_once(two_processes: TwoProcesses) -> None:
    a, b = two_processes.a, two_processes.b
    key = await own_key_agent(a.node)
    ch = await challenge(a.client, key.did)
    resp = await b.client.post("/v1/auth/session", json=proof(key, ch))
    assert resp.status == 201, await resp.text()
    token = (await resp.json())["token"]
    assert (await a.client.get("/v1/inbox", headers={"Authorization": f"Bearer {token}"})).status == 200
    for process in (a, b):  # a second answer, at either process
        again = await process.client.post("/v1/auth/session", json=proof(key, ch))
        assert again.status == 401 and (await again.json())["code"] == "challenge_invalid"


async def test_two_answers_of_one_challenge_at_both_processes_at_once_open_one_session(
    two_processes: TwoProcesses,
) -> None:
    a, b = two_processes.a, two_processes.b
    key = await own_key_agent(a.node)
    ch = await challenge(b.client, key.did)
    answers = await asyncio.gather(*(p.client.post("/v1/auth/session", json=proof(key, ch)) for p in (a, b, a, b)))
    assert sorted(r.status for r in answers) == [201, 401, 401, 401]
    count = await a.node.db.read(lambda c: c.execute("SELECT count(*) FROM auth_sessions").fetchone()[0])
    assert count == 1


async def test_a_failed_proof_uses_the_challenge_up_at_every_process(two_processes: TwoProcesses) -> None:
    a, b = two_processes.a, two_processes.b
    key = await own_key_agent(a.node)
    ch = await challenge(a.client, key.did)
    other = await own_key_agent_named(a.node, "other")
    bad = await b.client.post("/v1/auth/session", json=proof(key, ch, signer=other))
    assert (await bad.json())["code"] == "bad_signature"
    late = await a.client.post("/v1/auth/session", json=proof(key, ch))
    assert late.status == 401 and (await late.json())["code"] == "challenge_invalid"


async def test_open_challenges_are_bounded_per_agent_across_processes(two_processes: TwoProcesses) -> None:
    a, b = two_processes.a, two_processes.b
    key = await own_key_agent(a.node)
    issued = [await challenge((a, b)[i % 2].client, key.did) for i in range(PER_AGENT + 4)]
    assert await a.node.challenges.pending() == PER_AGENT == await b.node.challenges.pending()
    oldest = await b.client.post("/v1/auth/session", json=proof(key, issued[0]))
    assert (await oldest.json())["code"] == "challenge_invalid"
    newest = await a.client.post("/v1/auth/session", json=proof(key, issued[-1]))
    assert newest.status == 201


async def test_the_overall_bound_evicts_the_oldest_and_expired_challenges_are_swept(
    two_processes: TwoProcesses,
) -> None:
    side = two_processes.a.node.side
    assert side is not None
    assert (SharedChallenges(side).per_agent, SharedChallenges(side).total) == (PER_AGENT, MAX_PENDING)
    small = SharedChallenges(side, per_agent=100, total=10)
    now = int(time.time() * 1000)
    for i in range(15):
        await small.issue(f"nonce-{i:02}", f"agent-{i % 3}", now + 60_000, now)
    assert await small.pending() == 10
    assert await small.consume("nonce-04", "agent-1") is None  # evicted: the five oldest
    assert await small.consume("nonce-05", "agent-1") is None  # held, but not this agent's: kept
    assert await small.consume("nonce-05", "agent-2") == now + 60_000
    assert await small.consume("nonce-05", "agent-2") is None  # once
    expired = SharedChallenges(side)  # a process's first ask sweeps what has expired
    await expired.issue("fresh", "agent-x", now + 180_000, now + 120_000)  # the ring's all expire at +60 s
    assert await expired.pending() == 1


async def test_a_flood_of_asks_and_failed_proofs_never_reaches_the_writer(two_processes: TwoProcesses) -> None:
    a, b = two_processes.a, two_processes.b
    key = await own_key_agent(a.node)
    jobs = [p.node.db.stats.jobs for p in (a, b)]
    asked = [await challenge((a, b)[i % 2].client, key.did) for i in range(40)]
    other = await own_key_agent_named(b.node, "other")
    jobs = [p.node.db.stats.jobs - before for p, before in zip((a, b), jobs, strict=True)]
    bad = await a.client.post("/v1/auth/session", json=proof(key, asked[-1], signer=other))
    assert (await bad.json())["code"] == "bad_signature"
    # the node's background work may write meanwhile, and importing `other` is one write: a few jobs, not one per ask
    assert sum(jobs) <= 6


async def test_bad_answers_are_4xx_at_either_process(two_processes: TwoProcesses) -> None:
    a, b = two_processes.a, two_processes.b
    key = await own_key_agent(a.node)
    ch = await challenge(a.client, key.did)
    for process in (a, b):
        for challenge_text in ("nul\x00in it", "\x01", "x" * 43):  # U+0000 and U+0001 reach the table escaped
            resp = await process.client.post("/v1/auth/session", json=proof(key, {**ch, "challenge": challenge_text}))
            assert 400 <= resp.status < 500, await resp.text()
    resp = await b.client.post("/v1/auth/session", json=proof(key, ch))
    assert resp.status == 201  # the right one is still held
