"""One decision per event across processes (issue 41, docs/decisions.md record 90): two processes of one node on one
PostgreSQL database (`two_processes`: each its own folder, `Node` and real aiohttp server), real Ed25519 keys, and
real concurrency (both requests in flight at once through `asyncio.gather`), each case a few times over."""

from __future__ import annotations

import asyncio
import json
import shutil
from typing import Any

import pytest
from aiohttp.test_utils import TestClient

from identity import keys, records
from node.agents import sessions as agent_auth
from node.store.conn import Conn
from node.workflows.fence import FENCE_NAME
from tests.conftest import AgentCreds, FakeClock
from tests.node.agents.test_key_events import (
    identity_document,
    page,
    post_signed,
    rotation,
    signed,
    submit,
    version_of,
)
from tests.node.api_helpers import SelfSigner, entry_record, get_json, hash_of, post, problem, self_signer
from tests.node.multiproc.conftest import TwoProcesses

pytestmark = pytest.mark.postgresql

ROUNDS = 3
WF = "/v1/agent-workflows"
DM = "/v1/default-mode"


def now_ms(clock: FakeClock) -> int:
    return int(clock() * 1000)


async def agent(tp: TwoProcesses, name: str) -> AgentCreds:
    """An agent whose key the node keeps, created through process a (the API key works on both)."""
    made = await tp.a.node.agents.create(name, name.title())
    return AgentCreds(made.name, made.agent_id, made.api_key)


def admin(tp: TwoProcesses) -> AgentCreds:
    """The node's admin, as a caller."""
    return AgentCreds("admin", "", tp.admin_token)


async def call(client: TestClient, method: str, path: str, who: Any, body: Any = None) -> tuple[int, Any]:
    """A request; (status, JSON body)."""
    resp = await client.request(method, path, json=body, headers=who.headers)
    return resp.status, await resp.json(content_type=None)


async def scalar(tp: TwoProcesses, sql: str, *args: Any) -> Any:
    """One value read through process a's reader."""

    def run(conn: Conn) -> Any:
        return conn.execute(sql, args).fetchone()[0]

    return await tp.a.node.db.read(run)


async def key_proof_session(client: TestClient, key: keys.SigningKey) -> dict[str, str]:
    """Headers carrying a key-proof session of `key`'s agent, opened through `client`'s process (a challenge is
    answered where it was asked: pending challenges are per process)."""
    resp = await client.post("/v1/auth/challenge", json={"agent_id": key.did})
    challenge = await resp.json()
    assert resp.status == 201, challenge
    message = agent_auth.challenge_message(challenge["node_id"], key.did, challenge["challenge"])
    body = {"agent_id": key.did, "challenge": challenge["challenge"], "signature": key.sign(message)}
    resp = await client.post("/v1/auth/session", json=body)
    opened = await resp.json()
    assert resp.status == 201, opened
    return {"Authorization": f"Bearer {opened['token']}"}


# ---- an agent's key rotated through one process ------------------------------------------------------------------


async def test_a_key_rotated_through_a_signs_nothing_through_b(two_processes: TwoProcesses, clock: FakeClock) -> None:
    tp = two_processes
    for i in range(ROUNDS):
        who: SelfSigner = await self_signer(tp.a.node, f"rover{i}")
        now = now_ms(clock)
        first = entry_record(who.key, f"before the rotation {i}", created_ms=now - 1000)
        await post_signed(tp.b.client, who, first, 201)  # b's authority cache is loaded: no key event of rover yet
        session = await key_proof_session(tp.b.client, who.key)  # proved through b by the first key, cached there
        assert (await tp.b.client.get("/v1/subscriptions", headers=session)).status == 200
        new = keys.SigningKey.generate()
        vouched = [version_of(first), version_of(await identity_document(tp.a.node, who.agent_id))]
        event = rotation(who.agent_id, who.key, new, vouched, created_ms=now)
        await submit(tp.a.client, who, event, [page(who.agent_id, who.key, event, vouched)], 201)
        before = await scalar(tp, "SELECT count(*) FROM records")
        # the old (first) key through b, alone and racing a post by the new key through a
        thief = entry_record(who.key, f"after, by the old key {i}", created_ms=now)
        fresh = signed({**records.unsigned(entry_record(who.key, f"by the new key {i}", created_ms=now))}, new)
        refused, stored = await asyncio.gather(
            post_signed(tp.b.client, who, thief, 422), post_signed(tp.a.client, who, fresh, 201)
        )
        problem(refused, 422, "not_current_key", "$.record.author_id")
        assert stored["record_hash"] == hash_of(fresh)
        assert await scalar(tp, "SELECT count(*) FROM records") == before + 1
        # b takes the new key's records and shows the history a stored
        again = signed({**records.unsigned(entry_record(who.key, f"new key through b {i}", created_ms=now))}, new)
        await post_signed(tp.b.client, who, again, 201)
        shown = await get_json(tp.b.client, f"/v1/agents/{who.agent_id}", who)
        assert shown["key_history"]["current_key"] == new.did
        # the session proved by the rotated-out key: gone on b within CREDENTIALS_CHECK_MS (b's writer has also
        # reloaded its authority cache by now, which forgets b's cached tokens at once)
        clock.advance(1.0)
        assert (await tp.b.client.get("/v1/subscriptions", headers=session)).status == 401
        assert (await tp.a.client.get("/v1/subscriptions", headers=session)).status == 401


async def test_a_node_kept_key_rotated_through_a_is_not_used_through_b(
    two_processes: TwoProcesses, clock: FakeClock
) -> None:
    tp = two_processes
    for i in range(ROUNDS):
        creds = await agent(tp, f"keeper{i}")
        await post(tp.b.client, creds, content=f"signed by the first key {i}")  # b caches the first key
        status, rotated = await call(tp.a.client, "POST", f"/v1/agents/{creds.agent_id}/signing-key", admin(tp))
        assert status == 201, rotated
        # at once: b still holds the old key in memory, and its writer refuses what it signed with it
        data = await post(tp.b.client, creds, None, content=f"at once through b {i}")
        if "record_hash" not in data:
            problem(data, 422, "not_current_key")
        else:  # b had already looked at the credential epoch: signed by the new key
            assert await _signing_key(tp, data["record_hash"]) == rotated["signing_key"]
        # within CREDENTIALS_CHECK_MS b has forgotten it, and signs with the new key
        clock.advance(1.0)
        data = await post(tp.b.client, creds, content=f"a second later through b {i}")
        assert await _signing_key(tp, data["record_hash"]) == rotated["signing_key"]
        old_key_posts = await scalar(
            tp,
            "SELECT count(*) FROM records WHERE author_id = ? AND kind = 'entry' AND seq > (SELECT seq FROM records"
            " WHERE hash = ?)",
            creds.agent_id,
            rotated["event"],
        )
        signed_new = await _signed_by(tp, creds.agent_id, rotated["signing_key"])
        assert old_key_posts == signed_new  # every entry after the rotation is signed by the new key


async def _signing_key(tp: TwoProcesses, record_hash: str) -> str | None:
    body = await scalar(tp, "SELECT body FROM records WHERE hash = ?", record_hash)
    found: str | None = json.loads(bytes(body)).get("signing_key")
    return found


async def _signed_by(tp: TwoProcesses, author: str, key: str) -> int:
    def run(conn: Conn) -> int:
        rows = conn.execute("SELECT body FROM records WHERE author_id = ? AND kind = 'entry'", (author,)).fetchall()
        return sum(1 for (body,) in rows if json.loads(bytes(body)).get("signing_key") == key)

    return await tp.a.node.db.read(run)


# ---- a space member removed through one process ------------------------------------------------------------------


async def test_a_member_removed_through_a_neither_reads_nor_writes_through_b(two_processes: TwoProcesses) -> None:
    tp = two_processes
    owner = await agent(tp, "owner")
    for i in range(ROUNDS):
        bob = await agent(tp, f"bob{i}")
        status, made = await call(tp.a.client, "POST", "/v1/spaces", owner, {"name": f"family{i}"})
        assert status == 201, made
        space = made["space_id"]
        members = f"/v1/spaces/{space}/members"
        status, _ = await call(tp.a.client, "POST", members, owner, {"agent_id": bob.agent_id, "role": "writer"})
        assert status == 201
        kept = await post(tp.b.client, bob, content=f"a member's post {i}", space=space)
        assert (await call(tp.b.client, "GET", f"/v1/spaces/{space}", bob))[0] == 200
        # the removal through a, racing a post of bob's through b: either the post came first, or it is refused
        removed, racing = await asyncio.gather(
            call(tp.a.client, "DELETE", f"{members}/{bob.agent_id}", owner),
            post(tp.b.client, bob, None, content=f"racing the removal {i}", space=space),
        )
        assert removed[0] == 201, removed
        if "record_hash" not in racing:
            problem(racing, 404, "unknown_space")
        status, shown = await call(tp.b.client, "GET", f"/v1/spaces/{space}", bob)
        assert (status, shown["code"]) == (404, "unknown_space")
        problem(await post(tp.b.client, bob, 404, content=f"after the removal {i}", space=space), 404, "unknown_space")
        status, page = await call(tp.b.client, "GET", f"/v1/entries/{kept['record_hash']}", bob)
        assert status == 404, page
        problem(await get_json(tp.b.client, "/v1/feed", bob, 404, params={"space": space}), 404, "unknown_space")


# ---- one Idempotency-Key through both processes at once ----------------------------------------------------------


async def test_one_idempotency_key_through_a_and_b_at_once_stores_one_record(
    two_processes: TwoProcesses, clock: FakeClock
) -> None:
    tp = two_processes
    who = await self_signer(tp.a.node, "retrier")
    for i in range(ROUNDS):
        now = now_ms(clock)
        # a client's retry re-signed a millisecond later: two different records under one key
        one = entry_record(who.key, f"once {i}", created_ms=now)
        two = entry_record(who.key, f"once {i}", created_ms=now + 1)
        headers = {**who.headers, "Idempotency-Key": f"retry-{i}"}
        answers = await asyncio.gather(
            tp.a.client.post("/v1/entries", json={"record": one}, headers=headers),
            tp.b.client.post("/v1/entries", json={"record": two}, headers=headers),
        )
        bodies = [await resp.json() for resp in answers]
        assert sorted(resp.status for resp in answers) == [200, 201], bodies
        assert bodies[0]["record_hash"] == bodies[1]["record_hash"] in (hash_of(one), hash_of(two))
        stored = await scalar(tp, "SELECT count(*) FROM entries WHERE content = ?", f"once {i}")
        assert stored == 1
        # node-signed, through both at once
        creds = await agent(tp, f"poster{i}")
        keyed = {**creds.headers, "Idempotency-Key": f"node-signed-{i}"}
        both = await asyncio.gather(
            *(
                process.client.post(
                    "/v1/entries",
                    json={"entry_type": "finding", "performative": "inform", "content": f"kept once {i}"},
                    headers=keyed,
                )
                for process in (tp.a, tp.b)
            )
        )
        bodies = [await resp.json() for resp in both]
        assert {resp.status for resp in both} <= {200, 201} and bodies[0]["record_hash"] == bodies[1]["record_hash"]
        assert await scalar(tp, "SELECT count(*) FROM entries WHERE content = ?", f"kept once {i}") == 1
        clock.advance(0.01)


# ---- two agents leasing one task through both processes at once --------------------------------------------------


async def test_two_agents_leasing_one_task_through_a_and_b_get_one_lease(
    two_processes: TwoProcesses, clock: FakeClock
) -> None:
    tp = two_processes
    ann, ben = await agent(tp, "ann"), await agent(tp, "ben")
    await share_lease_fence(tp, ann)
    for i in range(ROUNDS):
        status, declared = await call(tp.a.client, "POST", f"{WF}/tasks", ann, {"key": f"job{i}", "title": "Job"})
        assert status == 201, declared
        (sa, la), (sb, lb) = await asyncio.gather(
            call(tp.a.client, "POST", f"{WF}/tasks/job{i}/lease", ann, {"seconds": 60}),
            call(tp.b.client, "POST", f"{WF}/tasks/job{i}/lease", ben, {"seconds": 60}),
        )
        assert sorted([sa, sb]) == [201, 409], (la, lb)
        winner, loser = (ann, lb) if sa == 201 else (ben, la)
        assert loser["code"] == "lease_held"
        for process in (tp.a, tp.b):
            status, task = await call(process.client, "GET", f"{WF}/tasks/job{i}", ann)
            assert status == 200 and task["lease"]["holder"] == winner.agent_id, task
        grants = await scalar(
            tp,
            "SELECT count(*) FROM records WHERE kind = 'task_event' AND hash IN (SELECT hash FROM task_events"
            " WHERE event = 'lease')",
        )
        assert grants == i + 2  # and the warm-up's


async def share_lease_fence(tp: TwoProcesses, who: AgentCreds) -> None:
    """Grant one lease through a, then give b a copy of a's lease fence (node/workflows/fence.py): the fence is a
    file in one data folder, and a folder without it next to a database that had one holds every grant back for a
    day (a restore into a new folder). Making the fence node-wide is the lease fence's own part of issue 41; this
    test is about the grant itself, decided once in the write transaction."""
    status, _ = await call(tp.a.client, "POST", f"{WF}/tasks", who, {"key": "warm-up", "title": "Warm-up"})
    assert status == 201
    status, _ = await call(tp.a.client, "POST", f"{WF}/tasks/warm-up/lease", who, {"seconds": 60})
    assert status == 201
    fence = tp.a.folder / FENCE_NAME
    if fence.exists():
        shutil.copy2(fence, tp.b.folder / FENCE_NAME)


# ---- an inbox notification leased through one process ------------------------------------------------------------


async def test_a_notification_leased_through_a_is_not_handed_out_through_b_and_is_acked_once(
    two_processes: TwoProcesses, clock: FakeClock
) -> None:
    tp = two_processes
    alice, bob = await agent(tp, "alice"), await agent(tp, "bob")
    for i in range(ROUNDS):
        await post(tp.a.client, alice, performative="request", content=f"do it {i}", directed_to=[bob.agent_id])
        polls = await asyncio.gather(*(get_json(p.client, "/v1/inbox", bob) for p in (tp.a, tp.b, tp.a, tp.b)))
        handed = [n for poll in polls for n in poll["notifications"]]
        assert len(handed) == 1, polls  # one poll leased it; the others found it leased
        (note,) = handed
        clock.advance(30)  # the lease (60 s) lives: neither process hands it out again
        for process in (tp.a, tp.b):
            assert (await get_json(process.client, "/v1/inbox", bob))["notifications"] == []
        acks = await asyncio.gather(
            *(call(p.client, "POST", "/v1/inbox/ack", bob, {"ids": [note["notification_id"]]}) for p in (tp.a, tp.b))
        )
        assert sorted(body["acknowledged"] for _, body in acks) == [0, 1], acks
        clock.advance(61)  # past the lease: acknowledged, it never comes back
        for process in (tp.a, tp.b):
            assert (await get_json(process.client, "/v1/inbox", bob))["notifications"] == []


# ---- an equivocating pair posted through both processes ----------------------------------------------------------


async def test_an_equivocating_pair_through_a_and_b_keeps_one_body_per_address(
    two_processes: TwoProcesses, clock: FakeClock
) -> None:
    tp = two_processes
    who = await self_signer(tp.a.node, "twofaced")
    for i in range(ROUNDS):
        now = now_ms(clock)
        # one address (author, created_at, type, performative, content), two bodies (their tags differ)
        one = entry_record(who.key, f"said twice {i}", created_ms=now, tags=["one"])
        two = entry_record(who.key, f"said twice {i}", created_ms=now, tags=["two"])
        assert hash_of(one) == hash_of(two) and one != two
        answers = await asyncio.gather(
            call(tp.a.client, "POST", "/v1/entries", who, {"record": one}),
            call(tp.b.client, "POST", "/v1/entries", who, {"record": two}),
        )
        assert sorted(status for status, _ in answers) == [201, 409], answers
        refused = next(body for status, body in answers if status == 409)
        problem(refused, 409, "equivocation")
        kept = one if answers[0][0] == 201 else two
        assert await scalar(tp, "SELECT count(*) FROM records WHERE hash = ?", hash_of(one)) == 1
        for process in (tp.a, tp.b):
            shown = await get_json(process.client, f"/v1/entries/{hash_of(one)}", who)
            (entry,) = [e for e in shown["entries"] if e["record_hash"] == hash_of(one)]
            assert entry["tags"] == kept["tags"]
        clock.advance(0.01)


# ---- a promotion through both processes at once ------------------------------------------------------------------


async def test_a_promotion_through_a_and_b_at_once_promotes_once(two_processes: TwoProcesses) -> None:
    tp = two_processes
    alice, bob, carol = await agent(tp, "alice"), await agent(tp, "bob"), await agent(tp, "carol")
    for i in range(ROUNDS):
        cid = await _approved_candidate(tp, alice, f"Group commit stays on by default, round {i}")
        # two agents promote it at once, one through each process
        (sa, pa), (sb, pb) = await asyncio.gather(
            call(tp.a.client, "POST", f"{DM}/promote/{cid}", bob),
            call(tp.b.client, "POST", f"{DM}/promote/{cid}", carol),
        )
        assert sorted([sa, sb]) in ([201, 400], [201, 409]), (pa, pb)
        promoted, refused = (pa, pb) if sa == 201 else (pb, pa)
        assert refused["code"] in ("candidate_not_promotable", "duplicate_of_entry")
        assert await _promotions(tp, cid) == 1
        for process in (tp.a, tp.b):
            status, cand = await call(process.client, "GET", f"{DM}/candidates/{cid}", alice)
            assert status == 200 and cand["promoted_entry"] == promoted["entry"]["record_hash"]
        # one agent, one Idempotency-Key, through both at once: one entry, both answer it
        cid = await _approved_candidate(tp, alice, f"Retries carry their idempotency key, round {i}")
        keyed = {**bob.headers, "Idempotency-Key": f"promote-{i}"}
        answers = await asyncio.gather(
            *(p.client.post(f"{DM}/promote/{cid}", json=None, headers=keyed) for p in (tp.a, tp.b))
        )
        bodies = [await resp.json() for resp in answers]
        assert {resp.status for resp in answers} <= {200, 201}, bodies
        assert bodies[0]["entry"]["record_hash"] == bodies[1]["entry"]["record_hash"]
        assert sorted(body["created"] for body in bodies) == [False, True]
        assert await _promotions(tp, cid) == 1


async def _approved_candidate(tp: TwoProcesses, who: AgentCreds, text: str) -> int:
    evidence = await post(tp.a.client, who, content=f"Evidence for: {text}")
    status, out = await call(
        tp.a.client,
        "POST",
        f"{DM}/critic",
        who,
        {"candidates": [{"kind": "decision", "text": text, "evidence_refs": [evidence["record_hash"]],
                         "truth_state": "fact"}]},
    )  # fmt: skip
    assert status == 200, out
    (cand,) = out["candidates"]
    assert cand["status"] == "approved", cand
    return int(cand["id"])


async def _promotions(tp: TwoProcesses, cid: int) -> int:
    """Entries promoted from candidate `cid` (its provenance names it) that the log holds."""

    def run(conn: Conn) -> int:
        rows = conn.execute("SELECT metadata FROM entries WHERE authority = 'derived'").fetchall()
        found = 0
        for (metadata,) in rows:
            meta = json.loads(metadata) if isinstance(metadata, str | bytes) else metadata
            found += (meta or {}).get("default_mode", {}).get("candidate_id") == cid
        return found

    return await tp.a.node.db.read(run)
