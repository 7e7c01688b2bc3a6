"""Tasks inside a space over REST, on a real aiohttp server on loopback (issue 37; docs/spaces.md, "Posting into a
space"): a task's identity is (space, key), writers declare and lease, dependencies stay inside their space, and a
non-member sees nothing of a space's task on any task read path; every refusal stores nothing."""

from __future__ import annotations

import random
import sqlite3
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient

from identity import keys, records
from node.features import LOG
from node.service import Node
from node.spaces.sight import PUBLIC
from node.store import db as db_module
from node.store import projections
from node.store.conn import Conn
from node.store.db import Database
from node.workflows import tasks as task_ops
from tests.conftest import AgentCreds
from tests.node.api_helpers import self_signer
from tests.node.spaces.test_posts import get, space_with
from tests.node.spaces.test_routes import call, record_count
from tests.node.workflows.test_signed import task_event
from wire import unsigned
from wire.time import format_ms

MakeAgent = Callable[[str], Awaitable[AgentCreds]]
WF = "/v1/agent-workflows"
TASKS = f"{WF}/tasks"


async def declare(client: TestClient, who: AgentCreds, key: str, status: int = 201, **fields: Any) -> dict[str, Any]:
    return await call(client, "POST", TASKS, who, status, {"key": key, **fields})


async def lease(client: TestClient, who: AgentCreds, ref: str, status: int = 201, space: str = "") -> dict[str, Any]:
    return await call(client, "POST", f"{TASKS}/{ref}/lease" + (f"?space={space}" if space else ""), who, status, {})


async def visible(client: TestClient, who: AgentCreds) -> dict[str, set[Any]]:
    """What `who` sees of the task graph on every task read path that lists tasks: ready, graph, dashboard board,
    and the graph's DOT and Mermaid texts."""
    ready = await get(client, f"{TASKS}/ready", who)
    graph = await get(client, f"{WF}/graph", who)
    board = await get(client, "/dashboard/api/tasks", who)
    texts = ""
    for fmt in ("dot", "mermaid"):
        resp = await client.get(f"{WF}/graph?format={fmt}", headers=who.headers)
        assert resp.status == 200
        texts += await resp.text()
    return {
        "ready": {(t["key"], t["space"]) for t in ready["tasks"]},
        "graph": {(n["key"], n["space"]) for n in graph["nodes"]},
        "board": {(t["key"], t["space"]) for t in board["tasks"]},
        "ids": {n["id"] for n in graph["nodes"]} | {t["id"] for t in [*ready["tasks"], *board["tasks"]]},
        "text": {texts},
    }


async def test_one_key_in_two_spaces_and_in_public_is_three_tasks(
    client: TestClient, node: Node, make_agent: MakeAgent
) -> None:
    owner, bob, eve = [await make_agent(n) for n in ("owner", "bob", "eve")]
    home = await space_with(client, owner, writer=bob)
    work = await space_with(client, bob)
    in_home = await declare(client, bob, "roof", title="fix the roof", space=home)
    in_work = await declare(client, bob, "roof", title="roof of the office", space=work)
    public = await declare(client, eve, "roof", title="a public roof")
    assert len({in_home["id"], in_work["id"], public["id"]}) == 3
    assert [(t["key"], t["space"], t["title"]) for t in (in_home, in_work, public)] == [
        ("roof", home, "fix the roof"),
        ("roof", work, "roof of the office"),
        ("roof", None, "a public roof"),
    ]
    # three identities, one per first declaration; no twins across spaces
    assert len({in_home["identity"], in_work["identity"], public["identity"]}) == 3
    assert in_home["twins"] == in_work["twins"] == public["twins"] == []
    # by key: the public task without space, a space's with it
    assert (await get(client, f"{TASKS}/roof", bob))["id"] == public["id"]
    assert (await get(client, f"{TASKS}/roof?space={home}", bob))["id"] == in_home["id"]
    assert (await get(client, f"{TASKS}/roof?space={work}", bob))["id"] == in_work["id"]
    # re-declaring one changes only that one
    again = await declare(client, bob, "roof", 200, title="fix the roof now", space=home)
    assert again["id"] == in_home["id"] and again["title"] == "fix the roof now"
    assert (await get(client, f"{TASKS}/{in_work['id']}", bob))["title"] == "roof of the office"
    assert (await get(client, f"{TASKS}/{public['id']}", bob))["title"] == "a public roof"
    scopes = await node.db.read(
        lambda c: sorted(r[0] for r in c.execute("SELECT r.scope FROM records r JOIN task_events t ON t.seq = r.seq"))
    )
    assert scopes == ["federation", "local", "local", "local"]  # a space's task events stay here until part 2


async def test_a_space_task_is_leased_and_completed_by_its_writers_only(
    client: TestClient, node: Node, make_agent: MakeAgent
) -> None:
    owner, bob, carol, eve = [await make_agent(n) for n in ("owner", "bob", "carol", "eve")]
    space = await space_with(client, owner, writer=bob, reader=carol)
    task = await declare(client, owner, "paint", space=space)
    public = await declare(client, eve, "paint")
    before = await record_count(node)
    problem = await lease(client, carol, str(task["id"]), 403)  # a reader could never complete it
    assert (problem["code"], problem["field"]) == ("not_a_writer", "task_id")
    problem = await lease(client, eve, "paint", 404, space=space)  # a stranger: no such task
    assert (problem["code"], problem["field"]) == ("task_not_found", "task_id")
    problem = await lease(client, eve, str(task["id"]), 404)
    assert problem["code"] == "task_not_found"
    assert await record_count(node) == before
    leased = await lease(client, bob, "paint", space=space)
    assert leased["id"] == task["id"] and leased["lease"]["holder"] == bob.agent_id and leased["space"] == space
    grant = await node.db.read(
        lambda c: c.execute(
            "SELECT t.space, r.scope FROM task_events t JOIN records r ON r.seq = t.seq WHERE t.hash = ?",
            (leased["lease"]["lease_id"],),
        ).fetchone()
    )
    assert tuple(grant) == (space, "local")  # the grant follows its task's space
    # the public task of the same key is free: leasing it does not touch the space's
    assert (await lease(client, eve, "paint"))["id"] == public["id"]
    token = {"lease": leased["lease"]["lease_id"]}
    problem = await call(client, "POST", f"{TASKS}/{task['id']}/complete", eve, 404, token)
    assert problem["code"] == "task_not_found"
    done = await call(client, "POST", f"{TASKS}/paint/complete?space={space}", bob, 200, token)
    assert (done["status"], done["space"], done["lease"]) == ("done", space, None)
    assert (await get(client, f"{TASKS}/{public['id']}", eve))["status"] == "processing"


async def test_who_may_not_declare_into_a_space_stores_nothing(
    client: TestClient, node: Node, make_agent: MakeAgent
) -> None:
    owner, carol, eve = await make_agent("owner"), await make_agent("carol"), await make_agent("eve")
    space = await space_with(client, owner, reader=carol)
    await declare(client, owner, "secret", space=space)
    before = await record_count(node)
    problem = await declare(client, carol, "roof", 403, space=space)
    assert (problem["code"], problem["field"]) == ("not_a_writer", "$.space")
    # a stranger learns nothing, not even whether the key exists there (the same answer for a key held)
    for key in ("roof", "secret"):
        problem = await declare(client, eve, key, 404, space=space, depends_on=[key])
        assert (problem["code"], problem["field"]) == ("unknown_space", "$.space")
    problem = await declare(client, owner, "roof", 422, space="nope")
    assert (problem["code"], problem["field"]) == ("validation_error", "$.space")
    assert await record_count(node) == before


async def test_a_dependency_across_spaces_is_refused(client: TestClient, node: Node, make_agent: MakeAgent) -> None:
    owner, eve = await make_agent("owner"), await make_agent("eve")
    space = await space_with(client, owner)
    await declare(client, owner, "private-step", space=space)
    await declare(client, owner, "public-step")
    before = await record_count(node)
    problem = await declare(client, owner, "public-plan", 409, depends_on=["private-step"])
    assert (problem["code"], problem["field"]) == ("depends_across_spaces", "$.depends_on")
    problem = await declare(client, owner, "plan", 409, space=space, depends_on=["public-step"])
    assert (problem["code"], problem["field"]) == ("depends_across_spaces", "$.depends_on")
    assert await record_count(node) == before
    # a stranger's public task naming the key waits on a public task of that key: nothing of the space shows
    waiting = await declare(client, eve, "public-plan", depends_on=["private-step"])
    assert (waiting["space"], waiting["waiting_on"]) == (None, ["private-step"])
    assert "public-plan" not in {t["key"] for t in (await get(client, f"{TASKS}/ready", eve))["tasks"]}
    # inside the space, its own tasks: the dependency resolves there
    plan = await declare(client, owner, "plan", space=space, depends_on=["private-step"])
    assert plan["waiting_on"] == ["private-step"]
    ready = await get(client, f"{TASKS}/ready?space={space}", owner)
    assert [t["key"] for t in ready["tasks"]] == ["private-step"]
    # `bbs rebuild` gives the same tasks, events and dependencies, spaces and all
    tables = ("tasks", "task_events", "task_deps")

    def snapshot(conn: Conn) -> list[list[tuple[Any, ...]]]:
        return [[tuple(r) for r in conn.execute(f"SELECT * FROM {t} ORDER BY 1, 2")] for t in tables]

    projected = await node.db.read(snapshot)
    assert any(space in str(row) for row in projected[2])  # the space's dependency row is there
    await node.db.write(projections.rebuild)
    assert await node.db.read(snapshot) == projected


async def test_a_non_member_sees_nothing_of_a_spaces_task_on_any_path(
    client: TestClient, make_agent: MakeAgent, admin_headers: dict[str, str]
) -> None:
    owner, bob, eve = [await make_agent(n) for n in ("owner", "bob", "eve")]
    space = await space_with(client, owner, reader=bob)
    first = await declare(client, owner, "hidden-first", space=space, title="a-private-title")
    hidden = await declare(client, owner, "hidden-then", space=space, depends_on=["hidden-first"])
    public = await declare(client, eve, "open-task")
    seen_by_eve = await visible(client, eve)
    for path in ("ready", "graph", "board"):
        assert seen_by_eve[path] == {("open-task", None)}, path
    assert seen_by_eve["ids"] == {public["id"]}
    text = next(iter(seen_by_eve["text"]))
    assert "hidden" not in text and "a-private-title" not in text and first["identity"] not in text
    seen_by_bob = await visible(client, bob)  # a reader sees the space's tasks on every path
    assert (
        seen_by_bob["graph"]
        == seen_by_bob["board"]
        == {
            ("open-task", None),
            ("hidden-first", space),
            ("hidden-then", space),
        }
    )
    assert seen_by_bob["ready"] == {("open-task", None), ("hidden-first", space)}
    for ref in (str(hidden["id"]), "hidden-then", f"hidden-then?space={space}"):
        problem = await get(client, f"{TASKS}/{ref}", eve, 404)
        assert (problem["code"], problem["field"]) == ("task_not_found", "task_id")
    for path in (f"{TASKS}/ready?space={space}", f"{WF}/graph?space={space}"):
        problem = await get(client, path, eve, 404)
        assert (problem["code"], problem["field"]) == ("unknown_space", "$.space")
    assert (await get(client, f"{TASKS}/{hidden['id']}", bob))["waiting_on"] == ["hidden-first"]
    operator = await get(client, f"{WF}/graph", admin_headers)  # the operator sees every space (threat model)
    assert {n["id"] for n in operator["nodes"]} == {first["id"], hidden["id"], public["id"]}


async def test_a_removed_member_reads_nothing_of_the_spaces_tasks(client: TestClient, make_agent: MakeAgent) -> None:
    owner, bob = await make_agent("owner"), await make_agent("bob")
    space = await space_with(client, owner, writer=bob)
    task = await declare(client, bob, "chore", space=space)
    leased = await lease(client, bob, str(task["id"]))
    assert (await get(client, f"{TASKS}/{task['id']}", bob))["lease"] is not None
    await call(client, "DELETE", f"/v1/spaces/{space}/members/{bob.agent_id}", owner, 201)
    # the next request after the removal: nothing of the task, on any path
    assert (await get(client, f"{TASKS}/{task['id']}", bob, 404))["code"] == "task_not_found"
    assert (await visible(client, bob))["ids"] == set()
    token = {"lease": leased["lease"]["lease_id"]}
    problem = await call(client, "POST", f"{TASKS}/{task['id']}/complete", bob, 404, token)
    assert problem["code"] == "task_not_found"
    problem = await declare(client, bob, "chore", 404, space=space, title="still mine?")
    assert problem["code"] == "unknown_space"


async def test_every_event_of_a_task_is_in_the_tasks_space(
    client: TestClient, node: Node, make_agent: MakeAgent
) -> None:
    owner = await make_agent("owner")
    rover = await self_signer(node, "rover")
    space = await space_with(client, owner, writer=rover.creds)
    task = await declare(client, owner, "fence", space=space)
    leased = await lease(client, rover.creds, str(task["id"]))
    lease_id = leased["lease"]["lease_id"]
    now = node.now_ms() + 1000
    outside = unsigned.unsigned_task_event("fence", rover.agent_id, format_ms(now), "complete", lease=lease_id)
    before = await record_count(node)
    problem = await call(
        client, "POST", f"{TASKS}/{task['id']}/complete", rover.creds, 409, {"record": records.sign(outside, rover.key)}
    )
    assert (problem["code"], problem["field"]) == ("wrong_space", "$.record.space")
    assert await record_count(node) == before
    inside = unsigned.unsigned_task_event("fence", rover.agent_id, format_ms(now), "complete", space, lease=lease_id)
    done = await call(
        client, "POST", f"{TASKS}/{task['id']}/complete", rover.creds, 200, {"record": records.sign(inside, rover.key)}
    )
    assert (done["status"], done["space"]) == ("done", space)


async def test_a_twin_notice_follows_its_tasks_space(client: TestClient, node: Node, make_agent: MakeAgent) -> None:
    """An earlier first declaration of a space's task (as one from another node would be) makes this node's task a
    later twin: the notice that tells its holder is an entry of the task's space, stored local, read by its members
    only. (Part 1 takes a space's records from no peer: the declaration is projected as the log would hold it.)"""
    owner, eve = await make_agent("owner"), await make_agent("eve")
    rover = await self_signer(node, "rover")
    space = await space_with(client, owner, writer=rover.creds)
    task = await declare(client, owner, "index", space=space)
    await lease(client, owner, str(task["id"]))
    other_node = (await self_signer(node, "elsewhere")).agent_id  # a did standing for another node
    earlier = unsigned.unsigned_declare("index", rover.agent_id, "2020-01-01T00:00:00Z", other_node, {}, space)
    signed = records.sign(earlier, rover.key)
    address, decoded = records.check(signed, v3=True)
    await node.db.write(
        lambda c: projections.append(
            c, signed, address, decoded, origin=other_node, now_ms=node.now_ms(), scope="local"
        )
    )
    assert await node.workflows.notice_twins() == 1
    notice = await node.db.read(
        lambda c: c.execute(
            "SELECT e.id, e.space, r.scope FROM entries e JOIN entry_tags t ON t.entry_id = e.id"
            " JOIN records r ON r.seq = e.id WHERE t.tag = 'task-twin'"
        ).fetchone()
    )
    assert (notice["space"], notice["scope"]) == (space, "local")
    assert (await get(client, f"/v1/entries/{notice['id']}", owner))["entries"][0]["space"] == space
    assert (await get(client, f"/v1/entries/{notice['id']}", eve, 404))["code"] == "entry_not_found"
    moved = await get(client, f"{TASKS}/{task['id']}", owner)
    assert moved["home_node"] == other_node and [t["identity"] for t in moved["twins"]] == [task["identity"]]


ORDERS = 6


async def test_the_same_task_events_in_every_order_give_the_same_tasks(
    tmp_path: Path, node_store: Callable[[], str | None]
) -> None:
    """One plan (`job` depends on `prep`) in two spaces and in public, each at another stage; the same signed events
    projected into fresh databases in different orders give the same six tasks, none folded across spaces."""
    author, home = keys.SigningKey.generate(), keys.SigningKey.generate()
    a, b = "a" * 64, "b" * 64
    t0 = 1_800_000_000_000
    events: list[dict[str, Any]] = []
    stages = {a: "done", b: "leased", None: "declared"}
    for n, (space, stage) in enumerate(stages.items()):
        at = {} if space is None else {"space": space}
        ms = t0 + n * 100
        events.append(task_event(author, ms, "declare", "prep", node_id=home.did, **at))
        events.append(task_event(author, ms + 1, "declare", "job", node_id=home.did, depends_on=["prep"], **at))
        if stage in ("done", "leased"):
            grant = task_event(home, ms + 2, "lease", "prep", holder=author.did, expires_at=format_ms(ms + 10**9), **at)
            events.append(grant)
            if stage == "done":
                lease_ref = records.compute_hash(grant)
                events.append(task_event(author, ms + 3, "complete", "prep", lease=lease_ref, **at))
    checked = [records.check(record, v3=True) for record in events]
    outcomes = []
    rnd = random.Random(37)
    for i in range(ORDERS):
        order = list(range(len(events)))
        rnd.shuffle(order)
        db = Database(node_store() or tmp_path / f"order{i}.db", log=LOG)  # this pass's engine
        db.open()
        try:

            def write(conn: Conn, order: list[int] = order) -> None:
                for j in order:
                    projections.append(conn, events[j], *checked[j], origin="did:key:peer", now_ms=t0, scope="local")

            await db.write(write)
            outcomes.append(
                await db.read(
                    lambda c: sorted(
                        tuple(r)
                        for r in c.execute("SELECT key, space, status, unmet, lease_holder, home_node FROM tasks")
                    )
                )
            )
        finally:
            db.close()
    assert all(outcome == outcomes[0] for outcome in outcomes)
    assert outcomes[0] == sorted(
        [
            (f"{a}/job", a, "pending", 0, None, home.did),
            (f"{a}/prep", a, "done", 0, None, home.did),
            (f"{b}/job", b, "pending", 1, None, home.did),
            (f"{b}/prep", b, "pending", 0, author.did, home.did),
            ("job", None, "pending", 1, None, home.did),
            ("prep", None, "pending", 0, None, home.did),
        ]
    )


async def test_one_key_in_a_space_and_in_public_draws_two_nodes(client: TestClient, make_agent: MakeAgent) -> None:
    """The DOT, Mermaid and dashboard drawings name a space's task `key@<space's first 12>`, so a reader of the
    space sees its task and the public one of the same key apart, each with its own edges."""
    owner = await make_agent("owner")
    space = await space_with(client, owner)
    await declare(client, owner, "wash", space=space)
    await declare(client, owner, "dry", space=space, depends_on=["wash"])
    await declare(client, owner, "wash")
    inside = f"wash@{space[:12]}"
    texts = {}
    for fmt in ("dot", "mermaid"):
        resp = await client.get(f"{WF}/graph?format={fmt}", headers=owner.headers)
        texts[fmt] = await resp.text()
    assert f'"{inside}" [label=' in texts["dot"] and '"wash" [label=' in texts["dot"]
    assert f'"{inside}" -> "dry@{space[:12]}";' in texts["dot"] and '"wash" ->' not in texts["dot"]
    graph = await get(client, f"{WF}/graph", owner)
    ids = {(n["key"], n["space"]): n["id"] for n in graph["nodes"]}
    assert f"  t{ids[('wash', space)]} --> t{ids[('dry', space)]}" in texts["mermaid"].splitlines()
    assert f"t{ids[('wash', None)]} -->" not in texts["mermaid"]
    resp = await client.get("/dashboard/api/tasks/graph.svg", headers=owner.headers)
    svg = await resp.text()
    assert inside in svg and ">wash<" in svg.replace(" ", "")


@pytest.mark.sqlite_only(reason="migration 0035 is a SQLite migration; PostgreSQL starts from the baseline")
def test_the_migration_keeps_existing_tasks_public(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """0035 adds `space` to tasks and task events: a task and an event stored before it stay public, found by key
    as before, and listed to every reader."""
    conn = db_module.connect(tmp_path / "node.sqlite", log=LOG)
    every = db_module.migrations()
    monkeypatch.setattr(db_module, "migrations", lambda: [m for m in every if m[0] < 35])
    assert db_module.migrate(conn) == 34
    monkeypatch.setattr(db_module, "migrations", lambda: every)
    with db_module.transaction(conn, immediate=True):
        conn.execute(
            "INSERT INTO tasks (id, key, title, status, depends_on, checkpoint, home_node, created_at, updated_at,"
            " last_ms, unmet, open) VALUES (7, 'old-job', 'Old job', 'pending', '[]', '{}', 'did:key:home',"
            " '2026-01-01T00:00:00Z', '2026-01-01T00:00:00Z', 0, 0, 1)"
        )
        conn.execute(
            "INSERT INTO task_events (seq, hash, task_key, event, author_id, created_at, created_ms, node_id)"
            " VALUES (7, 'h7', 'old-job', 'declare', 'did:key:author', '2026-01-01T00:00:00Z', 0, 'did:key:home')"
        )
    assert db_module.migrate(conn) >= 35
    conn.row_factory = sqlite3.Row
    row = task_ops.task_row(conn, "old-job", PUBLIC)
    assert (row["id"], row["space"]) == (7, None)
    assert conn.execute("SELECT space FROM task_events WHERE seq = 7").fetchone()[0] is None
    assert [t.key for t in task_ops.ready(conn, 1, 10, None, PUBLIC).tasks] == ["old-job"]
    conn.close()


async def test_a_self_signed_declaration_in_a_space(client: TestClient, node: Node, make_agent: MakeAgent) -> None:
    """A declaration its author signed with `space` (format v3: inside the signing bytes, `schema_version` v1): a
    stranger's is 404 `unknown_space` at `$.record.space` and stores nothing; a writer's declares the space's task."""
    owner = await make_agent("owner")
    rover = await self_signer(node, "rover")
    space = await space_with(client, owner)
    draft = unsigned.unsigned_declare("plan", rover.agent_id, format_ms(node.now_ms()), node.node_id, {}, space)
    assert draft["schema_version"] == "v1" and draft["space"] == space
    signed = {"record": records.sign(draft, rover.key)}
    before = await record_count(node)
    problem = await call(client, "POST", TASKS, rover.creds, 404, signed)
    assert (problem["code"], problem["field"]) == ("unknown_space", "$.record.space")
    assert await record_count(node) == before
    await call(
        client, "POST", f"/v1/spaces/{space}/members", owner, 201, {"agent_id": rover.agent_id, "role": "writer"}
    )
    made = await call(client, "POST", TASKS, rover.creds, 201, signed)
    assert (made["key"], made["space"], made["identity"]) == ("plan", space, records.compute_hash(signed["record"]))
    problem = await get(client, f"{TASKS}/plan", rover.creds, 404)  # the key alone names the public task
    assert problem["code"] == "task_not_found"
