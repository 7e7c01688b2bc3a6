"""The spaces projection: recomputed from the log by `bbs rebuild` to the same rows, and the read rule's question."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from identity import canonical, keys, records
from node.features import LOG
from node.service import Node
from node.spaces import store
from node.spaces.service import nonce
from node.spaces.sight import OPERATOR
from node.store import projections
from node.store.conn import Conn, engine_of
from tests.conftest import AgentCreds
from tests.node.agents.test_key_events import rotation
from tests.node.api_helpers import entry_record, link_record, self_signer
from tests.node.spaces.test_vouched_set import membership, page_of, signed
from tests.node.store.test_void import version_of
from tests.pg_fixtures import on_both_engines
from wire.api import KeyEventIn

MakeAgent = Callable[[str], Awaitable[AgentCreds]]
T0 = 1_764_583_200_000  # 2025-12-01T10:00:00Z


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


def _appended(conn: Conn, recs: list[dict[str, Any]], now_ms: int) -> None:
    conn.execute("BEGIN")
    for record in recs:
        projections.append_many(
            conn, [projections.Incoming(record, *records.check(record, v3=True))], origin="local", now_ms=now_ms
        )
    conn.execute("COMMIT")


def _spaces_story(conn: Conn, owner: keys.SigningKey, bob: keys.SigningKey) -> list[Any]:
    """A space made by `owner`, Bob a writer who posts twice and links, then removed vouching for one post (the other
    voided by the space, switched out); a refusal remembered. Every store function's answer, in order."""
    creation = signed(owner, kind="space", name="family", description="notes", nonce="A" * 43)
    space = records.compute_hash(creation)
    added = membership(owner, space, bob.did, "writer")
    first = entry_record(bob, "first", created_ms=T0, schema_version="v2", space=space)
    second = entry_record(bob, "second", created_ms=T0 + 1, schema_version="v2", space=space)
    link = link_record(bob, records.compute_hash(first), records.compute_hash(second), "supports", created_ms=T0 + 2)
    _appended(conn, [creation, added, first, second, {**link}], T0)
    public = entry_record(owner, "public", created_ms=T0 + 3)
    _appended(conn, [public], T0 + 3)
    removal = membership(owner, space, bob.did, "none", added, vouched=[version_of(first)])
    _appended(conn, [removal, page_of(owner, removal, [version_of(first)])], T0 + 4)
    conn.execute("BEGIN")
    store.remember_refused_txn(conn, [("a" * 64, space, "unvouched"), ("b" * 64, space, "not_a_writer")], T0, cap=2)
    store.remember_refused_txn(conn, [("c" * 64, space, "unvouched")], T0, cap=2)
    conn.execute("COMMIT")
    named = [records.compute_hash(r) for r in (first, second, public)] + ["a" * 64, "d" * 64]
    return [
        sorted((t, rows) for t, rows in projections.snapshot(conn).items() if t in store.SPACE_TABLES),
        [h.address for h in store.held_records(conn, space)],
        store.held_addresses(conn, space),
        store.key_addresses(conn, [owner.did, bob.did]),
        [(seq, kind, h.address) for seq, kind, h in store.posts_by(conn, space, [bob.did], None)],
        store.flagged_authors(conn, space, "space_"),
        store.hosts(conn, space),
        store.created_here(conn, space),
        store.space(conn, space),
        store.role(conn, space, owner.did),
        store.role(conn, space, bob.did),
        store.roles(conn, space),
        store.spaces_of(conn, owner.did),
        store.every_space(conn),
        store.readable_spaces(conn, owner.did),
        store.readable_spaces(conn, bob.did),
        store.named_records(conn, named),
        sorted(store.naming_spaces(conn, named)),
        store.refused_records(conn, named),
        sorted(store.naming_records(conn, named)),  # log order; one record's rows in no order on either
        store.roles_of(conn, [(space, owner.did), (space, bob.did), ("9" * 64, bob.did)]),
        store.spaces_with_entries(conn, 5),
        store.posts_of(conn, space, bob.did),
        store.sight_of(conn, owner.did),
        [tuple(r) for r in conn.execute(f"SELECT content FROM entries WHERE {OPERATOR.sql('space', engine_of(conn))}")],
    ]


def test_the_spaces_store_answers_alike_on_either_engine(tmp_path: Path, pg_migrated_url: str) -> None:
    owner, bob = keys.SigningKey.generate(), keys.SigningKey.generate()
    expected, got = on_both_engines(tmp_path, pg_migrated_url, LOG, lambda conn: _spaces_story(conn, owner, bob))
    assert got == expected
    tables = dict(expected[0])
    posts = [address for address, space in expected[16].items() if space is not None]
    assert len(tables["spaces"]) == 1 and len(tables["space_roles"]) == 1  # Bob removed
    assert len(expected[4]) == 2 and expected[5] == {bob.did}  # one of his posts voided by the space
    assert expected[9] == "owner" and expected[10] == "none" and len(expected[15]) == 0
    assert len(expected[16]) == 3 and set(expected[18]) == {"a" * 64}  # the cap kept c out
    assert [(n.kind, n.named) for n in expected[19]] == sorted(("link", h) for h in posts)  # once per post named
    space = tables["spaces"][0][0]
    assert expected[20] == {(space, owner.did): "owner", (space, bob.did): "none", ("9" * 64, bob.did): None}
    assert len(expected[24]) == 2  # the operator sees the public entry and the post not voided
