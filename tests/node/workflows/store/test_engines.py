"""One workflow story (tasks declared, leased, completed, a twin's earlier declaration synced in, messages naming a
task's record) appended through the node's projectors to a SQLite file and to a PostgreSQL database: every store
function reads the same answers from both (docs/decisions.md record 76)."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

from identity import canonical, keys, records
from node.features import LOG
from node.spaces.sight import OPERATOR, PUBLIC
from node.store import db, pg_conn
from node.store.conn import Conn
from node.workflows.store import bus, events, fence, tasks, twins
from tests.node.workflows.store.helpers import T0, Store, append, declare, grant
from tests.node.workflows.test_signed import task_event
from wire.time import format_ms
from wire.workflows import MessageQuery

AUTHOR, HOLDER = keys.SigningKey.generate(), keys.SigningKey.generate()
HERE, THERE = keys.SigningKey.generate(), keys.SigningKey.generate()


def message(created_ms: int, to: keys.SigningKey | None, dependency_ids: list[str]) -> dict[str, Any]:
    """A signed bus message from AUTHOR (to `to`, or a broadcast) depending on `dependency_ids`."""
    body: dict[str, Any] = {
        "kind": "message",
        "schema_version": canonical.SCHEMA_VERSION,
        "author_id": AUTHOR.did,
        "created_at": format_ms(created_ms),
        "message_type": "status",
        "body": f"note at {created_ms}",
        "payload": {"at": created_ms},
        "dependency_ids": dependency_ids,
        "tags": sorted({AUTHOR.did} | ({to.did} if to else set())),
        "authority": "raw",
        "truth_state": "fact",
        "confidence": 1,
    }
    if to is not None:
        body["to_agent"] = to.did
    return records.sign(body, AUTHOR)


BUILD = declare(AUTHOR, HERE.did, T0, key="build", title="Build")
GRANT = grant(HERE, HOLDER.did, T0 + 10, key="build")
LOCAL = [
    BUILD,
    declare(AUTHOR, HERE.did, T0 + 1, key="test", title="Test"),
    declare(AUTHOR, HERE.did, T0 + 2, key="deploy", depends_on=["build", "test"]),
    GRANT,
    task_event(HOLDER, T0 + 20, "complete", task_key="build", lease=records.compute_hash(GRANT)),
    message(T0 + 30, HOLDER, [records.compute_hash(BUILD)]),
    message(T0 + 31, None, []),
]
SYNCED = [declare(AUTHOR, THERE.did, T0 - 5, key="deploy")]  # an earlier declaration, from another node


def answers(conn: Conn) -> dict[str, Any]:
    """What each store function answers about the story."""

    def rows(sql: str) -> list[tuple[Any, ...]]:
        return [tuple(r) for r in conn.execute(sql)]

    build_hash, grant_hash = records.compute_hash(BUILD), records.compute_hash(GRANT)
    return {
        "tasks": rows(
            "SELECT id, key, title, status, depends_on, home_node, unmet, open, lease_holder FROM tasks ORDER BY key"
        ),
        "deps": rows("SELECT task_key, dep_key FROM task_deps ORDER BY task_key, dep_key"),
        "ready": [tuple(r) for r in tasks.ready_rows(conn, T0 + 100, 10, None, PUBLIC)],
        "held": tasks.held_keys(conn, ["build", "deploy", "absent"]),
        "waiting": tasks.waiting_on(conn, "deploy"),
        "reaches": [tasks.reaches(conn, ["deploy"], "build"), tasks.reaches(conn, ["build"], "deploy")],
        "graph": [tuple(r) for r in tasks.graph_tasks(conn, 10, OPERATOR)],
        "edges": tasks.graph_edges(conn, 1_000, OPERATOR),
        "events": [tuple(r) for r in events.events_of(conn, "deploy")],
        "newest": events.newest_event_ms(conn, "build"),
        "ended": events.lease_ended(conn, "build", grant_hash, HOLDER.did),
        "stored": events.event_task_key(conn, grant_hash),
        "grants": [fence.latest_grant_ms(conn, HERE.did), fence.grants_since(conn, HERE.did, T0)],
        "first": twins.first_declaration(conn, "deploy"),
        "projected": tuple(twins.first_projected_declaration(conn, "deploy") or ()),
        "granters": twins.lease_granters(conn, "build", THERE.did),
        "twin grants": [tuple(g) for g in twins.grants_by(conn, "build", HERE.did)],
        "moves": twins.pending_moves(conn, 10),
        "messages": [tuple(r) for r in bus.message_rows(conn, MessageQuery(), OPERATOR)],
        "to holder": [r["id"] for r in bus.message_rows(conn, MessageQuery(agent=HOLDER.did), OPERATOR)],
        "dependents": bus.dependents_of(conn, [build_hash, grant_hash]),
    }


async def test_the_workflow_stores_answer_alike_on_either_engine(tmp_path: Path, pg_migrated_url: str) -> None:
    found = []
    for conn in (db.connect(tmp_path / "wf.db", log=LOG), pg_conn.connect(pg_migrated_url, log=LOG)):
        try:
            if isinstance(conn, sqlite3.Connection):
                db.migrate(conn)
            store = Store(conn)
            await append(store, *LOCAL)
            await append(store, *SYNCED, origin=THERE.did)
            found.append(answers(conn))
        finally:
            conn.close()
    on_sqlite, on_postgresql = found
    assert on_postgresql == on_sqlite
    assert [r[1] for r in on_sqlite["ready"]] == ["test"]  # build is done, deploy waits on test
    assert on_sqlite["waiting"] == ["test"] and on_sqlite["reaches"] == [True, False]
    assert on_sqlite["moves"] == ["deploy"] and on_sqlite["first"] == records.compute_hash(SYNCED[0])
    assert len(on_sqlite["messages"]) == 2 and len(on_sqlite["dependents"]) == 1 and on_sqlite["ended"]
