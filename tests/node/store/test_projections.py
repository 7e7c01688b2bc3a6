"""node.store.projections: a verified record is appended to the log once, then projected into its tables."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from identity import canonical, keys, records
from node.features import LOG
from node.service import Node
from node.store import db, equivocation, pg_conn, projections
from node.store.conn import Conn
from tests.conftest import AgentCreds
from tests.node.api_helpers import entry_record, link_record, self_signer
from tests.pg_fixtures import OpenStore, on_both_engines
from wire.time import format_ms

MakeAgent = Callable[[str], Awaitable[AgentCreds]]
ALICE = keys.SigningKey.generate()
BOB = keys.SigningKey.generate()
T0 = 1_767_323_045_000
HOME = keys.SigningKey.generate().did  # the identity documents' home node


def incoming(record: dict[str, Any], scope: str = "federation") -> projections.Incoming:
    record_hash, decoded = records.check(record)
    return projections.Incoming(record, record_hash, decoded, scope)


async def append(node: Node, *recs: dict[str, Any]) -> list[tuple[int, bool]]:
    items = [incoming(r) for r in recs]
    now = node.now_ms()
    return await node.db.write(lambda c: projections.append_many(c, items, origin="local", now_ms=now))


async def rows(node: Node, sql: str, *params: Any) -> list[tuple[Any, ...]]:
    return await node.db.read(lambda c: [tuple(r) for r in c.execute(sql, params).fetchall()])


def agent_record(key: keys.SigningKey, name: str, created_ms: int, home: str) -> dict[str, Any]:
    body = {
        "kind": "agent",
        "schema_version": canonical.SCHEMA_VERSION,
        "author_id": key.did,
        "created_at": format_ms(created_ms),
        "display_name": name,
        "description": "",
        "home_node": home,
    }
    return records.sign(body, key)


async def test_an_entry_is_appended_once_and_projected(node: Node) -> None:
    target = entry_record(BOB, "the target", created_ms=T0)
    entry = entry_record(
        ALICE,
        "tagged and directed",
        created_ms=T0 + 1,
        tags=["a", "b"],
        directed_to=[BOB.did],
        links=[{"target": records.compute_hash(target), "link_type": "supports", "annotation": "yes"}],
    )
    [(seq, new)] = await append(node, entry)
    assert new
    assert await append(node, entry) == [(seq, False)]
    entry_hash = records.compute_hash(entry)
    assert await rows(node, "SELECT seq, hash, kind, origin FROM records") == [(seq, entry_hash, "entry", "local")]
    [(eid, author, created_ms, tags)] = await rows(node, "SELECT id, author_id, created_ms, tags FROM entries")
    assert (eid, author, created_ms, json.loads(tags)) == (seq, ALICE.did, T0 + 1, ["a", "b"])
    assert await rows(node, "SELECT tag FROM entry_tags ORDER BY tag") == [("a",), ("b",)]
    assert await rows(node, "SELECT agent_id FROM entry_directed") == [(BOB.did,)]
    assert await rows(node, "SELECT ordinal, source_hash, link_type, annotation FROM links") == [
        (0, entry_hash, "supports", "yes")
    ]


async def test_a_run_takes_consecutive_seqs_and_stores_a_repeat_once(node: Node) -> None:
    first = entry_record(ALICE, "first", created_ms=T0)
    [(seq1, _)] = await append(node, first)
    second, third = entry_record(ALICE, "second", created_ms=T0 + 1), entry_record(ALICE, "third", created_ms=T0 + 2)
    result = await append(node, second, first, third, second)
    assert result == [(seq1 + 1, True), (seq1, False), (seq1 + 2, True), (seq1 + 1, False)]
    assert await rows(node, "SELECT count(*) FROM entries") == [(3,)]
    assert await node.db.write(lambda c: projections.append_many(c, [], origin="local", now_ms=0)) == []


async def test_append_is_append_many_of_one(node: Node) -> None:
    item = incoming(entry_record(ALICE, "one", created_ms=T0), scope="local")
    now = node.now_ms()

    def job(conn: sqlite3.Connection) -> tuple[int, bool]:
        return projections.append(conn, item.record, item.hash, item.decoded, origin="peer", now_ms=now, scope="local")

    seq, new = await node.db.write(job)
    assert new and await rows(node, "SELECT scope, origin, received_ms FROM records") == [("local", "peer", now)]
    assert await node.db.write(job) == (seq, False)


async def test_a_retraction_is_derived_whichever_entry_arrives_last(node: Node) -> None:
    claim = entry_record(ALICE, "a claim", created_ms=T0)
    claim_hash = records.compute_hash(claim)
    retract = entry_record(
        ALICE,
        "I retract it",
        created_ms=T0 + 1,
        performative="retract",
        links=[{"target": claim_hash, "link_type": "supersedes", "annotation": ""}],
    )
    await append(node, retract)  # the retraction first: not decidable yet
    assert await rows(node, "SELECT count(*) FROM links WHERE link_type = 'retracted_by'") == [(0,)]
    await append(node, claim)
    retract_hash = records.compute_hash(retract)
    assert await rows(node, "SELECT ordinal, source_hash, target_hash FROM links WHERE link_type = 'retracted_by'") == [
        (-1, claim_hash, retract_hash)
    ]


async def test_only_the_author_can_retract(node: Node) -> None:
    claim = entry_record(ALICE, "alice's claim", created_ms=T0)
    retract = entry_record(
        BOB,
        "bob cannot retract it",
        created_ms=T0 + 1,
        performative="retract",
        links=[{"target": records.compute_hash(claim), "link_type": "supersedes", "annotation": ""}],
    )
    await append(node, claim, retract)
    assert await rows(node, "SELECT count(*) FROM links WHERE link_type = 'retracted_by'") == [(0,)]


async def test_a_link_may_arrive_before_its_entries(node: Node) -> None:
    source, target = entry_record(ALICE, "source", created_ms=T0), entry_record(BOB, "target", created_ms=T0)
    link = link_record(
        BOB, records.compute_hash(source), records.compute_hash(target), "contradicts", created_ms=T0 + 5
    )
    await append(node, link)
    assert await rows(node, "SELECT origin_hash, ordinal, link_type FROM links") == [
        (records.compute_hash(link), 0, "contradicts")
    ]
    await append(node, source, target)
    assert await rows(node, "SELECT count(*) FROM entries") == [(2,)]


async def test_the_newest_identity_document_wins(node: Node) -> None:
    old = agent_record(ALICE, "Old Name", T0, node.node_id)
    new = agent_record(ALICE, "New Name", T0 + 1000, node.node_id)
    await append(node, new)
    await append(node, old)  # arrives late: loses
    assert await rows(node, "SELECT display_name, created_ms FROM agents WHERE id = ?", ALICE.did) == [
        ("New Name", T0 + 1000)
    ]


async def test_a_contradiction_notifies_only_outside_a_rebuild(node: Node) -> None:
    carol = await self_signer(node, "carol")
    claim = entry_record(carol.key, "carol's claim", created_ms=T0)
    rebuttal = entry_record(
        BOB,
        "no",
        created_ms=T0 + 1,
        links=[{"target": records.compute_hash(claim), "link_type": "contradicts", "annotation": ""}],
    )
    await append(node, claim, rebuttal)
    notified = await rows(node, "SELECT agent_id, reason FROM notifications")
    assert notified == [(carol.agent_id, "contradiction")]
    before = await node.db.read(projections.snapshot)
    assert await node.db.write(projections.rebuild) == (await rows(node, "SELECT count(*) FROM records"))[0][0]
    assert await node.db.read(projections.snapshot) == before
    assert await rows(node, "SELECT agent_id, reason FROM notifications") == notified  # node-local, untouched


async def test_rebuild_replays_the_log_into_the_same_tables(node: Node) -> None:
    claim = entry_record(ALICE, "claim", created_ms=T0, tags=["x"])
    retract = entry_record(
        ALICE,
        "retracted",
        created_ms=T0 + 1,
        performative="retract",
        links=[{"target": records.compute_hash(claim), "link_type": "supersedes", "annotation": ""}],
    )
    link = link_record(BOB, records.compute_hash(claim), records.compute_hash(retract), "supports", created_ms=T0)
    await append(node, retract, claim, link, agent_record(BOB, "Bob", T0, node.node_id))
    before = await node.db.read(projections.snapshot)
    assert set(before) == set(LOG.tables)
    assert len(before["links"]) == 3 and len(before["agents"]) == 1
    heard: list[tuple[str, int, int | None]] = []
    replayed = await node.db.write(lambda c: projections.rebuild(c, lambda *step: heard.append(step)))
    assert replayed == (await rows(node, "SELECT count(*) FROM records"))[0][0]
    assert heard[0] == (projections.REBUILD_STEP, 0, replayed) and heard[-1] == (
        projections.REBUILD_STEP,
        replayed,
        replayed,
    )
    assert await node.db.read(projections.snapshot) == before


def test_projectors_cover_every_kind_and_cannot_be_changed() -> None:
    assert set(LOG.projectors) >= {"entry", "link", "agent", "message", "task_event"}
    with pytest.raises(TypeError):
        LOG.projectors["note"] = LOG.projectors["entry"]  # type: ignore[index]
    assert "note" not in LOG.projectors
    given: dict[str, projections.Projector] = {"entry": projections.project_entry}
    log = projections.Log(given, ["entries"])  # type: ignore[arg-type]  # a list, as a caller might pass
    given["link"] = projections.project_link
    assert set(log.projectors) == {"entry"} and log.tables == ("entries",)  # copied, not shared


def test_a_rebuild_replays_the_forms_of_format_v3_as_they_were_stored(open_store: OpenStore) -> None:
    """Key events, vouch pages and entries naming a signing_key (accepted from peers) decode by their v3 Structs on
    replay: the rebuilt projections equal the ones the ingest wrote."""
    from node.federation.store import add_peer_txn, ingest_txn
    from node.store import db
    from tests.node.federation import v3_story

    conn = open_store(LOG)
    peer = v3_story.key(0x34).did
    add_peer_txn(conn, "http://127.0.0.1:9", peer, 1_800_000_000_000)
    story = v3_story.story().records
    with db.transaction(conn, immediate=True):  # type: ignore[arg-type]  # either engine (its engine_of)
        ingest_txn(conn, peer, [v3_story.verified(r) for r in story.values()], [], None, 1_800_000_000_000)
    kinds = {r[0] for r in conn.execute("SELECT kind FROM records").fetchall()}
    assert {"key_event", "vouch_page", "entry"} <= kinds
    signed_by_rotated_keys = conn.execute("SELECT count(*) FROM entries WHERE author_id = ?", (v3_story.A,))
    assert signed_by_rotated_keys.fetchone()[0] == 4  # p0, p1, p2b and p4: the valid ones
    before = projections.snapshot(conn)
    with db.transaction(conn, immediate=True):  # type: ignore[arg-type]  # either engine (its engine_of)
        replayed = projections.rebuild(conn)
    assert replayed == conn.execute("SELECT count(*) FROM records").fetchone()[0]
    assert projections.snapshot(conn) == before


# ---- the log's append on both engines (docs/decisions.md record 76: the PostgreSQL store, one module at a time) ----


def _append_txn(conn: Conn, recs: list[dict[str, Any]], now_ms: int, *, commit: bool = True) -> list[tuple[int, bool]]:
    """append_many in a transaction of its own (BEGIN: both engines), committed or rolled back."""
    items = [incoming(r) for r in recs]
    conn.execute("BEGIN")
    try:
        result = projections.append_many(conn, items, origin="local", now_ms=now_ms)
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT" if commit else "ROLLBACK")
    return result


def _log_rows(conn: Conn) -> list[tuple[Any, ...]]:
    return [
        tuple(row)
        for row in conn.execute("SELECT seq, hash, version, kind, author_id, origin, received_ms, body FROM records")
    ]


def test_the_log_appends_once_in_order_and_projects_on_either_engine(open_store: OpenStore) -> None:
    conn = open_store(LOG)
    alice, bob = agent_record(ALICE, "Alice", T0, HOME), agent_record(BOB, "Bob", T0, HOME)
    alice_renamed = agent_record(ALICE, "Alice B.", T0 + 1000, HOME)
    first = _append_txn(conn, [alice, bob, alice], T0)
    (seq_a, _), (seq_b, _), _ = first
    assert first == [(seq_a, True), (seq_b, True), (seq_a, False)] and seq_b > seq_a
    [(seq_c, new)] = _append_txn(conn, [alice_renamed], T0 + 1)
    assert new and seq_c > seq_b
    assert _append_txn(conn, [bob, alice_renamed], T0 + 2) == [(seq_b, False), (seq_c, False)]
    stored = sorted(_log_rows(conn))
    assert [(seq, h, kind, author) for seq, h, _, kind, author, *_ in stored] == [
        (seq_a, records.compute_hash(alice), "agent", ALICE.did),
        (seq_b, records.compute_hash(bob), "agent", BOB.did),
        (seq_c, records.compute_hash(alice_renamed), "agent", ALICE.did),
    ]
    assert [json.loads(bytes(row[7])) for row in stored] == [alice, bob, alice_renamed]  # the signed bytes, kept
    shown = conn.execute("SELECT id, display_name FROM agents ORDER BY display_name").fetchall()
    assert [tuple(row) for row in shown] == [(ALICE.did, "Alice B."), (BOB.did, "Bob")]  # projected: newest wins


def test_a_rolled_back_append_leaves_no_record_and_the_next_seqs_are_read_right(open_store: OpenStore) -> None:
    """PostgreSQL's identity does not hand a rolled-back seq out again (SQLite's AUTOINCREMENT does): the seqs
    append_many returns are the stored ones either way, after every seq the log holds."""
    conn = open_store(LOG)
    [(seq_a, _)] = _append_txn(conn, [agent_record(ALICE, "Alice", T0, HOME)], T0)
    _append_txn(conn, [agent_record(BOB, "Bob", T0, HOME)], T0, commit=False)
    carol = keys.SigningKey.generate()
    result = _append_txn(conn, [agent_record(BOB, "Bob", T0, HOME), agent_record(carol, "Carol", T0, HOME)], T0)
    assert all(new for _, new in result)
    assert [seq for seq, _ in result] == sorted(seq for seq, _ in result) and result[0][0] > seq_a
    stored = {row[1]: row[0] for row in _log_rows(conn)}
    assert sorted(stored.values()) == sorted([seq_a, *(seq for seq, _ in result)])
    assert stored[records.compute_hash(agent_record(BOB, "Bob", T0, HOME))] == result[0][0]


def test_equivocation_reads_what_the_log_holds_on_either_engine(open_store: OpenStore) -> None:
    conn = open_store(LOG)
    alice = agent_record(ALICE, "Alice", T0, HOME)
    [(seq, _)] = _append_txn(conn, [alice], T0)
    address = records.compute_hash(alice)
    assert equivocation.held(conn, [address, "absent", address]) == {
        address: [equivocation.Held(seq, address, "federation")]
    }
    assert equivocation.held(conn, []) == {}
    found = equivocation.members(conn, [seq, seq, seq + 1000])
    assert list(found) == [seq] and found[seq][1] == alice  # the stored record, decoded
    assert found[seq][0] == equivocation.member_of(address, "federation", alice)
    conn.execute("BEGIN")
    equivocation.refuse_txn(conn, "v-refused", address, T0)
    conn.execute("COMMIT")
    assert equivocation.refused(conn, ["v-refused", "v-other"]) == {"v-refused"}


def _rows_of(conn: Conn, sql: str) -> list[tuple[Any, ...]]:
    return [tuple(row) for row in conn.execute(sql)]


def test_entries_are_projected_with_their_tags_and_links_on_either_engine(open_store: OpenStore) -> None:
    conn = open_store(LOG)
    target = entry_record(BOB, "the target", created_ms=T0, tags=["b"])
    entry = entry_record(
        ALICE,
        "tagged and linked",
        created_ms=T0 + 1,
        tags=["a", "b"],
        links=[{"target": records.compute_hash(target), "link_type": "supports", "annotation": "yes"}],
    )
    [(seq_t, _), (seq_e, _)] = _append_txn(conn, [target, entry], T0)
    assert _append_txn(conn, [entry], T0) == [(seq_e, False)]
    entry_hash = records.compute_hash(entry)
    assert _rows_of(conn, "SELECT id, record_hash, author_id, created_ms, tags FROM entries ORDER BY id") == [
        (seq_t, records.compute_hash(target), BOB.did, T0, '["b"]'),
        (seq_e, entry_hash, ALICE.did, T0 + 1, '["a", "b"]'),
    ]
    assert _rows_of(conn, "SELECT entry_id, tag FROM entry_tags ORDER BY tag, entry_id") == [
        (seq_e, "a"),
        (seq_t, "b"),
        (seq_e, "b"),
    ]
    assert _rows_of(conn, "SELECT ordinal, source_hash, target_hash, link_type, annotation FROM links") == [
        (0, entry_hash, records.compute_hash(target), "supports", "yes")
    ]


@pytest.mark.parametrize("retraction_first", [True, False])
def test_a_retraction_is_derived_whichever_entry_arrives_last_on_either_engine(
    open_store: OpenStore, retraction_first: bool
) -> None:
    conn = open_store(LOG)
    claim = entry_record(ALICE, "a claim", created_ms=T0)
    claim_hash = records.compute_hash(claim)
    retract = entry_record(
        ALICE,
        "I retract it",
        created_ms=T0 + 1,
        performative="retract",
        links=[{"target": claim_hash, "link_type": "supersedes", "annotation": ""}],
    )
    bob_retract = entry_record(  # only the author retracts: no link derived from this one
        BOB,
        "bob cannot retract it",
        created_ms=T0 + 2,
        performative="retract",
        links=[{"target": claim_hash, "link_type": "supersedes", "annotation": ""}],
    )
    first, last = ([retract, bob_retract], [claim]) if retraction_first else ([claim], [retract, bob_retract])
    _append_txn(conn, first, T0)
    derived = "SELECT ordinal, source_hash, target_hash FROM links WHERE link_type = 'retracted_by'"
    assert _rows_of(conn, derived) == []
    _append_txn(conn, last, T0)
    assert _rows_of(conn, derived) == [(-1, claim_hash, records.compute_hash(retract))]


def test_the_projections_are_the_same_on_both_engines_and_rebuild_alike(tmp_path: Path, pg_migrated_url: str) -> None:
    """One log appended to SQLite and to PostgreSQL leaves the same projection rows (`snapshot`), and `rebuild`
    replays it into the same rows again on each (on PostgreSQL by emptying the tables: no DDL text is stored)."""
    target = entry_record(BOB, "the target", created_ms=T0, tags=["b"])
    claim = entry_record(ALICE, "a claim", created_ms=T0 + 1)
    story = [
        agent_record(ALICE, "Alice", T0, HOME),
        agent_record(BOB, "Bob", T0, HOME),
        target,
        claim,
        entry_record(
            ALICE,
            "linked",
            created_ms=T0 + 2,
            tags=["a", "b"],
            links=[{"target": records.compute_hash(target), "link_type": "supports", "annotation": "yes"}],
        ),
        entry_record(
            ALICE,
            "I retract it",
            created_ms=T0 + 3,
            performative="retract",
            links=[{"target": records.compute_hash(claim), "link_type": "supersedes", "annotation": ""}],
        ),
        link_record(BOB, records.compute_hash(claim), records.compute_hash(target), "contradicts", created_ms=T0 + 4),
        # two versions of one address (the tags are outside it): the rebuild replays the switch
        entry_record(ALICE, "one address", created_ms=T0 + 5, tags=["x"]),
        entry_record(ALICE, "one address", created_ms=T0 + 5, tags=["y"]),
    ]
    snapshots = []
    for conn in (db.connect(tmp_path / "log.db", log=LOG), pg_conn.connect(pg_migrated_url, log=LOG)):
        try:
            if isinstance(conn, sqlite3.Connection):
                db.migrate(conn)
            for record in story:
                _append_txn(conn, [record], T0)
            before = projections.snapshot(conn)
            conn.execute("BEGIN")
            assert projections.rebuild(conn) == len(story)
            conn.execute("COMMIT")
            assert projections.snapshot(conn) == before
            snapshots.append(before)
        finally:
            conn.close()
    sqlite_rows, postgres_rows = snapshots
    assert postgres_rows == sqlite_rows
    assert len(sqlite_rows["entries"]) == 5 and len(sqlite_rows["agents"]) == 2  # one row for the two versions
    assert sorted(row[5] for row in sqlite_rows["links"]) == ["contradicts", "retracted_by", "supersedes", "supports"]


def _links_numbered_story(conn: Conn) -> tuple[list[tuple[Any, ...]], dict[str, list[tuple[Any, ...]]]]:
    """Links inserted around a rolled-back write job and a rolled-back savepoint, then a rebuild: (the links before
    two versions of one address, by id; the snapshot, checked equal after the rebuild)."""
    target = entry_record(BOB, "the target", created_ms=T0)
    claims = [entry_record(ALICE, f"claim {i}", created_ms=T0 + i) for i in (1, 2)]
    hashes = [records.compute_hash(r) for r in (target, *claims)]

    def linked(content: str, at: int, *targets: str, performative: str = "inform", kind: str = "supports") -> Any:
        links = [{"target": t, "link_type": kind, "annotation": ""} for t in targets]
        return entry_record(ALICE, content, created_ms=at, performative=performative, links=links)

    _append_txn(conn, [target, *claims, linked("two links", T0 + 3, *hashes[:2])], T0)
    _append_txn(conn, [linked("rolled back", T0 + 4, *hashes)], T0, commit=False)  # a write job killed or failed
    conn.execute("BEGIN")  # a merged group whose first post fails: its savepoint is rolled back, the next commits
    conn.execute("SAVEPOINT post")
    projections.append_many(conn, [incoming(linked("failed post", T0 + 5, hashes[0]))], origin="local", now_ms=T0)
    conn.execute("ROLLBACK TO SAVEPOINT post")
    projections.append_many(conn, [incoming(linked("next post", T0 + 6, hashes[1]))], origin="local", now_ms=T0)
    conn.execute("COMMIT")
    retract = linked("I retract both", T0 + 7, *hashes[1:], performative="retract", kind="supersedes")
    contradiction = link_record(BOB, hashes[1], hashes[0], "contradicts", created_ms=T0 + 8)
    _append_txn(conn, [retract, contradiction], T0)  # two retracted_by links derived by one statement
    numbered = _rows_of(conn, "SELECT id, origin_hash, ordinal, link_type FROM links ORDER BY id")
    # two versions of one address, each with a link: the switch deletes the shown version's links
    _append_txn(conn, [linked("one address", T0 + 9, hashes[0]), linked("one address", T0 + 9, hashes[1])], T0)
    before = projections.snapshot(conn)
    conn.execute("BEGIN")
    projections.rebuild(conn)
    conn.execute("COMMIT")
    assert projections.snapshot(conn) == before
    return numbered, before


def test_link_ids_are_max_plus_one_on_both_engines_whatever_was_rolled_back(
    tmp_path: Path, pg_migrated_url: str
) -> None:
    """A link's id is the largest one stored plus one at its insert (SQLite's rowid): a rolled-back write job or
    savepoint spends none on either engine (a PostgreSQL identity would), so a rebuild numbers the links as they
    were, and both engines number one log alike (docs/decisions.md record 81)."""
    (sqlite_links, sqlite_rows), (pg_links, pg_rows) = on_both_engines(
        tmp_path, pg_migrated_url, LOG, _links_numbered_story
    )
    assert [row[0] for row in sqlite_links] == list(range(1, len(sqlite_links) + 1))  # dense: nothing spent
    assert [row[3] for row in sqlite_links].count("retracted_by") == 2
    assert pg_links == sqlite_links
    # the whole links table after the switch, rebuilt alike (seqs, and so entry ids, may differ: a rolled-back
    # write spends seqs on PostgreSQL, never reused on either engine: migration 0049)
    assert pg_rows["links"] == sqlite_rows["links"]
