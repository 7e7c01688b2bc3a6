"""The SQL of the operator's tools (docs/architecture.md, "Where SQL lives"): the data folder's node identity, the
checks of `bbs doctor` and of a restored backup, the backup file's journal mode and checkpoint, and the gauges
`/metrics` reads at scrape time.

Several statements are SQLite's own (PRAGMAs, `sqlite_master`): docs/decisions.md, "Non-portable SQL", lists them
with their PostgreSQL equivalents. Opening and closing the database files stays with the tools (node/ops/backup.py,
datadir.py, doctor.py), which hand their connection to these functions.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from node.store.conn import POSTGRESQL, Conn, UndefinedTable, engine_of

# ---- node identity (node_meta) ----------------------------------------------------------------------------------


def meta_value(conn: Conn, key: str) -> str | None:
    """The node_meta value of `key`, or None when the store has none."""
    row = conn.execute("SELECT value FROM node_meta WHERE key = ?", (key,)).fetchone()
    return None if row is None else str(row[0])


def set_meta_txn(conn: Conn, key: str, value: str) -> None:
    """Set the node_meta value of `key`, replacing the one it had."""
    conn.execute(
        "INSERT INTO node_meta (key, value) VALUES (?, ?) ON CONFLICT (key) DO UPDATE SET value = excluded.value",
        (key, value),
    )


def stored_node_id(conn: Conn) -> str | None:
    """The node id recorded in the database, or None if it holds none yet (no node_meta table, or no node_id)."""
    if engine_of(conn) == POSTGRESQL:
        exists = "SELECT 1 WHERE to_regclass('node_meta') IS NOT NULL"  # no sqlite_master (record 50)
    else:
        exists = "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'node_meta'"
    if conn.execute(exists).fetchone():
        row = conn.execute("SELECT value FROM node_meta WHERE key = 'node_id'").fetchone()
        return None if row is None else str(row[0])
    return None


def insert_node_identity_txn(conn: Conn, node_id: str, epoch: str) -> None:
    """Record a new node's id and its first store epoch (a fresh database: either row already there is an error)."""
    conn.execute("INSERT INTO node_meta (key, value) VALUES ('node_id', ?)", (node_id,))
    conn.execute("INSERT INTO node_meta (key, value) VALUES ('epoch', ?)", (epoch,))


def renew_epoch_txn(conn: Conn, epoch: str, previous_epoch: str, restored_ms: int) -> None:
    """Give a restored store its new epoch, remembering the one it had and when it was restored; on PostgreSQL also
    the database history the new epoch belongs to (`follow_history_txn` then finds nothing moved)."""
    rows = [("epoch", epoch), ("previous_epoch", previous_epoch), ("restored_ms", str(restored_ms))]
    if engine_of(conn) == POSTGRESQL:
        rows.append((HISTORY_KEY, cluster_history(conn)))
    conn.executemany(
        "INSERT INTO node_meta (key, value) VALUES (?, ?) ON CONFLICT (key) DO UPDATE SET value = excluded.value", rows
    )


# the PostgreSQL history the store epoch belongs to (docs/decisions.md record 94); an operator who put a dump back
# by hand into the same cluster sets it to 'restored' (docs/operations.md)
HISTORY_KEY = "epoch_history"


def cluster_history(conn: Conn) -> str:
    """The history a PostgreSQL database is in: its cluster's system identifier and the timeline it writes WAL on
    now (`system:timeline`). A promotion or a point-in-time recovery starts a new timeline, a dump restored into
    another cluster has another system identifier. The timeline is read from the WAL insert position's file name
    (`pg_control_checkpoint()` shows the new one only after the first checkpoint that follows a promotion); both
    functions are open to any role."""
    row = conn.execute(
        "SELECT (SELECT system_identifier FROM pg_control_system())::text,"
        " substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8)"
    ).fetchone()
    return f"{row[0]}:{int(str(row[1]), 16)}"


def recorded_history(conn: Conn) -> tuple[str | None, str]:
    """(the history the store epoch belongs to as recorded, or None; the history the database is in now), on
    PostgreSQL: a quick read before `follow_history_txn`'s write."""
    return meta_value(conn, HISTORY_KEY), cluster_history(conn)


@dataclass(frozen=True)
class Renewed:
    """A store epoch renewed because the database's history moved (`follow_history_txn`)."""

    previous_epoch: str
    epoch: str
    was: str  # the history the previous epoch belonged to
    now: str


def follow_history_txn(conn: Conn, epoch: str, now_ms: int) -> Renewed | None:
    """On PostgreSQL, give the store the new epoch `epoch` when the database's history moved since the store epoch
    was given (`cluster_history`: a promotion, a point-in-time recovery, a dump restored into another cluster, or
    the operator's 'restored'): such a database may have lost a suffix of the log, and the sequence numbers it hands
    out next would name other records than those peers pulled under the same epoch. A database that recorded no
    history yet (made before this check) records the one it is in. Several processes may ask at once: one renews
    (the compare-and-set below), the others find the history recorded. Nothing on SQLite."""
    if engine_of(conn) != POSTGRESQL:
        return None
    now = cluster_history(conn)
    was = meta_value(conn, HISTORY_KEY)
    if was is None:
        conn.execute(
            "INSERT INTO node_meta (key, value) VALUES (?, ?) ON CONFLICT (key) DO NOTHING", (HISTORY_KEY, now)
        )
        return None
    previous = meta_value(conn, "epoch")
    if was == now or previous is None:
        return None
    moved = conn.execute("UPDATE node_meta SET value = ? WHERE key = ? AND value = ?", (now, HISTORY_KEY, was)).rowcount
    if not moved:  # another process renewed it first (it waited for that one's row lock, then found it changed)
        return None
    renew_epoch_txn(conn, epoch, previous, now_ms)
    return Renewed(previous, epoch, was, now)


# ---- checks of a database file ----------------------------------------------------------------------------------


def integrity_problems(conn: Conn) -> list[str]:
    """What SQLite's integrity_check finds: ["ok"] for a sound database."""
    return [row[0] for row in conn.execute("PRAGMA integrity_check")]


def schema_version(conn: Conn) -> int:
    """The schema version the migrations left (SQLite's user_version; PostgreSQL's one-row schema_version table,
    0 before the baseline: node/store/pg_schema.py)."""
    if engine_of(conn) == POSTGRESQL:
        exists = conn.execute("SELECT to_regclass('schema_version') IS NOT NULL").fetchone()[0]
        row = conn.execute("SELECT version FROM schema_version WHERE id = 1").fetchone() if exists else None
        return 0 if row is None else int(row[0])
    return int(conn.execute("PRAGMA user_version").fetchone()[0])


def record_count(conn: Conn) -> int:
    """How many records the log holds."""
    return int(conn.execute("SELECT count(*) FROM records").fetchone()[0])


def table_columns(conn: Conn, table: str) -> set[str]:
    """The column names of `table` (empty when there is no such table). `table` is a name of ours, not input."""
    if engine_of(conn) == POSTGRESQL:
        sql = (
            "SELECT column_name FROM information_schema.columns"
            " WHERE table_schema = current_schema() AND table_name = ?"
        )
        return {str(row[0]) for row in conn.execute(sql, (table,))}
    return {row[1] for row in conn.execute(f"PRAGMA table_info({table})")}


def peer_urls(conn: Conn, url_col: str, id_col: str | None) -> list[tuple[str, str | None]]:
    """(url, expected node id or None) of each row of peers, from these columns (names of ours, not input)."""
    select = f"SELECT {url_col}, {id_col if id_col else 'NULL'} FROM peers"
    return [(str(r[0]), r[1]) for r in conn.execute(select)]


# ---- a PostgreSQL database (docs/decisions.md record 77) ---------------------------------------------------------

# Empties the connection's schema of what a node's schema holds (tables with their indexes, triggers and identity
# sequences; functions), before a restore loads a dump into it, in the restore's own transaction (node/ops/pg_tools.py
# `restore`). Run only on a database that holds no node or that the operator told to replace (--force).
CLEAR_SCHEMA_PG = """DO $$
DECLARE name text;
BEGIN
  FOR name IN SELECT format('%I.%I', schemaname, tablename) FROM pg_tables WHERE schemaname = current_schema() LOOP
    EXECUTE 'DROP TABLE IF EXISTS ' || name || ' CASCADE';
  END LOOP;
  FOR name IN SELECT p.oid::regprocedure::text FROM pg_proc p
              WHERE p.pronamespace = current_schema()::regnamespace LOOP
    EXECUTE 'DROP ROUTINE IF EXISTS ' || name || ' CASCADE';
  END LOOP;
END $$"""


def export_snapshot(conn: Conn) -> str:
    """Inside a REPEATABLE READ transaction: its snapshot's id, which `pg_dump --snapshot` dumps as of while the
    transaction stays open (the backup's manifest and its dump then see one instant)."""
    return str(conn.execute("SELECT pg_export_snapshot()").fetchone()[0])


def user_tables(conn: Conn) -> int:
    """How many tables the connection's schema holds (PostgreSQL)."""
    return int(conn.execute("SELECT count(*) FROM pg_tables WHERE schemaname = current_schema()").fetchone()[0])


def data_checksums(conn: Conn) -> str:
    """Whether the PostgreSQL cluster checksums its data pages (`on` or `off`)."""
    return str(conn.execute("SHOW data_checksums").fetchone()[0])


# ---- the backup file ----------------------------------------------------------------------------------------------


def vacuum_into(conn: sqlite3.Connection, dest: Path) -> None:
    """Write a compacted copy of `conn`'s database to `dest` (`VACUUM INTO`, one read transaction): unlike the online
    backup API it copies no free page, so the text of deleted rows (a redacted body) does not travel with it."""
    conn.execute("VACUUM INTO ?", (str(dest),))


def empty_set_aside(conn: sqlite3.Connection) -> None:
    """In a backup's copy: delete the redacted versions set aside for the grace (`redacted_bodies`, migration 0043;
    docs/decisions.md record 69) with `secure_delete` on, so a backup made within a redaction's grace holds no byte
    of the body either. A database from before that migration has no such table."""
    conn.execute("PRAGMA secure_delete = ON")
    if conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'redacted_bodies'").fetchone():
        conn.execute("DELETE FROM redacted_bodies")
        conn.commit()


def use_rollback_journal(conn: Conn) -> None:
    """Make the database a self-contained file (journal_mode DELETE: no -wal or -shm beside it)."""
    conn.execute("PRAGMA journal_mode = DELETE")


def checkpoint_truncate(conn: Conn) -> None:
    """Copy the write-ahead log into the database file and empty it."""
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")


# ---- gauges read at scrape time (node/ops/metrics.py) ---------------------------------------------------------------


@dataclass(frozen=True)
class SqlGauge:
    """A gauge computed by one SQL query at scrape time: rows of (*label values, value). `sql_pg` is the
    PostgreSQL statement where SQLite's is not portable (record 50); None: `sql` serves both."""

    name: str
    help: str
    labels: tuple[str, ...]
    sql: str
    sql_pg: str | None = None

    def statement(self, engine: str) -> str:
        """The query for `engine` (node.store.conn's SQLITE or POSTGRESQL)."""
        return self.sql_pg if engine == POSTGRESQL and self.sql_pg is not None else self.sql


SQL_GAUGES: tuple[SqlGauge, ...] = (
    SqlGauge(
        "bbs_records",
        "Records in the log, by kind and origin ('local' or the peer node it came from)",
        ("kind", "origin"),
        "SELECT kind, origin, count(*) FROM records GROUP BY kind, origin",
    ),
    SqlGauge(
        "bbs_notifications",
        "Notification queue depth by state",
        ("status",),
        "SELECT status, count(*) FROM notifications GROUP BY status",
    ),
    # Workflows and governed memory (present once their tables exist).
    SqlGauge("bbs_tasks", "Tasks by status", ("status",), "SELECT status, count(*) FROM tasks GROUP BY status"),
    SqlGauge(
        "bbs_leases_live",
        "Task leases held and not yet expired, by whether this node is the task's home (the lease authority)",
        ("home",),
        "SELECT CASE WHEN home_node = (SELECT value FROM node_meta WHERE key = 'node_id') THEN 'here'"
        " ELSE 'elsewhere' END AS home, count(*) FROM tasks"
        " WHERE lease_holder IS NOT NULL AND lease_expires_ms > :now_ms GROUP BY home",
    ),
    SqlGauge(
        "bbs_candidates",
        "Default-mode candidates by status (proposed, approved, needs_review, rejected, promoted)",
        ("status",),
        "SELECT status, count(*) FROM dm_candidates GROUP BY status",
    ),
    # Federation (present once the peers table exists): lag and outcomes per peer.
    SqlGauge(
        "bbs_sync_lag_records",
        "Records the peer's feed holds beyond our cursor, as of the last pull",
        ("peer",),
        "SELECT node_id, max(coalesce(remote_head, 0) - cursor_seq, 0) FROM peers",
        "SELECT node_id, GREATEST(coalesce(remote_head, 0) - cursor_seq, 0) FROM peers",  # no two-argument max
    ),
    SqlGauge(
        "bbs_sync_since_ok_seconds",
        "Seconds since the last successful pull from the peer",
        ("peer",),
        "SELECT node_id, (:now_ms - last_ok_ms) / 1000.0 FROM peers WHERE last_ok_ms IS NOT NULL",
    ),
    SqlGauge(
        "bbs_sync_records",
        "Records received from the peer, by outcome (saved, duplicate, invalid, pending_link, internal, overflow,"
        " waiting, dropped_waiting, void)",
        ("peer", "outcome"),
        "SELECT node_id, 'saved', saved FROM peers UNION ALL SELECT node_id, 'duplicate', duplicate FROM peers"
        " UNION ALL SELECT node_id, 'invalid', invalid FROM peers"
        " UNION ALL SELECT node_id, 'pending_link', pending_link FROM peers"
        " UNION ALL SELECT node_id, 'internal', internal FROM peers"
        " UNION ALL SELECT node_id, 'overflow', overflow FROM peers"
        " UNION ALL SELECT node_id, 'waiting', waiting FROM peers"
        " UNION ALL SELECT node_id, 'dropped_waiting', dropped_waiting FROM peers"
        " UNION ALL SELECT node_id, 'void', void FROM peers",
    ),
    # The waiting area (node/store/waiting.py): records from peers whose key event has not arrived.
    SqlGauge(
        "bbs_waiting_records",
        "Records in the waiting area (their authority not held yet), by the peer they came from",
        ("peer",),
        "SELECT peer_id, count(*) FROM waiting GROUP BY peer_id",
    ),
    # Equivocation (node/store/equivocation.py): rows are never deleted, so this only grows.
    SqlGauge(
        "bbs_equivocations",
        "Equivocations detected: addresses holding two versions (an author signed two bodies under one address)",
        (),
        "SELECT count(*) FROM equivocations",
    ),
    SqlGauge(
        "bbs_retention_removed",
        "Node-local rows each retention policy removed, all runs together (node/retention/)",
        ("policy",),
        "SELECT policy, removed FROM retention_policies",
    ),
    SqlGauge(
        "bbs_retention_days",
        "Days of node-local rows each retention policy keeps (0: off, nothing removed)",
        ("policy",),
        "SELECT policy, days FROM retention_policies",
    ),
)


def query_gauges(conn: Conn, gauges: Iterable[SqlGauge], now_ms: int) -> dict[str, list[tuple[Any, ...]]]:
    """The rows of each gauge's query, by gauge name (`:now_ms` bound); a gauge whose table does not exist is
    left out."""
    if engine_of(conn) == POSTGRESQL:
        return _query_gauges_pg(conn, gauges, now_ms)
    out: dict[str, list[tuple[Any, ...]]] = {}
    for gauge in gauges:
        try:
            out[gauge.name] = [tuple(row) for row in conn.execute(gauge.sql, {"now_ms": now_ms})]
        except sqlite3.OperationalError as exc:
            if "no such table" not in str(exc):
                raise
    return out


def _query_gauges_pg(conn: Conn, gauges: Iterable[SqlGauge], now_ms: int) -> dict[str, list[tuple[Any, ...]]]:
    # An error aborts PostgreSQL's transaction: each gauge runs in its own savepoint, so a missing table (42P01)
    # leaves the others readable (record 50). A statement without placeholders takes no parameters there.
    out: dict[str, list[tuple[Any, ...]]] = {}
    for gauge in gauges:
        sql = gauge.statement(POSTGRESQL)
        conn.execute("SAVEPOINT gauge")
        try:
            out[gauge.name] = [
                tuple(row) for row in conn.execute(sql, {"now_ms": now_ms} if ":now_ms" in sql else None)
            ]
        except UndefinedTable:
            conn.execute("ROLLBACK TO SAVEPOINT gauge")
        conn.execute("RELEASE SAVEPOINT gauge")
    return out
