"""Workflow tables are projections: rebuilt from the log exactly, and the same whatever order records arrive in."""

from __future__ import annotations

import json
import random
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient

from identity import canonical, keys, records
from node.features import LOG
from node.service import Node
from node.store import db as dbmod
from node.store import projections
from node.store.conn import Conn
from tests.conftest import AgentCreds, FakeClock
from tests.node.fresh_stores import ENGINES, FreshStore, fresh_stores
from tests.node.workflows.helpers import SEED_PLAN, WF, declare, lease
from tests.node.workflows.test_signed import task_event
from wire.time import format_ms

MakeAgent = Callable[[str], Awaitable[AgentCreds]]
WORKFLOW_TABLES = ["messages", "message_agents", "message_dependencies", "task_events", "tasks", "task_deps"]
# Everything a task is, minus its local id (a node's own numbering, like an entry's id).
TASK_STATE = (
    "key, title, status, depends_on, checkpoint, home_node, created_at, updated_at, last_ms, lease_hash,"
    " lease_holder, lease_expires_at, lease_expires_ms, unmet, open"
)


async def busy_workflow(client: TestClient, make_agent: MakeAgent, clock: FakeClock) -> None:
    """A plan with leases, a release, an expiry, completions, checkpoints, forward references and messages."""
    boss, w1, w2 = await make_agent("boss"), await make_agent("w1"), await make_agent("w2")
    for task in SEED_PLAN:
        await declare(client, boss, task)
    await declare(client, boss, {"key": "later", "title": "Later", "depends_on": ["not-yet", "publish-digest"]})
    token = (await lease(client, w1, "doctor-pass", seconds=60))[1]["lease"]["lease_id"]
    progress = {"key": "doctor-pass", "checkpoint": {"checked": ["a", "b"], "n": 2}, "lease": token}
    await declare(client, w1, progress)
    clock.advance(61)  # w1's lease runs out
    token = (await lease(client, w2, "doctor-pass", seconds=300))[1]["lease"]["lease_id"]
    body = {"checkpoint": {"n": 3}, "lease": token}
    assert (await client.post(f"{WF}/tasks/doctor-pass/complete", json=body, headers=w2.headers)).status == 200
    token = (await lease(client, w1, "write-adr", seconds=300))[1]["lease"]["lease_id"]
    body = {"checkpoint": {"draft": 1}, "lease": token}
    assert (await client.post(f"{WF}/tasks/write-adr/release", json=body, headers=w1.headers)).status == 200
    await lease(client, w2, "write-adr", seconds=900)
    for i, who in enumerate((boss, w1, w2)):
        await client.post(
            f"{WF}/messages",
            json={
                "message_type": "status",
                "body": f"note {i}",
                "to_agent": boss.agent_id,
                "project": "p",
                "dependency_ids": [f"{i:x}" * 64, f"step-{i}"],
            },  # an address (not held) and a plain id
            headers=who.headers,
        )
        clock.advance(0.5)


async def test_rebuild_reproduces_workflow_tables(
    client: TestClient, make_agent: MakeAgent, node: Node, clock: FakeClock
) -> None:
    await busy_workflow(client, make_agent, clock)
    before = await node.db.read(projections.snapshot)
    assert all(before[t] for t in WORKFLOW_TABLES)
    replayed = await node.db.write(projections.rebuild)
    after = await node.db.read(projections.snapshot)
    assert replayed > 0
    for table in WORKFLOW_TABLES:
        assert after[table] == before[table], table


def _fresh(where: Path | str) -> Any:
    """A new database migrated to the head at `where` (a SQLite file, or the pass's PostgreSQL database)."""
    conn = dbmod.connect_store(where, log=LOG)
    dbmod.migrate_store(conn)
    return conn


@pytest.fixture(params=ENGINES)
def fresh(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[FreshStore]:
    """New migrated databases of this run's engine, carrying the node's log."""
    yield from fresh_stores(request, tmp_path, LOG)


def _ingest(conn: Conn, bodies: list[bytes]) -> None:
    with dbmod.transaction(conn, immediate=True):  # type: ignore[arg-type]  # either engine's connection
        for body in bodies:
            record = json.loads(body)
            record_hash, decoded = records.check(record)
            projections.append(conn, record, record_hash, decoded, origin="peer", now_ms=0)


def _state(conn: Conn) -> dict[str, Any]:
    return {
        "tasks": [tuple(r) for r in conn.execute(f"SELECT {TASK_STATE} FROM tasks ORDER BY key")],
        "deps": [tuple(r) for r in conn.execute("SELECT * FROM task_deps ORDER BY 1, 2")],
        "messages": [tuple(r) for r in conn.execute("SELECT record_hash, body FROM messages ORDER BY 1")],
    }


async def test_any_arrival_order_gives_the_same_graph(
    client: TestClient,
    make_agent: MakeAgent,
    node: Node,
    clock: FakeClock,
    tmp_path: Path,
    node_store: Callable[[], str | None],
) -> None:
    """The node's graph, replayed in order and in six shuffles into new databases of the pass's engine, is the same."""
    await busy_workflow(client, make_agent, clock)
    bodies = await node.db.read(
        lambda c: [
            bytes(r[0])
            for r in c.execute("SELECT body FROM records WHERE kind IN ('task_event', 'message') ORDER BY seq")
        ]
    )
    in_order = _fresh(node_store() or tmp_path / "in-order.db")
    _ingest(in_order, bodies)
    reference = _state(in_order)
    in_order.close()
    assert reference == await node.db.read(_state) and reference["tasks"]
    for seed in range(6):
        shuffled = bodies[:]
        random.Random(seed).shuffle(shuffled)
        conn = _fresh(node_store() or tmp_path / f"shuffled-{seed}.db")
        _ingest(conn, shuffled)
        assert _state(conn) == reference, seed
        conn.close()


def _declare(author: keys.SigningKey, node_id: str, created_ms: int, title: str) -> dict[str, Any]:
    return records.sign(
        {
            "kind": "task_event",
            "schema_version": canonical.SCHEMA_VERSION,
            "author_id": author.did,
            "created_at": format_ms(created_ms),
            "event": "declare",
            "task_key": "shared",
            "node_id": node_id,
            "title": title,
        },
        author,
    )


def _grant(node_key: keys.SigningKey, holder: str, created_ms: int) -> dict[str, Any]:
    return records.sign(
        {
            "kind": "task_event",
            "schema_version": canonical.SCHEMA_VERSION,
            "author_id": node_key.did,
            "created_at": format_ms(created_ms),
            "event": "lease",
            "task_key": "shared",
            "holder": holder,
            "expires_at": format_ms(created_ms + 60_000),
        },
        node_key,
    )


def test_home_node_is_the_earliest_declaration_and_only_its_grants_count(fresh: FreshStore) -> None:
    agent = keys.SigningKey.generate()
    n1, n2 = keys.SigningKey.generate(), keys.SigningKey.generate()
    t = 1_800_000_000_000
    early = _declare(agent, n2.did, t, "declared first, on n2")
    late = _declare(agent, n1.did, t + 5, "declared again, on n1")
    grant_n1 = _grant(n1, agent.did, t + 10)  # n1 is not the home: ignored everywhere
    grant_n2 = _grant(n2, agent.did, t + 8)
    bodies = [canonical.canonical_bytes(r) for r in (early, late, grant_n1, grant_n2)]
    homes = set()
    for i, order in enumerate(([0, 1, 2, 3], [3, 2, 1, 0], [2, 1, 3, 0])):
        conn = fresh(f"o{i}")
        _ingest(conn, [bodies[j] for j in order])
        row = conn.execute("SELECT home_node, lease_hash, title FROM tasks WHERE key = 'shared'").fetchone()
        homes.add(tuple(row))
    assert homes == {(n2.did, records.compute_hash(grant_n2), "declared again, on n1")}


def test_simultaneous_declarations_break_the_tie_by_hash(fresh: FreshStore) -> None:
    agent = keys.SigningKey.generate()
    n1, n2 = keys.SigningKey.generate(), keys.SigningKey.generate()
    t = 1_800_000_000_000
    d1, d2 = _declare(agent, n1.did, t, "one"), _declare(agent, n2.did, t, "two")
    winner = min((records.compute_hash(d1), n1.did), (records.compute_hash(d2), n2.did))[1]
    for i, pair in enumerate(((d1, d2), (d2, d1))):
        conn = fresh(f"tie{i}")
        _ingest(conn, [canonical.canonical_bytes(r) for r in pair])
        assert conn.execute("SELECT home_node FROM tasks").fetchone()[0] == winner


def _random_history(rng: random.Random, t: int) -> list[dict[str, Any]]:
    """Declarations, grants (by the home node and by another), releases and completions that end a random
    grant (by its holder or not), checkpoints and statuses, over two tasks, often in the same millisecond."""
    home, other = keys.SigningKey.generate(), keys.SigningKey.generate()
    agents = [keys.SigningKey.generate() for _ in range(3)]
    out: list[dict[str, Any]] = []
    grants: list[tuple[str, str, str]] = []  # (task, grant hash, holder did)
    for key in ("a", "b"):
        out.append(task_event(agents[0], t, "declare", task_key=key, node_id=home.did, title=f"task {key}"))
    for _ in range(24):
        t += rng.choice([0, 1, 7])
        key, who = rng.choice(["a", "b"]), rng.choice(agents)
        patch = {rng.choice("xyz"): rng.choice([1, None, {"n": rng.randint(0, 3)}])} if rng.random() < 0.5 else {}
        cp: dict[str, Any] = {"checkpoint": patch} if patch else {}
        kind = rng.choice(["declare", "lease", "lease", "release", "complete", "skewed"])
        if kind == "skewed":  # the holder's clock runs behind: its release is dated before the grant it ends
            grant = task_event(home, t, "lease", task_key=key, holder=who.did, expires_at=format_ms(t + 60_000))
            out += [
                grant,
                task_event(who, t - rng.randint(1, 9), "release", task_key=key, lease=records.compute_hash(grant)),
            ]
        elif kind == "declare":
            statuses = ["pending", "processing", "done", "failed", "cancelled"]
            extra: dict[str, Any] = {"status": rng.choice(statuses)} if rng.random() < 0.4 else {}
            if key == "a" and rng.random() < 0.3:
                extra["depends_on"] = rng.choice([["b"], ["b", "c"], []])
            node_id = rng.choice([home, other]).did
            out.append(
                task_event(who, t, "declare", task_key=key, node_id=node_id, title=f"{key} at {t}", **extra, **cp)
            )
        elif kind == "lease":
            node = home if rng.random() < 0.8 else other
            grant = task_event(node, t, "lease", task_key=key, holder=who.did, expires_at=format_ms(t + 60_000))
            grants.append((key, records.compute_hash(grant), who.did))
            out.append(grant)
        elif grants and rng.random() < 0.85:
            task, ref, holder = rng.choice(grants)
            by = next((a for a in agents if a.did == holder), who) if rng.random() < 0.8 else who
            out.append(task_event(by, t, kind, task_key=task, lease=ref, **cp))
        else:
            out.append(task_event(who, t, kind, task_key=key, **cp))
    return out


def test_applying_events_in_place_equals_folding_the_whole_history(fresh: FreshStore) -> None:
    """`advance` (an event after all others, applied to the stored task) must give exactly what `refold_txn`
    (the fold over every event) gives, whatever the arrival order and however many events share a millisecond."""
    from node.workflows.records import refold_txn

    for seed in range(40):
        rng = random.Random(seed)
        history = _random_history(rng, 1_800_000_000_000)
        bodies = [canonical.canonical_bytes(r) for r in history]
        if seed % 2:
            rng.shuffle(bodies)  # out of order: mostly re-folds; in order: mostly applied in place
        conn = fresh(f"h{seed}")
        for i, body in enumerate(bodies):  # after every arrival: a later re-fold would hide a wrong state
            _ingest(conn, [body])
            incremental = _state(conn)
            with dbmod.transaction(conn, commit=False):  # a probe: rolled back
                for row in conn.execute("SELECT * FROM tasks").fetchall():
                    refold_txn(conn, row["key"], row)
                assert _state(conn) == incremental, (seed, i)
        conn.close()  # forty databases: a PostgreSQL cluster of the tests takes 100 connections


def test_a_checkpoint_merged_over_the_cap_across_a_partition_may_shrink_but_not_grow(fresh: FreshStore) -> None:
    """Two nodes each accepted a 40 KB patch; merged, the checkpoint is over 64 KiB on every node. A patch that
    adds to it is refused with its size named; one that removes a key is taken."""
    from node.errors import InvalidInput
    from node.workflows import tasks

    node_key, agent = keys.SigningKey.generate(), keys.SigningKey.generate()
    t = 1_800_000_000_000
    history = [task_event(agent, t, "declare", task_key="big", node_id=node_key.did, title="Big")]
    history += [
        task_event(agent, t + i, "declare", task_key="big", node_id=node_key.did, checkpoint={side: "x" * 40_000})
        for i, side in ((1, "a"), (2, "c"))
    ]
    conn = fresh("big")
    _ingest(conn, [canonical.canonical_bytes(r) for r in history])
    held = json.loads(conn.execute("SELECT checkpoint FROM tasks WHERE key = 'big'").fetchone()[0])
    assert set(held) == {"a", "c"}
    with pytest.raises(InvalidInput) as refused:
        tasks.plan_declare(conn, {"task_key": "big", "checkpoint": {"n": 1}})
    assert refused.value.code == "checkpoint_too_large" and "would be 800" in str(refused.value)
    _, changed = tasks.plan_declare(conn, {"task_key": "big", "checkpoint": {"a": None}})
    assert changed == {"checkpoint": {"a": None}}
