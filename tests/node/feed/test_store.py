"""node.feed.store: the feed's reads (entries after a cursor in id order, the newest id) on a real node's SQLite
file, through the node's read jobs."""

from __future__ import annotations

import sqlite3
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from identity import keys, records
from node.entries import queries
from node.features import LOG
from node.feed import store
from node.service import Node
from node.spaces.sight import OPERATOR, PUBLIC
from node.store import db, pg_conn, projections
from tests.conftest import AgentCreds
from tests.node.api_helpers import entry_record
from wire.api import PostEntry

MakeAgent = Callable[[str], Awaitable[AgentCreds]]
T0 = 1_767_323_045_000


async def post(node: Node, who: AgentCreds, content: str, truth_state: str = "fact") -> int:
    body = PostEntry(entry_type="finding", performative="inform", content=content, truth_state=truth_state)  # type: ignore[arg-type]
    entry, _ = await node.entries.post(who.agent_id, body, None)
    return entry.id


async def test_the_newest_id_follows_the_entries(node: Node, make_agent: MakeAgent) -> None:
    assert await node.db.read(store.newest_id) == 0
    alice = await make_agent("alice")
    first = await post(node, alice, "one")
    assert await node.db.read(store.newest_id) == first
    second = await post(node, alice, "two", truth_state="simulation")  # a simulation is an entry too
    assert await node.db.read(store.newest_id) == second > first


async def test_entry_rows_after_a_cursor_in_id_order(node: Node, make_agent: MakeAgent) -> None:
    alice = await make_agent("alice")
    ids = [await post(node, alice, f"entry {i}") for i in range(4)]
    rows = await node.db.read(lambda c: store.entry_rows(c, 0, 10, False, sight=OPERATOR))
    assert [queries.entry_out(r).id for r in rows] == ids
    assert [queries.entry_out(r).content for r in rows] == [f"entry {i}" for i in range(4)]
    rows = await node.db.read(lambda c: store.entry_rows(c, ids[0], 2, False, sight=OPERATOR))
    assert [queries.entry_out(r).id for r in rows] == ids[1:3]
    assert await node.db.read(lambda c: store.entry_rows(c, ids[-1], 10, False, sight=OPERATOR)) == []


async def test_simulations_only_when_asked_for(node: Node, make_agent: MakeAgent) -> None:
    alice = await make_agent("alice")
    fact = await post(node, alice, "real")
    simulated = await post(node, alice, "imagined", truth_state="simulation")
    plain = await node.db.read(lambda c: store.entry_rows(c, 0, 10, False, sight=OPERATOR))
    assert [queries.entry_out(r).id for r in plain] == [fact]
    every = await node.db.read(lambda c: store.entry_rows(c, 0, 10, True, sight=OPERATOR))
    assert [queries.entry_out(r).id for r in every] == [fact, simulated]


def test_the_feed_reads_the_same_entries_from_either_engine(tmp_path: Path, pg_migrated_url: str) -> None:
    """The same log appended to a SQLite file and a PostgreSQL database answers the same pages, entry states
    (retracted, superseded, claims) included."""
    alice, bob = keys.SigningKey.generate(), keys.SigningKey.generate()
    claim = entry_record(alice, "a claim", created_ms=T0, tags=["a", "x"])
    old = entry_record(alice, "old", created_ms=T0 + 1)
    story = [
        claim,
        old,
        entry_record(alice, "I retract it", created_ms=T0 + 2, performative="retract", links=[supersedes(claim)]),
        entry_record(alice, "newer", created_ms=T0 + 3, links=[supersedes(old)]),  # the author's own: superseded
        entry_record(bob, "bob's newer", created_ms=T0 + 4, links=[supersedes(old)]),  # another's: a claim
        entry_record(bob, "imagined", created_ms=T0 + 5, truth_state="simulation"),
    ]
    answers = []
    for conn in (db.connect(tmp_path / "feed.db", log=LOG), pg_conn.connect(pg_migrated_url, log=LOG)):
        try:
            if isinstance(conn, sqlite3.Connection):
                db.migrate(conn)
            items = [projections.Incoming(r, *records.check(r)) for r in story]
            conn.execute("BEGIN")
            projections.append_many(conn, items, origin="local", now_ms=T0)
            conn.execute("COMMIT")
            pages = [
                store.entry_rows(conn, 0, 10, False, sight=OPERATOR),
                store.entry_rows(conn, 0, 10, True, sight=PUBLIC),
                store.entry_rows(conn, 2, 2, True, sight=OPERATOR),
            ]
            answers.append(([[queries.entry_out(row) for row in page] for page in pages], store.newest_id(conn)))
        finally:
            conn.close()
    sqlite_answer, postgres_answer = answers
    assert postgres_answer == sqlite_answer
    (every, public, after_two), newest = sqlite_answer
    assert [e.content for e in every] == ["a claim", "old", "I retract it", "newer", "bob's newer"]
    assert [e.content for e in public][-1] == "imagined" and newest == public[-1].id
    assert [e.id for e in after_two] == [every[2].id, every[3].id]
    by_content = {e.content: e for e in every}
    assert by_content["a claim"].retracted and by_content["a claim"].tags == ["a", "x"]
    assert by_content["old"].superseded and by_content["old"].superseded_claims == [records.compute_hash(story[4])]
    assert not by_content["newer"].retracted and not by_content["newer"].superseded


def supersedes(target: dict[str, Any]) -> dict[str, str]:
    return {"target": records.compute_hash(target), "link_type": "supersedes", "annotation": ""}
