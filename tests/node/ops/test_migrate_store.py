"""`bbs migrate-store` on real parts: a SQLite node folder written through the node's REST API (agents, entries, a
subscription and its notifications, links, messages, tasks and a lease, a space with a member's post, a redaction's
tombstone), moved by the real command into an empty database of the throwaway PostgreSQL cluster, then served by a
real `bbs serve` that answers reads and takes a new post with the next seq. Each refusal leaves the folder and the
target as they were (docs/decisions.md record 79)."""

from __future__ import annotations

import hashlib
import json
import sqlite3
import subprocess
import sys
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from aiohttp.test_utils import TestClient

from identity import key_files, keys
from node.ops import datalock
from node.ops import store as ops_store
from node.ops.datadir import initialise
from node.store import db, pg_conn
from node.store import to_postgresql as copy
from scenarios import pg_cluster as cluster_mod
from tests.node_story import assert_story_served, serve_story, write_story

pytestmark = pytest.mark.postgresql
REPO = Path(__file__).parents[3]
BBS = [sys.executable, "-m", "node.cli"]
WF = "/v1/agent-workflows"


def bbs(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*BBS, *args], capture_output=True, text=True, check=False, cwd=REPO)


@pytest.fixture
def target(pg_cluster: cluster_mod.Cluster) -> Iterator[str]:
    """The `postgresql://` URL of a new empty database, dropped after the test."""
    name = pg_cluster.create_database()
    yield pg_cluster.store_url(name)
    pg_cluster.drop_database(name)


def pg_tables(url: str) -> int:
    with psycopg.connect(url) as conn:
        row = conn.execute("SELECT count(*) FROM pg_tables WHERE schemaname = current_schema()").fetchone()
    assert row is not None
    return int(row[0])


def sqlite_counts(path: Path) -> dict[str, int]:
    conn = sqlite3.connect(path)
    try:
        names = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        return {
            n: conn.execute(f'SELECT count(*) FROM "{n}"').fetchone()[0] for n in names if not n.startswith("sqlite_")
        }
    finally:
        conn.close()


def pg_counts(url: str, tables: list[str]) -> dict[str, int]:
    with psycopg.connect(url) as conn:
        return {t: int(conn.execute(f'SELECT count(*) FROM "{t}"').fetchone()[0]) for t in tables}  # type: ignore[index]


def table_rows(conn: Any, table: str) -> list[str]:
    """Every row of `table`, each spelled by repr (so rows of mixed types sort), sorted: a table's whole content."""
    return sorted(repr(tuple(row)) for row in conn.execute(f'SELECT * FROM "{table}"').fetchall())


def unchanged(root: Path, url: str, before: dict[str, int]) -> None:
    """The folder is still the SQLite node it was, and the target database holds nothing."""
    assert (root / "bbs.db").exists() and not (root / "store.url").exists()
    assert not list(root.glob("bbs.db.before-postgresql-*"))
    assert sqlite_counts(root / "bbs.db") == before
    assert pg_tables(url) == 0


@pytest.fixture
async def story(tmp_path: Path, aiohttp_client: Callable[..., Awaitable[TestClient]]) -> dict[str, Any]:
    """A SQLite node folder holding one of everything, written through the REST API of the real node; closed."""
    return await write_story(tmp_path / "node", aiohttp_client)


def test_cli_help_names_the_command_and_its_refusals() -> None:
    out = bbs("migrate-store", "--help")
    assert out.returncode == 0
    assert "--from" in out.stdout and "--to" in out.stdout and "bbs.db.before-postgresql" in out.stdout


async def test_a_node_moves_to_postgresql_and_serves_the_same_records_with_the_next_seq(
    story: dict[str, Any], target: str
) -> None:
    root: Path = story["root"]
    before = sqlite_counts(root / "bbs.db")
    assert before["records"] > 10 and before["tombstones"] == 1 and before["tasks"] == 2 and before["spaces"] == 1
    assert all(before[t] > 0 for t in ("links", "messages", "notifications", "local_agents", "space_records"))
    moved = bbs("migrate-store", "--from", str(root), "--to", target, "--json")
    assert moved.returncode == 0, moved.stderr
    report = json.loads(moved.stdout)
    assert report["records"] == before["records"] and report["rows"] == sum(before.values())
    assert report["digests_checked"] == 2  # the public federation and the space
    aside = Path(report["kept_aside"])
    assert aside.parent == root and aside.name.startswith("bbs.db.before-postgresql-") and aside.exists()
    assert not (root / "bbs.db").exists() and (root / "store.url").read_text().strip() == target
    assert (root / "store.url").stat().st_mode & 0o777 == 0o600
    assert pg_counts(target, list(before)) == before  # every table, row for row
    conn = db.connect(aside)
    try:
        with psycopg.connect(target) as pg:
            differ = [t for t in before if table_rows(conn, t) != table_rows(pg, t)]
        assert differ == []  # and value for value (the credential epoch a key event moved included)
        autoincrement = {str(r[0]): int(r[1]) for r in conn.execute("SELECT name, seq FROM sqlite_sequence")}
        handed_out = autoincrement["records"]
        old_digest = ops_store.record_count(conn)
    finally:
        conn.close()
    assert old_digest == before["records"]
    store = pg_conn.connect(target)
    try:  # every identity goes on past its table's largest key (the rebuild's trial restarted none of them)
        identities = copy.pg_identities(store)
        following = {t: (copy.next_key(store, t, c), copy.largest(store, t, c)) for t, c in identities}
    finally:
        store.close()
    assert following["records"] == (handed_out + 1, handed_out)
    assert all(after == max(largest, autoincrement.get(t, 0)) + 1 for t, (after, largest) in following.items())
    assert "links" not in following  # no identity to continue: a link is numbered max + 1 at its insert (record 81)
    # a notification of the redacted entry was handed out and forgotten: its id is not handed out again
    assert following["notifications"] == (autoincrement["notifications"] + 1, 1) and autoincrement["notifications"] > 1

    answers = await serve_story(root, story, "posted on PostgreSQL")
    # the same node, now on PostgreSQL; the log's seq goes on where SQLite's left off
    assert_story_served(answers, story, report["node_id"], handed_out + 1)
    with psycopg.connect(target) as pg:
        row = pg.execute("SELECT count(*) FROM records").fetchone()
    assert row == (before["records"] + 1,)
    assert hashlib.sha256(aside.read_bytes()).hexdigest()  # the file is kept, whole and readable


def test_a_serving_folder_is_refused(story: dict[str, Any], target: str) -> None:
    root = story["root"]
    before = sqlite_counts(root / "bbs.db")
    handle = datalock.hold(root)  # the lock `bbs serve` holds for its life
    try:
        out = bbs("migrate-store", "--from", str(root), "--to", target)
    finally:
        handle.close()
    assert out.returncode != 0 and "another bbs serve is running" in out.stderr and len(out.stderr.splitlines()) == 1
    unchanged(root, target, before)


def test_a_database_that_is_not_empty_is_refused(story: dict[str, Any], target: str) -> None:
    root = story["root"]
    before = sqlite_counts(root / "bbs.db")
    with psycopg.connect(target, autocommit=True) as conn:
        conn.execute("CREATE TABLE someone_elses (x int)")
    out = bbs("migrate-store", "--from", str(root), "--to", target)
    assert out.returncode == 1 and "not empty" in out.stderr and len(out.stderr.splitlines()) == 1
    assert (root / "bbs.db").exists() and not (root / "store.url").exists()
    assert sqlite_counts(root / "bbs.db") == before and pg_tables(target) == 1


def test_a_folder_already_on_postgresql_is_refused(tmp_path: Path, pg_cluster: cluster_mod.Cluster) -> None:
    here, there = pg_cluster.create_database(), pg_cluster.create_database()
    try:
        root = tmp_path / "node"
        initialise(root, pg_cluster.store_url(here))
        out = bbs("migrate-store", "--from", str(root), "--to", pg_cluster.store_url(there))
        assert out.returncode == 1 and "PostgreSQL already" in out.stderr and len(out.stderr.splitlines()) == 1
        assert pg_tables(pg_cluster.store_url(there)) == 0
    finally:
        pg_cluster.drop_database(here)
        pg_cluster.drop_database(there)


def older_node(root: Path, upto: int) -> None:
    """A node folder whose bbs.db ran the migrations before `upto` only: what an older release left."""
    root.mkdir(mode=0o700)
    key = keys.SigningKey.generate()
    key_files.save_key(root / "node.key", key)
    conn = sqlite3.connect(root / "bbs.db", isolation_level=None)
    try:
        conn.create_function("bbs_sha256_hex", 1, lambda body: hashlib.sha256(body).hexdigest(), deterministic=True)
        for number, _name, sql in db.migrations():
            if number >= upto:
                break
            conn.executescript(f"BEGIN IMMEDIATE; {sql}; PRAGMA user_version = {number}; COMMIT;")
        ops_store.insert_node_identity_txn(conn, key.did, "epoch")
    finally:
        conn.close()


def test_a_database_older_than_the_head_is_refused_with_what_to_do(tmp_path: Path, target: str) -> None:
    root = tmp_path / "node"
    head = db.migrations()[-1][0]
    older_node(root, head)
    before = sqlite_counts(root / "bbs.db")
    out = bbs("migrate-store", "--from", str(root), "--to", target)
    assert out.returncode == 1 and len(out.stderr.splitlines()) == 1, out.stderr
    assert "older than this software's" in out.stderr and f"bbs serve --data {root}" in out.stderr
    unchanged(root, target, before)


def test_a_database_newer_than_the_head_is_refused(story: dict[str, Any], target: str) -> None:
    root = story["root"]
    conn = sqlite3.connect(root / "bbs.db")
    conn.execute(f"PRAGMA user_version = {db.migrations()[-1][0] + 1}")
    conn.close()
    before = sqlite_counts(root / "bbs.db")
    out = bbs("migrate-store", "--from", str(root), "--to", target)
    assert out.returncode == 1 and "newer than this software's" in out.stderr and "upgrade" in out.stderr
    unchanged(root, target, before)


def test_a_copy_that_does_not_verify_is_rolled_back_and_nothing_is_switched(story: dict[str, Any], target: str) -> None:
    """A projection row the log does not give (a tag no entry carries): the copy holds it, a rebuild of the copy does
    not; the move is refused, and the target is left empty (its migrations rolled back with the copy)."""
    root = story["root"]
    conn = sqlite3.connect(root / "bbs.db")
    entry_id = conn.execute("SELECT min(id) FROM entries").fetchone()[0]
    conn.execute("INSERT INTO entry_tags (entry_id, tag) VALUES (?, 'not-in-the-log')", (entry_id,))
    conn.commit()
    conn.close()
    before = sqlite_counts(root / "bbs.db")
    out = bbs("migrate-store", "--from", str(root), "--to", target)
    assert out.returncode == 1 and len(out.stderr.splitlines()) == 1, out.stderr
    assert "a rebuild of the projections" in out.stderr and "entry_tags" in out.stderr
    unchanged(root, target, before)


def test_a_folder_without_a_node_and_a_target_that_is_not_postgresql_or_unreachable_are_refused(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    out = bbs("migrate-store", "--from", str(empty), "--to", "postgresql://nobody@/nothing")
    assert out.returncode == 1 and "holds no node" in out.stderr
    afile = tmp_path / "afile"
    afile.write_text("not a folder")
    out = bbs("migrate-store", "--from", str(afile), "--to", "postgresql://nobody@/nothing")
    assert out.returncode == 1 and out.stderr == f"bbs: {afile} is a file, not a data folder\n"
    out = bbs("migrate-store", "--from", str(afile / "sub"), "--to", "postgresql://nobody@/nothing")
    assert out.returncode == 1 and "holds no node" in out.stderr and len(out.stderr.splitlines()) == 1
    assert bbs("init", "--data", str(tmp_path / "node")).returncode == 0
    out = bbs("migrate-store", "--from", str(tmp_path / "node"), "--to", "mysql://h/db")
    assert out.returncode == 1 and "PostgreSQL URL" in out.stderr
    unreachable = f"postgresql://nobody:s3cret@/nothing?host={tmp_path / 'no-server'}"
    out = bbs("migrate-store", "--from", str(tmp_path / "node"), "--to", unreachable)
    assert out.returncode == 1 and "cannot connect to the target database" in out.stderr
    assert len(out.stderr.splitlines()) == 1 and "s3cret" not in out.stderr
    assert (tmp_path / "node" / "bbs.db").exists() and not (tmp_path / "node" / "store.url").exists()
