"""node.default_mode.store: the node-local candidates table, run inside the node's own read and write jobs."""

from __future__ import annotations

import sqlite3
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import msgspec
import pytest

from identity import keys, records
from node.agents import store as agents_store
from node.default_mode import store
from node.default_mode.critic import Review
from node.errors import Conflict
from node.features import LOG
from node.service import Node
from node.spaces.sight import OPERATOR, PUBLIC, Sight
from node.store import projections
from node.store.conn import Conn
from tests.conftest import AgentCreds, FakeClock
from tests.node.api_helpers import entry_record, self_signer
from tests.pg_fixtures import on_both_engines
from wire.api import PostEntry
from wire.workflows import PostMessage

MakeAgent = Callable[[str], Awaitable[AgentCreds]]


def candidate(text: str = "the kettle needs descaling", **over: Any) -> store.NewCandidate:
    fields: dict[str, Any] = {
        "kind": "open_loop",
        "text": text,
        "salience": 0.5,
        "confidence": 0.5,
        "evidence_refs": [],
        "truth_state": "hypothesis",
        "synthetic": False,
        "source": "reflect",
        "proposed_by": "did:key:zproposer",
    }
    return store.NewCandidate(**{**fields, **over})


async def insert(node: Node, *rows: store.NewCandidate) -> list[int]:
    now = node.now_ms()
    return await node.db.write(lambda c: store.insert(c, list(rows), now))


async def outs(node: Node, ids: list[int]) -> list[Any]:
    return await node.db.read(lambda c: [store.out(r) for r in store.fetch(c, ids, sight=OPERATOR)])


async def test_inserted_candidates_are_proposed_and_read_back(node: Node, clock: FakeClock) -> None:
    ids = await insert(
        node,
        candidate(tags=["b", "a", "b"], payload={"z": 1, "a": [2]}, evidence_refs=["e" * 64]),
        candidate("second", synthetic=True, truth_state="simulation"),
    )
    assert ids == sorted(ids) and len(ids) == 2
    first, second = await outs(node, ids[::-1])  # fetch answers in id order
    assert (first.id, first.status, first.tags, first.payload, first.evidence_refs) == (
        ids[0],
        "proposed",
        ["a", "b"],
        {"z": 1, "a": [2]},
        ["e" * 64],
    )
    assert (first.critic_decision, first.critic_reasons, first.risk_flag, first.evidence_flag) == (None, [], None, None)
    assert (first.reviewed_at, first.promoted_entry, first.decision) == (None, None, None)
    assert first.created_at.startswith("20") and first.created_at.endswith("Z")
    assert second.synthetic and second.truth_state == "simulation"
    assert await outs(node, []) == [] and await outs(node, [424242]) == []


async def test_pages_and_the_critics_queue(node: Node) -> None:
    ids = await insert(node, *(candidate(f"c{i}") for i in range(5)))
    rejected = Review("rejected", "hypothesis", False, False, ("duplicate_of_entry",))
    now = node.now_ms()
    await node.db.write(lambda c: store.apply_review(c, ids[1], rejected, now))

    def page(statuses: list[str], limit: int, offset: int) -> Awaitable[list[int]]:
        return node.db.read(lambda c: [r["id"] for r in store.page(c, statuses, limit, offset, sight=OPERATOR)])

    assert await page([], 10, 0) == ids[::-1]
    assert await page([], 2, 1) == [ids[3], ids[2]]
    assert await page(["rejected"], 10, 0) == [ids[1]]
    assert await page(["proposed", "rejected"], 10, 3) == [ids[1], ids[0]]
    assert await node.db.read(lambda c: store.proposed_ids(c, 3, sight=OPERATOR)) == [
        ids[0],
        ids[2],
        ids[3],
    ]  # oldest first


async def test_the_critic_a_person_and_a_promotion(node: Node, clock: FakeClock) -> None:
    [cid] = await insert(node, candidate())
    now = node.now_ms()
    review = Review("needs_review", "hypothesis", True, False, ("risk_mentioned", "no_evidence"))
    await node.db.write(lambda c: store.apply_review(c, cid, review, now))
    [out] = await outs(node, [cid])
    assert (out.status, out.critic_decision, out.critic_reasons, out.risk_flag, out.evidence_flag) == (
        "needs_review",
        "needs_review",
        ["risk_mentioned", "no_evidence"],
        True,
        False,
    )
    assert out.reviewed_at is not None
    clock.advance(5)
    later = node.now_ms()
    await node.db.write(lambda c: store.decide(c, cid, "approve", "admin", "looks right", later))
    approved = Review("rejected", "fact", False, True, ())
    await node.db.write(lambda c: store.apply_review(c, cid, approved, later))  # a person's decision stands
    [out] = await outs(node, [cid])
    assert (out.status, out.decision, out.decided_by, out.decision_note, out.truth_state) == (
        "approved",
        "approve",
        "admin",
        "looks right",
        "hypothesis",  # a decision never changes truth_state
    )
    await node.db.write(lambda c: store.mark_promoted(c, cid, "h" * 64, "did:key:zauthor", later, "admin"))
    await node.db.write(lambda c: store.mark_promoted(c, cid, "i" * 64, "did:key:zother", later))  # once only
    await node.db.write(lambda c: store.decide(c, cid, "reject", "admin", None, later))  # too late
    [out] = await outs(node, [cid])
    assert (out.status, out.promoted_entry, out.promoted_by, out.promote_requested_by, out.decision) == (
        "promoted",
        "h" * 64,
        "did:key:zauthor",
        "admin",
        "approve",
    )


async def test_duplicate_of_an_entry_by_content(node: Node, make_agent: MakeAgent) -> None:
    alice = await make_agent("alice")
    body = msgspec.convert({"entry_type": "finding", "performative": "inform", "content": "Café  is open\n"}, PostEntry)
    entry, _ = await node.entries.post(alice.agent_id, body, "promote-1")
    assert await node.db.read(lambda c: store.duplicate_of(c, "Café  is open")) == entry.record_hash
    assert await node.db.read(lambda c: store.duplicate_of(c, "Cafe\u0301  is open  ")) == entry.record_hash  # NFC
    assert await node.db.read(lambda c: store.duplicate_of(c, "something else")) is None
    made_by = (alice.agent_id, "promote-1")  # the entry this key produced is not a duplicate of itself
    assert await node.db.read(lambda c: store.duplicate_of(c, "Café  is open", made_by)) is None


async def test_replies_are_kept_per_key_and_operation(node: Node, make_agent: MakeAgent) -> None:
    alice = await make_agent("alice")
    now = node.now_ms()
    assert await node.db.read(lambda c: store.earlier_reply(c, alice.agent_id, "k", "dm_reflect")) is None
    await node.db.write(lambda c: store.keep_reply(c, alice.agent_id, "k", "dm_reflect", b'{"a":1}', now))
    assert await node.db.read(lambda c: store.earlier_reply(c, alice.agent_id, "k", "dm_reflect")) == b'{"a":1}'
    with pytest.raises(Conflict) as info:
        await node.db.read(lambda c: store.earlier_reply(c, alice.agent_id, "k", "dm_critic"))
    assert info.value.code == "idempotency_key_reused"
    with pytest.raises(sqlite3.IntegrityError):  # one reply per key
        await node.db.write(lambda c: store.keep_reply(c, alice.agent_id, "k", "dm_reflect", b"{}", now))


async def test_local_author_by_name_or_did(node: Node, make_agent: MakeAgent) -> None:
    alice = await make_agent("alice")
    carol = await self_signer(node, "carol")
    by_name = await node.db.read(lambda c: store.local_author(c, "alice"))
    by_did = await node.db.read(lambda c: store.local_author(c, alice.agent_id))
    assert by_name is not None and by_did is not None
    assert (by_name["agent_id"], bool(by_name["key_kept"])) == (alice.agent_id, True) == (by_did[0], bool(by_did[1]))
    kept = await node.db.read(lambda c: store.local_author(c, "carol"))
    assert kept is not None and (kept["agent_id"], bool(kept["key_kept"])) == (carol.agent_id, False)
    assert await node.db.read(lambda c: store.local_author(c, "nobody")) is None
    assert await node.db.read(lambda c: store.local_author(c, "did:key:zunknown")) is None


# ---- what the proposing side reads ------------------------------------------------------------------------------


async def test_session_records_are_a_sessions_entries_and_its_projects_messages(
    node: Node, make_agent: MakeAgent, clock: FakeClock
) -> None:
    alice = await make_agent("alice")

    async def entry(content: str, tags: list[str], truth_state: str = "fact") -> str:
        body = PostEntry(entry_type="finding", performative="inform", content=content, tags=tags,
                         truth_state=truth_state)  # type: ignore[arg-type]  # fmt: skip
        made, _ = await node.entries.post(alice.agent_id, body, None)
        return made.record_hash

    async def message(text: str, project: str = "backups") -> None:
        await node.bus.post_message(alice.agent_id, PostMessage(message_type="chat", body=text, project=project))

    await message("before the window")
    clock.advance(10)
    since = node.now_ms()
    tagged = await entry("tagged line", ["session:s1"])
    clock.advance(1)
    await message("a bus line")
    await entry("a simulation of it", ["session:s1"], truth_state="simulation")  # left out
    await entry("another session", ["session:s2"])
    await message("another project", project="garden")
    until = node.now_ms()
    clock.advance(10)
    await entry("after the window", ["session:s1"])

    def texts(session_id: str | None, project: str | None, cap: int = 100) -> Awaitable[list[str]]:
        return node.db.read(
            lambda c: [r["text"] for r in store.session_records(c, session_id, project, since, until, cap)]
        )

    assert await texts("s1", "backups") == ["tagged line", "a bus line"]  # oldest first, both kinds
    assert await texts("s1", None) == ["tagged line"]
    assert await texts(None, "backups") == ["a bus line"]
    assert await texts("s3", None) == []
    rows = await node.db.read(lambda c: store.session_records(c, "s1", None, None, None, 1))
    assert [r["record_hash"] for r in rows] == [tagged]  # at most `cap` of each kind


async def test_recent_entries_newest_first_filtered(node: Node, make_agent: MakeAgent, clock: FakeClock) -> None:
    alice = await make_agent("alice")

    async def entry(content: str, tags: list[str], truth_state: str = "fact") -> str:
        body = PostEntry(entry_type="finding", performative="inform", content=content, tags=tags,
                         truth_state=truth_state)  # type: ignore[arg-type]  # fmt: skip
        made, _ = await node.entries.post(alice.agent_id, body, None)
        return made.record_hash

    old = await entry("old", ["roof"])
    clock.advance(10)
    since = node.now_ms()
    roof = await entry("roof", ["roof"])
    shed = await entry("shed", ["shed"])
    sim = await entry("imagined", ["roof"], truth_state="simulation")

    async def hashes(limit: int, synthetic: bool, tags: list[str], since_ms: int | None) -> list[str]:
        rows = await node.db.read(lambda c: store.recent_entries(c, limit, synthetic, tags, since_ms))
        return [r["record_hash"] for r in rows]

    assert await hashes(10, False, [], None) == [shed, roof, old]
    assert await hashes(10, True, [], None) == [sim, shed, roof, old]
    assert await hashes(10, False, [], since) == [shed, roof]
    assert await hashes(10, True, ["roof"], None) == [sim, roof, old]
    assert await hashes(1, False, ["roof", "shed"], None) == [shed]


def _candidates_story(conn: Conn, alice: keys.SigningKey) -> list[Any]:
    """Alice registered here, two public entries (one a session's), three candidates (one in a space, one citing an
    entry as evidence) reviewed, decided and promoted, a reply kept, then the cited entry's evidence forgotten. Every
    store function's answer, in order."""
    t0, space = 1_767_323_045_000, "5" * 64
    first = entry_record(alice, "the kettle needs descaling", created_ms=t0, tags=["session:s1"])
    second = entry_record(alice, "the door squeaks", created_ms=t0 + 1, tags=["home"])
    conn.execute("BEGIN")
    agents_store.insert_local_agent_txn(conn, "alice", alice.did, b"seed", t0)
    for record in (first, second):
        projections.append_many(conn, [projections.Incoming(record, *records.check(record))], origin="local", now_ms=t0)
    cited = records.compute_hash(first)
    ids = store.insert(
        conn,
        [
            candidate("one", evidence_refs=[cited], tags=["b", "a", "b"], payload={"z": 1, "a": [2]}),
            candidate("two", synthetic=True, truth_state="simulation", salience=0.25),
            candidate("three", space=space),
        ],
        t0,
    )
    store.apply_review(conn, ids[0], Review("needs_review", "hypothesis", True, False, ("risk_mentioned",)), t0 + 1)
    store.decide(conn, ids[1], "reject", "admin", "no", t0 + 2)
    store.mark_promoted(conn, ids[2], "h" * 64, alice.did, t0 + 3, "admin")
    store.keep_reply(conn, alice.did, "k1", "reflect", f'{{"cites": "{cited}"}}'.encode(), t0)
    conn.execute("COMMIT")
    outs = [store.out(r) for r in store.fetch(conn, ids, OPERATOR)]
    answers: list[Any] = [
        ids,
        outs,
        [r["id"] for r in store.fetch(conn, ids, PUBLIC)],
        [r["id"] for r in store.page(conn, [], 10, 0, OPERATOR)],
        [r["id"] for r in store.page(conn, ["proposed", "needs_review"], 10, 0, OPERATOR)],
        [r["id"] for r in store.page(conn, [], 1, 1, Sight(frozenset({space})))],
        store.proposed_ids(conn, 10, OPERATOR),
        store.duplicate_of(conn, "the kettle needs descaling"),
        store.duplicate_of(conn, "the kettle needs descaling", besides=cited),
        store.duplicate_of(conn, "the kettle needs descaling", made_by=(alice.did, "k1")),
        store.duplicate_of(conn, "no such entry"),
        store.earlier_reply(conn, alice.did, "k1", "reflect"),
        store.earlier_reply(conn, alice.did, "k2", "reflect"),
        tuple(store.local_author(conn, "alice") or ()),
        store.local_author(conn, "nobody"),
        [tuple(r) for r in store.session_records(conn, "s1", "chores", None, None, 10)],
        [tuple(r) for r in store.session_records(conn, "s1", None, t0 + 1, None, 10)],
        [tuple(r) for r in store.recent_entries(conn, 10, False, [], None)],
        [tuple(r) for r in store.recent_entries(conn, 10, True, ["home"], t0 + 1)],
    ]
    conn.execute("BEGIN")
    answers.append(store.forget_evidence_txn(conn, cited))
    conn.execute("COMMIT")
    answers.append([r["id"] for r in store.fetch(conn, ids, OPERATOR)])
    answers.append(store.earlier_reply(conn, alice.did, "k1", "reflect"))
    return answers


def test_the_candidates_store_answers_alike_on_either_engine(tmp_path: Path, pg_migrated_url: str) -> None:
    alice = keys.SigningKey.generate()
    expected, got = on_both_engines(tmp_path, pg_migrated_url, LOG, lambda conn: _candidates_story(conn, alice))
    assert got == expected  # PostgreSQL's true is SQLite's 1
    ids = expected[0]
    assert [o.status for o in expected[1]] == ["needs_review", "rejected", "promoted"]
    assert expected[1][0].tags == ["a", "b"] and expected[1][0].payload == {"a": [2], "z": 1}
    assert expected[2] == ids[:2] and expected[3] == ids[::-1] and expected[4] == [ids[0]] and expected[5] == [ids[1]]
    assert expected[6] == [] and expected[7] is not None and expected[8] is None and expected[10] is None
    assert expected[11] is not None and expected[12] is None and expected[14] is None
    assert len(expected[15]) == 1 and expected[16] == [] and len(expected[17]) == 2 and len(expected[18]) == 1
    assert expected[19] == 1 and expected[20] == ids[1:] and expected[21] is None  # the reply and its key forgotten
