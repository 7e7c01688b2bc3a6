"""node.workflows.store.fence: the fence's keys in node_meta, and the lease grants of one node the database
holds (the latest expiry, how many expire after a moment)."""

from __future__ import annotations

from node.ops import store as ops_store
from node.store.conn import Conn
from node.workflows.store import events, fence
from tests.node.workflows.store.helpers import T0, Store, event_row

NODE, OTHER = "did:key:node", "did:key:other"


async def test_meta_values_are_set_and_replaced(db: Store) -> None:
    assert await db.read(lambda c: ops_store.meta_value(c, "lease_fence_id")) is None
    await db.write(lambda c: ops_store.set_meta_txn(c, "lease_fence_id", "f1"))
    await db.write(lambda c: ops_store.set_meta_txn(c, "lease_fence_id", "f2"))
    assert await db.read(lambda c: ops_store.meta_value(c, "lease_fence_id")) == "f2"
    assert await db.read(lambda c: ops_store.meta_value(c, "epoch")) is None


async def test_grants_of_one_node_latest_and_counted_after_a_moment(db: Store) -> None:
    assert await db.read(lambda c: fence.latest_grant_ms(c, NODE)) == 0
    assert await db.read(lambda c: fence.grants_since(c, NODE, 0)) == 0

    def write(conn: Conn) -> None:
        for row in (
            event_row(1, "a", "lease", NODE, T0, holder="w", expires_ms=T0 + 100),
            event_row(2, "b", "lease", NODE, T0, holder="w", expires_ms=T0 + 300),
            event_row(3, "a", "lease", NODE, T0 + 1, holder="w", expires_ms=T0 + 200),
            event_row(4, "a", "lease", OTHER, T0, holder="w", expires_ms=T0 + 900),  # another node's grant
            event_row(5, "a", "release", NODE, T0 + 2, expires_ms=T0 + 999),  # not a grant
        ):
            events.insert_event_txn(conn, row)

    await db.write(write)
    assert await db.read(lambda c: fence.latest_grant_ms(c, NODE)) == T0 + 300
    assert await db.read(lambda c: fence.grants_since(c, NODE, T0)) == 3
    assert await db.read(lambda c: fence.grants_since(c, NODE, T0 + 200)) == 1  # expiring strictly after
    assert await db.read(lambda c: fence.grants_since(c, OTHER, T0)) == 1


async def test_a_process_registers_then_records_its_check_ins(db: Store) -> None:
    """`register_txn` records the process, its history and its check-in; `checked_in_txn` moves the check-in only."""
    assert await db.read(lambda c: fence.process_row(c, "p1")) is None
    await db.write(lambda c: fence.register_txn(c, "p1", False, None, T0))
    assert await db.read(lambda c: fence.process_row(c, "p1")) == fence.ProcessRow(False, None, T0)
    await db.write(lambda c: fence.register_txn(c, "p1", True, "S:1:e", T0 + 5))  # vouched: registered_ms stays
    await db.write(lambda c: fence.checked_in_txn(c, "p1", T0 + 60_005))
    assert await db.read(lambda c: fence.process_row(c, "p1")) == fence.ProcessRow(True, "S:1:e", T0 + 60_005)
    assert await db.read(fence.processes) == [("p1", True, "S:1:e", T0, T0 + 60_005)]
    await db.write(lambda c: fence.checked_in_txn(c, "unknown", T0))  # a process forgotten meanwhile: nothing
    assert [row[0] for row in await db.read(fence.processes)] == ["p1"]
