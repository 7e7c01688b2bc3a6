"""Storing a peer's batch (node/federation/store.py): one set-based append, record by record only when that fails; a
record the projections refuse is the peer's fault (invalid), any other error a fault of this node (internal)."""

from __future__ import annotations

import asyncio
import logging
import sqlite3
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import msgspec
import pytest

from identity import keys
from node.features import LOG
from node.federation.store import (
    MAX_WANT_ATTEMPTS,
    PREFIX_SQL,
    REFUSED_TABLES,
    add_peer_txn,
    ingest_txn,
    peer_statuses,
    prefixed_versions,
)
from node.ops import store as ops_store
from node.store import db, equivocation, waiting
from node.store.conn import POSTGRESQL, Conn, engine_of
from sync.store import Verified
from sync.verify import verify_record
from tests.node.migrated import database_before
from tests.pg_fixtures import OpenStore
from tests.sync.conftest import (
    PeerNode,
    body_of,
    hash_of,
    make_peer,  # noqa: F401  (a fixture: real nodes, registered by this import)
    signed_entry,
)

NOW = 1_800_000_000_000


def verified(record: dict[str, Any]) -> Verified:
    checked = verify_record(body_of(record), hash_of(record))
    assert isinstance(checked, Verified), checked
    return checked


def fresh_db(open_store: OpenStore) -> tuple[Conn, str]:
    """A migrated store of this run's engine (`open_store`) knowing one peer."""
    conn = open_store(LOG)
    peer = keys.SigningKey.generate().did
    add_peer_txn(conn, "http://127.0.0.1:9", peer, NOW)
    return conn, peer


def store(conn: Conn, peer: str, batch: list[Verified]) -> list[tuple[str | None, str]]:
    with db.transaction(conn, immediate=True):  # type: ignore[arg-type]  # either engine (its engine_of)
        outcomes = ingest_txn(conn, peer, batch, [], None, NOW)
    return [(o.hash, o.outcome) for o in outcomes]


POISON = "this entry meets a fault of the node"


def install_fault(conn: Conn) -> None:
    """A fault in the node's own code, for real: Python code the node runs while storing an entry raises. SQLite
    runs it from a trigger on the entries table, for the one entry whose content is POISON (the trigger is TEMP:
    this connection only). PostgreSQL cannot run the node's Python: there the trigger (of this test's database)
    raises an internal error (SQLSTATE XX000), neither a constraint nor anything a peer's record is refused for."""
    if engine_of(conn) == POSTGRESQL:
        conn.execute(
            "CREATE FUNCTION fault() RETURNS trigger LANGUAGE plpgsql AS"
            " $$ BEGIN RAISE EXCEPTION 'a bug met %', NEW.content USING ERRCODE = 'XX000'; END $$"
        )
        conn.execute(
            f"CREATE TRIGGER fault AFTER INSERT ON entries FOR EACH ROW WHEN (NEW.content = '{POISON}')"
            " EXECUTE FUNCTION fault()"
        )
        return

    def fault(content: str) -> None:
        raise RuntimeError(f"a bug met {content!r}")

    assert isinstance(conn, sqlite3.Connection)
    conn.create_function("fault", 1, fault)
    conn.execute(
        f"CREATE TEMP TRIGGER fault AFTER INSERT ON main.entries WHEN NEW.content = '{POISON}'"
        " BEGIN SELECT fault(NEW.content); END"
    )


def test_links_inside_one_batch_resolve_and_absent_targets_are_wanted(open_store: OpenStore) -> None:
    conn, peer = fresh_db(open_store)
    author = keys.SigningKey.generate()
    absent = hash_of(signed_entry(author, "never sent"))
    question = signed_entry(author, "the question")
    answer = signed_entry(author, "an answer", links=(hash_of(question),))
    dangling = signed_entry(author, "points nowhere here", links=(absent,))
    batch = [verified(r) for r in (answer, question, dangling)]
    assert store(conn, peer, batch) == [
        (hash_of(answer), "saved"),  # its target came later in the same batch
        (hash_of(question), "saved"),
        (hash_of(dangling), "pending_link"),
    ]
    assert [r[0] for r in conn.execute("SELECT hash FROM sync_wanted")] == [absent]
    assert store(conn, peer, batch[:1]) == [(hash_of(answer), "duplicate")]
    counters = conn.execute("SELECT saved, duplicate, pending_link FROM peers WHERE node_id = ?", (peer,)).fetchone()
    assert tuple(counters) == (2, 1, 1)


def test_a_record_the_projections_refuse_is_counted_and_the_rest_stored(open_store: OpenStore) -> None:
    conn, peer = fresh_db(open_store)
    author = keys.SigningKey.generate()
    good = [verified(signed_entry(author, f"fine {i}")) for i in range(3)]
    bad = verified(signed_entry(author, "refused"))
    # a decoded form the entries table's CHECK refuses stands for any projection failure
    bad = bad._replace(decoded=msgspec.structs.replace(bad.decoded, entry_type="not a type"))
    outcomes = store(conn, peer, [good[0], bad, good[1], good[2]])
    assert outcomes == [(v.hash, "saved") for v in good] + [(bad.hash, "invalid")]
    stored = {r[0] for r in conn.execute("SELECT hash FROM records")}
    assert stored == {v.hash for v in good}
    assert conn.execute("SELECT count(*) FROM entries").fetchone()[0] == 3
    reason = conn.execute("SELECT reason, last_hash FROM peer_invalid WHERE node_id = ?", (peer,)).fetchone()
    assert tuple(reason) == ("store_refused", bad.hash)


def test_a_fault_of_the_node_is_counted_internal_logged_and_passed(
    open_store: OpenStore, caplog: pytest.LogCaptureFixture
) -> None:
    conn, peer = fresh_db(open_store)
    install_fault(conn)
    author = keys.SigningKey.generate()
    good = [verified(signed_entry(author, f"fine {i}")) for i in range(2)]
    poison = verified(signed_entry(author, POISON))
    with caplog.at_level(logging.ERROR, logger="bbs.sync"):
        outcomes = store(conn, peer, [good[0], poison, good[1]])
    assert outcomes == [(v.hash, "saved") for v in good] + [(poison.hash, "internal")]
    assert {r[0] for r in conn.execute("SELECT hash FROM records")} == {v.hash for v in good}
    counters = conn.execute("SELECT saved, invalid, internal FROM peers WHERE node_id = ?", (peer,)).fetchone()
    assert tuple(counters) == (2, 0, 1)  # never counted against the peer as invalid
    assert conn.execute("SELECT count(*) FROM peer_invalid").fetchone()[0] == 0
    (logged,) = [r for r in caplog.records if r.name == "bbs.sync"]
    assert poison.hash in logged.getMessage() and logged.exc_info is not None  # with its traceback
    assert peer_statuses(conn, NOW)[0].counters.internal == 1


def test_a_wanted_record_that_meets_a_fault_is_tried_again_with_backoff_then_given_up(open_store: OpenStore) -> None:
    conn, peer = fresh_db(open_store)
    install_fault(conn)
    author = keys.SigningKey.generate()
    poison = verified(signed_entry(author, POISON))
    pointing = verified(signed_entry(author, "links to the poison", links=(poison.hash,)))
    assert store(conn, peer, [pointing]) == [(pointing.hash, "pending_link")]

    def wanted() -> tuple[int, int]:
        row = conn.execute("SELECT attempts, next_ms FROM sync_wanted WHERE hash = ?", (poison.hash,)).fetchone()
        return int(row[0]), int(row[1])

    assert wanted() == (0, NOW)
    for attempt in range(1, MAX_WANT_ATTEMPTS + 1):
        assert store(conn, peer, [poison]) == [(poison.hash, "internal")]
        assert wanted() == (attempt, NOW + min(1000 * 2**attempt, 10 * 60 * 1000))  # not obtained: later
    assert conn.execute("SELECT internal FROM peers").fetchone()[0] == MAX_WANT_ATTEMPTS


def test_only_a_refused_record_counts_against_the_peer(open_store: OpenStore) -> None:
    """A constraint of the projection tables refuses the record (here a trigger's RAISE, which SQLite reports as a
    constraint; on PostgreSQL the trigger raises a check_violation): the peer's fault, as a CHECK above, even
    though the node's trigger raised it."""
    conn, peer = fresh_db(open_store)
    if engine_of(conn) == POSTGRESQL:
        conn.execute(
            "CREATE FUNCTION refuse() RETURNS trigger LANGUAGE plpgsql AS"
            " $$ BEGIN RAISE EXCEPTION 'refused by a constraint' USING ERRCODE = 'check_violation'; END $$"
        )
        conn.execute(
            "CREATE TRIGGER refuse AFTER INSERT ON entries FOR EACH ROW WHEN (NEW.content = 'refused')"
            " EXECUTE FUNCTION refuse()"
        )
    else:
        conn.execute(
            "CREATE TEMP TRIGGER refuse AFTER INSERT ON main.entries WHEN NEW.content = 'refused'"
            " BEGIN SELECT RAISE(ABORT, 'refused by a constraint'); END"
        )
    author = keys.SigningKey.generate()
    refused = verified(signed_entry(author, "refused"))
    assert store(conn, peer, [refused]) == [(refused.hash, "invalid")]
    counters = conn.execute("SELECT invalid, internal FROM peers WHERE node_id = ?", (peer,)).fetchone()
    assert tuple(counters) == (1, 0)


async def test_a_fault_met_while_pulling_is_counted_internal_and_backed_off_without_a_loop(
    make_peer: Callable[..., Awaitable[PeerNode]],  # noqa: F811  (the fixture imported above)
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Two real nodes; b's writer meets a fault on one entry of a's. The pull stores the rest and moves its cursor
    past that entry, counts it internal (REST, /metrics), and the loop backs off as after any failure. The
    reconciliation that follows offers the entry once more (internal 2, backed off again); then the loop idles
    on the long poll: no retry without end."""
    a, b = await make_peer("a"), await make_peer("b")
    await a.add_peer(b)
    await b.add_peer(a)
    writer = await a.agent()
    posted = [await a.post(writer, "fine before"), await a.post(writer, POISON), await a.post(writer, "fine after")]
    await b.node.db.write(install_fault)
    caplog.set_level(logging.INFO, logger="bbs.sync")
    task = asyncio.create_task(b.puller(wait_ms=200).run_peer(a.config))

    def failures() -> list[logging.LogRecord]:
        return [r for r in caplog.records if r.name == "bbs.sync" and r.getMessage().startswith("sync with")]

    async def counters() -> tuple[int, int, int]:
        c = (await b.sync.store.statuses())[0].counters
        return c.saved, c.invalid, c.internal

    try:
        for _ in range(400):
            if len(failures()) >= 2:
                break
            await asyncio.sleep(0.05)
        await asyncio.sleep(2.0)  # time for many more rounds of the loop, were it retrying
        assert not task.done()
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    messages = [r.getMessage() for r in failures()]
    # the second counts on from the first: only a round that got through (the reconciliation included) resets it
    assert messages == [f"sync with {a.node_id} failed ({n}): internal: records from {a.node_id} failed in this"
                        " node's code: 1 (see its log)" for n in (1, 2)]  # fmt: skip
    first, second = failures()
    assert second.created - first.created >= 0.5  # the backoff after the first (0.5 s at the least)
    assert await counters() == (3, 0, 2)  # the agent document and two entries; the poison, from feed and reconcile
    assert posted[1] not in await b.hashes() and {posted[0], posted[2]} <= await b.hashes()
    cursor = await b.sync.store.cursor(a.node_id)
    assert cursor is not None and cursor.seq == (await a.sync.store.position())[1]  # past the poison
    faults = [r for r in caplog.records if r.levelno == logging.ERROR and r.exc_info is not None]
    assert len(faults) == 2 and all(posted[1] in r.getMessage() for r in faults)  # each with its traceback
    async with b.session.get(b.url + "/metrics", headers=b.admin) as resp:
        metrics = await resp.text()
    assert f'bbs_sync_records{{outcome="internal",peer="{a.node_id}"}} 2.0' in metrics


@pytest.mark.sqlite_only(reason="SQLite's migration 0023, which PostgreSQL's baseline never runs")
def test_migration_0023_gives_the_v2_release_s_cursors_version_2(tmp_path: Path) -> None:
    """A database of the v2 release (every migration before 0023) with one peer it pulled from and one it did not:
    after 0023 the first cursor is of protocol v2 (reconciled before its first pull by this release), the other
    has none; writing a cursor makes it this release's, keeping the lower too_new_from within an epoch."""
    from node.federation.store import cursor_version, upgrade_cursor_txn, write_cursor_txn
    from sync.messages import PROTOCOL_VERSION
    from sync.store import Cursor, CursorVersion

    conn = database_before(tmp_path / "old.db", 23)
    pulled, fresh = keys.SigningKey.generate().did, keys.SigningKey.generate().did
    for url, peer in (("http://127.0.0.1:9", pulled), ("http://127.0.0.1:10", fresh)):  # as that release wrote them
        conn.execute("INSERT INTO peers (node_id, url, added_ms) VALUES (?, ?, ?)", (peer, url, NOW))
    conn.execute("UPDATE peers SET cursor_epoch = 'ab', cursor_seq = 40 WHERE node_id = ?", (pulled,))
    assert db.migrate(conn) >= 23
    assert cursor_version(conn, pulled) == CursorVersion(2, None)
    assert cursor_version(conn, fresh) is None
    with db.transaction(conn, immediate=True):
        write_cursor_txn(conn, pulled, Cursor("ab", 50), 45)
        write_cursor_txn(conn, pulled, Cursor("ab", 60), 52)
    assert cursor_version(conn, pulled) == CursorVersion(PROTOCOL_VERSION, 45)
    with db.transaction(conn, immediate=True):
        upgrade_cursor_txn(conn, pulled)
    assert cursor_version(conn, pulled) == CursorVersion(PROTOCOL_VERSION, None)
    assert conn.execute("SELECT cursor_seq FROM peers WHERE node_id = ?", (pulled,)).fetchone()[0] == 44
    with db.transaction(conn, immediate=True):
        write_cursor_txn(conn, pulled, Cursor("ab", 60), 58)
        write_cursor_txn(conn, pulled, Cursor("cd", 3), None)  # another epoch: positions of another store
    assert cursor_version(conn, pulled) == CursorVersion(PROTOCOL_VERSION, None)


def test_versions_are_found_by_prefix_where_refused_finds_them_whole(open_store: OpenStore) -> None:
    """Decision 74: a compact ids page announces a version by its first 32 hex digits; `prefixed_versions` names the
    prefixes that begin a version `NodeSyncStore.refused` would name (held, refused, void; waiting and flagged void
    are the same query on their tables), each by an index range, never a scan of the table."""
    conn, peer = fresh_db(open_store)
    author = keys.SigningKey.generate()
    held = verified(signed_entry(author, "held here"))
    assert store(conn, peer, [held]) == [(held.hash, "saved")]
    refused, void_one, unknown = "1" * 64, "2" * 64, "3" * 64
    with db.transaction(conn, immediate=True):  # type: ignore[arg-type]  # either engine (its engine_of)
        equivocation.refuse_txn(conn, refused, "4" * 64, NOW)
        waiting.remember_void_txn(conn, void_one, author.did, "not_authorized", NOW)
    every = [held.version, refused, void_one, unknown]
    prefixes = [v[:32] for v in every]
    assert prefixed_versions(conn, prefixes) == set(prefixes[:3])
    assert prefixed_versions(conn, [held.version[:31] + "g"]) == set()  # not hex: never a version's prefix
    assert prefixed_versions(conn, []) == set()
    if engine_of(conn) == POSTGRESQL:
        return  # the plan below is SQLite's (EXPLAIN QUERY PLAN)
    plan = " ".join(str(row[-1]) for row in conn.execute(f"EXPLAIN QUERY PLAN {PREFIX_SQL}", ("[]",)))
    for table in REFUSED_TABLES:
        assert f"SEARCH {table} USING" in plan and f"SCAN {table}" not in plan, plan  # its unique index on version


async def test_an_epoch_changed_under_the_puller_asks_to_reconcile_with_every_peer_once(
    make_peer: Callable[..., Awaitable[PeerNode]],  # noqa: F811  (the fixture imported above)
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A restore or a failover under a serving process (docs/decisions.md record 94) may have lost this node's own
    records, which only a reconciliation takes back from the peers that hold them: after the node's epoch watch
    finds the epoch changed, the next round names every peer, once."""
    a, b, c = await make_peer("a"), await make_peer("b"), await make_peer("c")
    await a.add_peer(b)
    await a.add_peer(c)
    store, watch = a.sync.store, a.node.epoch_watch
    assert store is a.node.sync and store.epoch_is in watch.listeners
    await watch.look()  # the first look tells the epoch
    assert await store.reconcile_wanted() == set()
    await watch.look()
    assert await store.reconcile_wanted() == set()
    epoch, _ = await store.position()
    with caplog.at_level(logging.WARNING, logger="bbs.sync"):  # the app's own look, every 5 s, may come first
        await a.node.db.write(lambda conn: ops_store.renew_epoch_txn(conn, "e" * 32, epoch, 1))
        await watch.look()
    assert any("store epoch changed" in r.getMessage() for r in caplog.records)
    assert await store.reconcile_wanted() == {b.node_id, c.node_id}
    assert await store.reconcile_wanted() == set()  # once
    await watch.look()  # the same epoch again: nothing
    assert await store.reconcile_wanted() == set()
