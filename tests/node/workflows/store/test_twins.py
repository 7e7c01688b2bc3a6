"""node.workflows.store.twins: a key's declarations and grants by node, the grants their holders ended, the
declaration this node projected first, and the queue of keys whose home node moved."""

from __future__ import annotations

from identity import keys
from node.store.conn import Conn
from node.workflows.store import twins
from tests.node.workflows.store.helpers import T0, Store, append, declare, grant
from tests.node.workflows.test_signed import task_event
from wire.time import format_ms


async def test_declarations_and_grants_of_a_key_by_node(db: Store) -> None:
    """This node (here) declared `job` and leased it out; an earlier declaration of `job` on node `there`, and
    that node's own grant, arrived later by sync: `there` is the home node, `here` holds a twin."""
    author, holder = keys.SigningKey.generate(), keys.SigningKey.generate()
    here, there = keys.SigningKey.generate(), keys.SigningKey.generate()
    mine, my_grant = await append(db, declare(author, here.did, T0 + 10), grant(here, holder.did, T0 + 20))
    await append(db, task_event(holder, T0 + 25, "release", task_key="job", lease=my_grant))
    theirs, their_grant = await append(
        db, declare(author, there.did, T0), grant(there, holder.did, T0 + 30), origin=there.did
    )
    read = db.read
    assert await read(lambda c: twins.first_declaration(c, "job")) == theirs  # the earliest, wherever it came from
    assert await read(lambda c: twins.first_declaration(c, "other")) is None
    assert await read(lambda c: twins.lease_granters(c, "job", there.did)) == [here.did]
    assert await read(lambda c: twins.lease_granters(c, "job", here.did)) == [there.did]
    first = await read(lambda c: twins.first_declaration_by(c, "job", here.did))
    assert first is not None and tuple(first) == (mine, author.did, format_ms(T0 + 10))
    assert await read(lambda c: twins.first_declaration_by(c, "job", holder.did)) is None
    grants = await read(lambda c: twins.grants_by(c, "job", here.did))
    assert [tuple(g) for g in grants] == [(my_grant, holder.did, format_ms(T0 + 60_020), T0 + 60_020)]
    assert await read(lambda c: twins.grant_ended(c, my_grant, holder.did))  # released by its holder
    assert not await read(lambda c: twins.grant_ended(c, my_grant, author.did))
    assert not await read(lambda c: twins.grant_ended(c, their_grant, holder.did))
    assert await read(lambda c: twins.newest_of(c, "job", (theirs, mine), here.did)) == T0 + 20
    assert await read(lambda c: twins.newest_of(c, "job", (theirs, mine), there.did)) == T0 + 30
    projected = await read(lambda c: twins.first_projected_declaration(c, "job"))
    assert projected is not None
    assert tuple(projected) == (mine, author.did, format_ms(T0 + 10), here.did, "local")  # stored here first
    assert await read(lambda c: twins.first_projected_declaration(c, "other")) is None
    # the earlier declaration moved the task's home: the projector queued the key for a twin check
    assert await read(lambda c: twins.pending_moves(c, 10)) == ["job"]


async def test_the_home_move_queue_holds_each_key_once_until_cleared(db: Store) -> None:
    def note(conn: Conn) -> None:
        for key in ("b", "a", "b"):
            twins.note_home_move_txn(conn, key)

    await db.write(note)
    assert await db.read(lambda c: twins.pending_moves(c, 10)) == ["a", "b"]  # in key order on either engine
    assert await db.read(lambda c: twins.pending_moves(c, 1)) == ["a"]
    await db.write(lambda c: twins.clear_move_txn(c, "b"))
    await db.write(lambda c: twins.clear_move_txn(c, "never-queued"))
    assert await db.read(lambda c: twins.pending_moves(c, 10)) == ["a"]
