"""The spaces projection: recomputed from the log by `bbs rebuild` to the same rows, and the read rule's question."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from identity import canonical, keys, records
from node.service import Node
from node.spaces import store
from node.spaces.service import nonce
from node.store import projections
from node.store.conn import Conn
from tests.conftest import AgentCreds
from tests.node.agents.test_key_events import rotation
from tests.node.api_helpers import self_signer
from wire.api import KeyEventIn

MakeAgent = Callable[[str], Awaitable[AgentCreds]]


async def test_rebuild_gives_the_same_spaces_and_roles(node: Node, make_agent: MakeAgent) -> None:
    owner, bob, carol = await make_agent("owner"), await make_agent("bob"), await make_agent("carol")
    made = await node.spaces.create(owner.agent_id, "family", "notes")
    await node.spaces.set_role(owner.agent_id, made.space_id, bob.agent_id, "writer")
    await node.spaces.set_role(owner.agent_id, made.space_id, carol.agent_id, "admin")
    await node.spaces.set_role(carol.agent_id, made.space_id, bob.agent_id, "none")

    def rebuilt(conn: object) -> tuple[dict[str, list[tuple[object, ...]]], dict[str, list[tuple[object, ...]]]]:
        before = {t: rows for t, rows in projections.snapshot(conn).items() if t in store.SPACE_TABLES}  # type: ignore[arg-type]
        projections.rebuild(conn)  # type: ignore[arg-type]
        after = {t: rows for t, rows in projections.snapshot(conn).items() if t in store.SPACE_TABLES}  # type: ignore[arg-type]
        return before, after

    before, after = await node.db.write(rebuilt)
    assert before == after
    assert sorted(r[1:] for r in after["space_roles"]) == sorted([(owner.agent_id, "owner"), (carol.agent_id, "admin")])
    assert [r[0] for r in after["spaces"]] == [made.space_id]


async def test_readable_spaces_are_those_of_a_reader_or_above(node: Node, make_agent: MakeAgent) -> None:
    owner, bob, eve = await make_agent("owner"), await make_agent("bob"), await make_agent("eve")
    one = await node.spaces.create(owner.agent_id, "one", "")
    two = await node.spaces.create(owner.agent_id, "two", "")
    await node.spaces.set_role(owner.agent_id, one.space_id, bob.agent_id, "reader")
    await node.spaces.set_role(owner.agent_id, two.space_id, bob.agent_id, "writer")
    await node.spaces.set_role(owner.agent_id, two.space_id, bob.agent_id, "none")

    def ask(conn: object) -> tuple[frozenset[str], ...]:
        return tuple(store.readable_spaces(conn, a.agent_id) for a in (owner, bob, eve))  # type: ignore[arg-type]

    expected = (frozenset({one.space_id, two.space_id}), frozenset({one.space_id}), frozenset[str]())
    assert await node.db.read(ask) == expected
    assert await node.db.read(lambda c: store.posts_of(c, one.space_id, bob.agent_id)) == []


async def test_a_key_event_that_voids_the_owners_records_takes_the_space_away(node: Node) -> None:
    who = await self_signer(node, "rover")
    key = who.key
    space = records.sign(
        {
            "kind": "space",
            "schema_version": canonical.SCHEMA_VERSION,
            "author_id": who.agent_id,
            "created_at": canonical.now_created_at(),
            "name": "rover's",
            "description": "",
            "nonce": nonce(),
        },
        key,
    )
    made = await node.spaces.submit(who.agent_id, space)
    assert await node.spaces.readable(who.agent_id) == {made.space_id}
    # a rotation vouching for nothing the old key signed: the space's creation becomes void (node/store/void.py)
    event = rotation(who.agent_id, key, keys.SigningKey.generate(), [], created_ms=node.now_ms())
    await node.key_events.submit(who.agent_id, KeyEventIn(record=event))
    assert await node.spaces.readable(who.agent_id) == frozenset()
    assert await node.db.read(lambda c: store.space(c, made.space_id)) is None


async def test_refused_records_are_remembered_once_and_up_to_the_cap(node: Node) -> None:
    """A record's space refused as void is remembered once (the first reason stays), and nothing past the cap."""
    space = "5" * 64

    def remember(conn: Conn) -> None:
        store.remember_refused_txn(conn, [("a" * 64, space, "unvouched"), ("b" * 64, space, "not_a_writer")], 1, cap=2)
        store.remember_refused_txn(conn, [("a" * 64, space, "revoked_key")], 2, cap=2)
        store.remember_refused_txn(conn, [("c" * 64, space, "unvouched")], 3, cap=2)

    await node.db.write(remember)
    known = await node.db.read(lambda c: store.refused_records(c, ["a" * 64, "b" * 64, "c" * 64, "d" * 64]))
    assert known == {"a" * 64: space, "b" * 64: space}
    reason = "SELECT reason FROM refused_space_records WHERE hash = ?"
    assert await node.db.read(lambda c: c.execute(reason, ("a" * 64,)).fetchone()[0]) == "unvouched"
