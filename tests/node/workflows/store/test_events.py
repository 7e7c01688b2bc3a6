"""node.workflows.store.events: task events stored and read in the fold's order, the newest time of a task, the
grants a holder ended, and whether the log holds a record."""

from __future__ import annotations

from identity import keys
from node.store.conn import POSTGRESQL, Conn
from node.workflows.store import events
from tests.node.workflows.store.helpers import T0, Store, append, declare, event_row, pg_scans

AGENT, HOLDER, NODE = "did:key:agent", "did:key:holder", "did:key:node"


async def store(db: Store, *rows: events.EventRow) -> None:
    def write(conn: Conn) -> None:
        for row in rows:
            events.insert_event_txn(conn, row)

    await db.write(write)


async def test_an_event_is_stored_and_read_back_by_seq(db: Store) -> None:
    row = event_row(4, "job", "declare", AGENT, T0, node_id=NODE, title="Job", depends_on='["a"]', checkpoint="{}")
    await store(db, row)
    assert tuple(await db.read(lambda c: events.event_at(c, 4))) == tuple(row)


async def test_a_tasks_events_come_in_the_folds_order(db: Store) -> None:
    # stored out of order; two share a millisecond (the hash breaks the tie); another task's event is not read
    await store(
        db,
        event_row(1, "job", "declare", AGENT, T0 + 5),
        event_row(3, "job", "lease", NODE, T0 + 1, holder=HOLDER),
        event_row(2, "job", "release", HOLDER, T0 + 1),
        event_row(9, "other", "declare", AGENT, T0),
    )
    assert [r["seq"] for r in await db.read(lambda c: events.events_of(c, "job"))] == [2, 3, 1]
    assert await db.read(lambda c: events.events_of(c, "missing")) == []


async def test_the_newest_event_time_of_a_task(db: Store) -> None:
    assert await db.read(lambda c: events.newest_event_ms(c, "job")) is None
    await store(db, event_row(1, "job", "declare", AGENT, T0 + 7), event_row(2, "job", "lease", NODE, T0 + 3))
    await store(db, event_row(3, "other", "declare", AGENT, T0 + 99))
    assert await db.read(lambda c: events.newest_event_ms(c, "job")) == T0 + 7


async def test_a_grant_is_ended_only_by_its_holders_release_or_completion(db: Store) -> None:
    await store(
        db,
        event_row(1, "job", "lease", NODE, T0, holder=HOLDER),
        event_row(2, "job", "release", HOLDER, T0 + 1, lease_ref="h1"),
        event_row(3, "job", "lease", NODE, T0 + 2, holder=HOLDER),
        event_row(4, "job", "complete", AGENT, T0 + 3, lease_ref="h3"),  # not the holder
        event_row(5, "job", "lease", NODE, T0 + 4, holder=HOLDER),
        event_row(6, "job", "declare", HOLDER, T0 + 5, lease_ref="h5"),  # a declaration ends nothing
    )

    async def ended(key: str, lease: str, holder: str = HOLDER) -> bool:
        return await db.read(lambda c: events.lease_ended(c, key, lease, holder))

    assert await ended("job", "h1")
    assert not await ended("other", "h1")  # another task's grant of that hash: none
    assert not await ended("job", "h3")
    assert await ended("job", "h3", AGENT)
    assert not await ended("job", "h5")


async def test_whether_a_grant_is_already_ended_is_one_index_look_up(db: Store) -> None:
    params = ("k", "h", "did:key:z")
    for analyzed in (False, True):
        if analyzed:
            await db.write(lambda c: c.execute("ANALYZE"))
        if db.engine == POSTGRESQL:  # no hint there: the lease_ref index is chosen by the planner
            scans = await db.read(lambda c: pg_scans(c, events.ENDED_SQL_PG, params))
            assert scans == [("task_events", "task_events_lease_ref")]
            continue
        plan = await db.read(lambda c: [r[-1] for r in c.execute("EXPLAIN QUERY PLAN " + events.ENDED_SQL, params)])
        assert plan == ["SEARCH task_events USING INDEX task_events_lease_ref (lease_ref=?)"]


async def test_which_task_a_stored_event_belongs_to_and_whether_a_record_is_stored(db: Store) -> None:
    author, node = keys.SigningKey.generate(), keys.SigningKey.generate()
    (first,) = await append(db, declare(author, node.did, T0, key="build"))
    assert await db.read(lambda c: events.record_stored(c, first))
    assert not await db.read(lambda c: events.record_stored(c, "0" * 64))
    assert await db.read(lambda c: events.event_task_key(c, first)) == "build"


async def test_a_deleted_event_leaves_the_tasks_history(db: Store) -> None:
    await store(db, event_row(1, "job", "declare", AGENT, T0), event_row(2, "job", "lease", NODE, T0 + 1))
    await db.write(lambda c: events.delete_event_txn(c, 1))
    assert [r["seq"] for r in await db.read(lambda c: events.events_of(c, "job"))] == [2]
    await db.write(lambda c: events.delete_event_txn(c, 1))  # already gone: nothing happens
    assert await db.read(lambda c: events.newest_event_ms(c, "job")) == T0 + 1
