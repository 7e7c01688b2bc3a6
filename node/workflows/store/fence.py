"""What the lease fence (node/workflows/fence.py) compares its file with: the lease grants a node made, as this
database holds them (in `task_events`), and the fence's own keys in `node_meta`; on PostgreSQL also the node-wide
part of the fence (migration 0055: the processes that check it, and the holds every process obeys).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

from node.ops import store as ops_store
from node.store.conn import Conn


def latest_grant_ms(conn: Conn, node_id: str) -> int:
    """The latest expiry of any lease grant by `node_id` that this database holds (0 when none)."""
    row = conn.execute(
        "SELECT max(expires_ms) FROM task_events WHERE author_id = ? AND event = 'lease'", (node_id,)
    ).fetchone()
    return int(row[0] or 0)


def grants_since(conn: Conn, node_id: str, since_ms: int) -> int:
    """How many lease grants by `node_id` expiring after `since_ms` this database holds (one index range)."""
    row = conn.execute(
        "SELECT count(*) FROM task_events WHERE author_id = ? AND event = 'lease' AND expires_ms > ?",
        (node_id, since_ms),
    ).fetchone()
    return int(row[0])


# ---- the node-wide fence of several processes on PostgreSQL (docs/decisions.md record 88) -------------------------


def history_identity(conn: Conn) -> str:
    """The history this PostgreSQL database is in (`node.ops.store.cluster_history`: its cluster's system identifier
    and timeline) and the node's store epoch, which `bbs restore` renews."""
    epoch = ops_store.meta_value(conn, "epoch") or ""
    return f"{ops_store.cluster_history(conn)}:{epoch}"


class ProcessRow(NamedTuple):
    """A registered process as the database holds it."""

    vouched: bool  # holds a fence it checked the database against
    identity: str | None  # the history it last checked under (None: must check again)
    checked_in_ms: int  # when it last checked in (refreshed about every `CHECK_IN_EVERY_MS`)


CHECK_IN_EVERY_MS = 60_000  # a serving process checks every 5 s; it records that it did about once a minute


def process_row(conn: Conn, process: str) -> ProcessRow | None:
    """The registered process `process`, or None when this database does not know it."""
    row = conn.execute(
        "SELECT vouched, identity, checked_in_ms FROM lease_fence_processes WHERE process = ?", (process,)
    ).fetchone()
    return None if row is None else ProcessRow(bool(row[0]), None if row[1] is None else str(row[1]), int(row[2]))


def register_txn(conn: Conn, process: str, vouched: bool, identity: str | None, now_ms: int) -> None:
    """Record that `process` checked the database under `identity` at `now_ms` (`vouched`: it holds a fence it
    checked)."""
    conn.execute(
        "INSERT INTO lease_fence_processes (process, vouched, identity, registered_ms, checked_in_ms)"
        " VALUES (?, ?, ?, ?, ?) ON CONFLICT (process) DO UPDATE SET vouched = excluded.vouched,"
        " identity = excluded.identity, checked_in_ms = excluded.checked_in_ms",
        (process, int(vouched), identity, now_ms, now_ms),
    )


def checked_in_txn(conn: Conn, process: str, now_ms: int) -> None:
    """Record that `process` checked the database at `now_ms` and found nothing to change."""
    conn.execute("UPDATE lease_fence_processes SET checked_in_ms = ? WHERE process = ?", (now_ms, process))


def vouch_txn(conn: Conn) -> int:
    """Vouch for every process waiting to join (a process that checked its fence saw nothing missing since they
    registered). Returns how many."""
    return conn.execute("UPDATE lease_fence_processes SET vouched = 1 WHERE vouched = 0").rowcount


def uncheck_all_txn(conn: Conn) -> None:
    """Every process must check the database again (its history changed): what each last checked was another."""
    conn.execute("UPDATE lease_fence_processes SET identity = NULL")


def unchecked(conn: Conn, identity: str) -> list[str]:
    """The vouched processes that have not checked the database under `identity` yet."""
    rows = conn.execute(
        "SELECT process FROM lease_fence_processes WHERE vouched = 1 AND (identity IS NULL OR identity <> ?)"
        " ORDER BY process",
        (identity,),
    ).fetchall()
    return [str(r[0]) for r in rows]


def processes(conn: Conn) -> list[tuple[str, bool, str | None, int, int]]:
    """(process, vouched, the identity it last checked under or None, registered_ms, checked_in_ms) of every
    registered process, in process order."""
    rows = conn.execute(
        "SELECT process, vouched, identity, registered_ms, checked_in_ms FROM lease_fence_processes ORDER BY process"
    ).fetchall()
    return [(str(r[0]), bool(r[1]), None if r[2] is None else str(r[2]), int(r[3]), int(r[4])) for r in rows]


def forget_process_txn(conn: Conn, process: str) -> bool:
    """Remove a process from the node's fence (its folder is gone for good): no history hold waits for it again."""
    return conn.execute("DELETE FROM lease_fence_processes WHERE process = ?", (process,)).rowcount > 0


@dataclass(frozen=True)
class Hold:
    """A node-wide hold on grants (see migration 0055)."""

    hold_id: str
    until_ms: int
    since_ms: int | None
    grants: int | None
    identity: str | None


def holds(conn: Conn) -> list[Hold]:
    """Every hold this database records."""
    rows = conn.execute(
        "SELECT hold_id, until_ms, since_ms, grants, identity FROM lease_fence_holds ORDER BY hold_id"
    ).fetchall()
    return [
        Hold(
            str(r[0]),
            int(r[1]),
            None if r[2] is None else int(r[2]),
            None if r[3] is None else int(r[3]),
            None if r[4] is None else str(r[4]),
        )
        for r in rows
    ]


def hold_txn(conn: Conn, hold: Hold, now_ms: int) -> None:
    """Record `hold` (a hold of the same id keeps the later end)."""
    conn.execute(
        "INSERT INTO lease_fence_holds (hold_id, until_ms, since_ms, grants, identity, set_ms)"
        " VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (hold_id) DO UPDATE SET"
        " until_ms = CASE WHEN excluded.until_ms > lease_fence_holds.until_ms THEN excluded.until_ms"
        " ELSE lease_fence_holds.until_ms END,"
        " since_ms = excluded.since_ms, grants = excluded.grants, identity = excluded.identity",
        (hold.hold_id, hold.until_ms, hold.since_ms, hold.grants, hold.identity, now_ms),
    )


def end_earlier_history_holds_txn(conn: Conn, newest: str) -> int:
    """Remove the history holds other than `newest`: they wait for check-ins under a history the database has left
    (a restore made in two steps, a failover seen before the store epoch it renewed), which no process makes any
    more; the newest one, as long and checked in under the history the database is in now, takes their place."""
    return conn.execute(
        "DELETE FROM lease_fence_holds WHERE hold_id LIKE 'history:%' AND hold_id <> ?", (newest,)
    ).rowcount


def end_hold_txn(conn: Conn, hold_id: str) -> None:
    """Remove the hold `hold_id`."""
    conn.execute("DELETE FROM lease_fence_holds WHERE hold_id = ?", (hold_id,))
