"""node.dashboard.store: the dashboard's SQL (agents' activity, display names, provenance rows, lease expiry, bus
projects), run on a real node's database."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from identity import keys, records
from node.agents import store as agents_store
from node.dashboard import store
from node.features import LOG
from node.service import Node
from node.spaces.sight import OPERATOR, PUBLIC
from node.store import projections
from node.store.conn import Conn
from tests.conftest import AgentCreds, FakeClock
from tests.node.api_helpers import entry_record, hash_of
from tests.node.dashboard.conftest import seed_workflows
from tests.node.store.test_projections import agent_record
from tests.pg_fixtures import on_both_engines
from wire.api import PostEntry

MakeAgent = Callable[[str], Awaitable[AgentCreds]]
T0 = 1_767_323_045_000


async def post(node: Node, who: AgentCreds, content: str) -> int:
    entry, _ = await node.entries.post(who.agent_id, PostEntry(entry_type="finding", performative="inform",
                                                              content=content), None)  # fmt: skip
    return entry.id


async def test_has_table(node: Node) -> None:
    assert await node.db.read(lambda c: store.has_table(c, "entries"))
    assert await node.db.read(lambda c: store.has_table(c, "trust_scores"))
    assert not await node.db.read(lambda c: store.has_table(c, "no_such_table"))
    assert not await node.db.read(lambda c: store.has_table(c, "sqlite_master"))  # not a table of its own listing


async def test_agent_activity_with_and_without_trust(node: Node, make_agent: MakeAgent, clock: FakeClock) -> None:
    alice, bob = await make_agent("alice"), await make_agent("bob")
    await post(node, alice, "long ago")
    clock.advance(8 * 24 * 3600)
    since = node.now_ms() - 1000
    await post(node, bob, "recent")
    rows = await node.db.read(lambda c: store.agent_activity(c, since, 0.25, with_trust=True))
    assert [r["id"] for r in rows] == [bob.agent_id, alice.agent_id]  # the most recently active first
    by_id = {r["id"]: r for r in rows}
    assert (by_id[alice.agent_id]["n"], by_id[alice.agent_id]["recent"]) == (1, 0)
    assert (by_id[bob.agent_id]["n"], by_id[bob.agent_id]["recent"]) == (1, 1)
    assert by_id[alice.agent_id]["trust"] == 0.25 and by_id[alice.agent_id]["tc"] == 0  # no score: the neutral one
    assert by_id[alice.agent_id]["local_name"] == "alice" and by_id[alice.agent_id]["key_kept"] == 1
    plain = await node.db.read(lambda c: store.agent_activity(c, since, 0.25, with_trust=False))
    assert [r["id"] for r in plain] == [bob.agent_id, alice.agent_id]
    assert all(r["trust"] is None and (r["tc"], r["td"]) == (0, 0) for r in plain)


async def test_display_names(node: Node, make_agent: MakeAgent) -> None:
    alice = await make_agent("alice")
    names = await node.db.read(lambda c: store.display_names(c, [alice.agent_id, "did:key:zunknown"]))
    assert names == {alice.agent_id: "Alice"}
    assert await node.db.read(lambda c: store.display_names(c, [])) == {}


async def test_provenance_row(node: Node, make_agent: MakeAgent) -> None:
    alice = await make_agent("alice")
    entry_id = await post(node, alice, "a claim")
    row = await node.db.read(lambda c: store.provenance_row(c, entry_id))
    assert (row["id"], row["author_id"], row["display_name"]) == (entry_id, alice.agent_id, "Alice")
    assert (row["origin"], row["scope"]) == ("local", "federation") and b'"a claim"' in row["body"]
    assert await node.db.read(lambda c: store.provenance_row(c, entry_id + 1)) is None


async def test_lease_expiry_and_bus_projects(node: Node, make_agent: MakeAgent) -> None:
    alice, bob = await make_agent("alice"), await make_agent("bob")
    assert await node.db.read(lambda c: store.bus_projects(c, OPERATOR)) == []
    await seed_workflows(node, alice, bob)
    ids = await node.db.read(lambda c: dict(c.execute("SELECT key, id FROM tasks").fetchall()))
    expiry = await node.db.read(lambda c: store.lease_expiry(c, [ids["build"], ids["docs"], 10**9]))
    assert set(expiry) == {ids["build"], ids["docs"]}  # 10**9 is no task
    build, docs = expiry[ids["build"]], expiry[ids["docs"]]
    assert build is not None and build.endswith("Z") and docs is None
    projects = await node.db.read(lambda c: store.bus_projects(c, OPERATOR))
    assert [(p, n) for p, n, _ in projects] == [("garden", 1), ("kettle", 2)]
    assert projects[0][2] >= projects[1][2]


def _dashboard_story(conn: Conn, alice: keys.SigningKey, bob: keys.SigningKey, carol: keys.SigningKey) -> list[Any]:
    """Three agents (Alice registered here, Carol silent), entries old and recent with a link, a trust score, two
    tasks and three bus messages (one in a space). Every store function's answer, in order."""
    t0, home, space = T0, carol.did, "5" * 64
    old = entry_record(alice, "long ago", created_ms=t0)
    recent = entry_record(
        bob,
        "recent",
        created_ms=t0 + 9_000,
        links=[{"target": hash_of(old), "link_type": "supports", "annotation": ""}],
    )
    conn.execute("BEGIN")
    agents_store.insert_local_agent_txn(conn, "alice", alice.did, b"seed", t0)
    story = [agent_record(k, n, t0, home) for k, n in ((alice, "Alice"), (bob, "Bob"), (carol, "Carol"))]
    for record in [*story, old, recent]:
        projections.append_many(conn, [projections.Incoming(record, *records.check(record))], origin="local", now_ms=t0)
    conn.execute("INSERT INTO trust_scores VALUES (?, 3, 1, 0.6, 0.7, 3.0, 1.0)", (bob.did,))
    for i, (key, expires) in enumerate((("build", "2026-01-02T04:00:00Z"), ("docs", None))):
        conn.execute(
            "INSERT INTO tasks (id, key, title, status, depends_on, checkpoint, home_node, created_at, updated_at,"
            " last_ms, lease_expires_at, unmet, open) VALUES (?, ?, ?, 'open', '[]', '{}', ?, 'x', 'x', 1, ?, 0, 1)",
            (1000 + i, key, key, home, expires),
        )
    for i, (project, at, where) in enumerate((("kettle", 5, None), ("garden", 9, None), ("kettle", 7, space))):
        conn.execute(
            "INSERT INTO messages (id, record_hash, from_agent, message_type, body, payload, dependency_ids, project,"
            " created_at, created_ms, signature, space) VALUES (?, ?, ?, 'note', 'b', '{}', '[]', ?, 'x', ?, 's', ?)",
            (2000 + i, f"m{i}", alice.did, project, at, where),
        )
    conn.execute("COMMIT")
    entry_id = conn.execute("SELECT id FROM entries WHERE content = 'long ago'").fetchone()[0]
    return [
        [store.has_table(conn, name) for name in ("entries", "trust_scores", "no_such_table", "sqlite_master")],
        [tuple(r) for r in store.agent_activity(conn, t0 + 1_000, 0.25, with_trust=True)],
        [tuple(r) for r in store.agent_activity(conn, t0 + 1_000, 0.25, with_trust=False)],
        store.display_names(conn, [alice.did, "did:key:zunknown"]),
        store.display_names(conn, []),
        tuple(store.provenance_row(conn, entry_id)),
        store.provenance_row(conn, entry_id + 10_000),
        store.lease_expiry(conn, [1000, 1001, 10**9]),
        store.bus_projects(conn, OPERATOR),
        store.bus_projects(conn, PUBLIC),
    ]


def test_the_dashboard_store_answers_alike_on_either_engine(tmp_path: Path, pg_migrated_url: str) -> None:
    alice, bob, carol = (keys.SigningKey.generate() for _ in range(3))
    expected, got = on_both_engines(
        tmp_path, pg_migrated_url, LOG, lambda conn: _dashboard_story(conn, alice, bob, carol)
    )
    assert got == expected  # PostgreSQL's true is SQLite's 1
    assert expected[0] == [True, True, False, False]
    activity = expected[1]
    assert [r[0] for r in activity] == [bob.did, alice.did, carol.did]  # most recent first, the silent last
    # entries, recent ones, the last one's created_ms, links
    assert [r[7:11] for r in activity] == [(1, 1, T0 + 9_000, 1), (1, 0, T0, 0), (0, 0, None, 0)]
    assert activity[0][11:] == (0.7, 3, 1) and activity[1][11:] == (0.25, 0, 0)
    assert all(r[11] is None for r in expected[2]) and expected[3] == {alice.did: "Alice"} and expected[4] == {}
    assert expected[5][3] == alice.did and expected[6] is None
    assert expected[7] == {1000: "2026-01-02T04:00:00Z", 1001: None}
    assert expected[8] == [("garden", 1, 9), ("kettle", 2, 7)] and expected[9] == [("garden", 1, 9), ("kettle", 1, 5)]
