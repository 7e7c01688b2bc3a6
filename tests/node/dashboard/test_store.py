"""node.dashboard.store: the dashboard's SQL (agents' activity, display names, provenance rows, lease expiry, bus
projects), run on a real node's database."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from node.dashboard import store
from node.service import Node
from node.spaces.sight import OPERATOR
from tests.conftest import AgentCreds, FakeClock
from tests.node.dashboard.conftest import seed_workflows
from wire.api import PostEntry

MakeAgent = Callable[[str], Awaitable[AgentCreds]]


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
