"""`bbs migrate-store --to sqlite` on real parts: a node written through the REST API of a real node on a database of
the throwaway PostgreSQL cluster, moved back by the real command into the folder's bbs.db, then served by a real `bbs
serve` that answers reads and takes a new post with the next seq. The moved-from database is refused from then on;
each refusal leaves the folder and the database as they were (docs/decisions.md record 95)."""

from __future__ import annotations

import json
import shutil
import sqlite3
import subprocess
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import psycopg
import pytest
from aiohttp.test_utils import TestClient

from node.ops import datalock
from node.ops.datadir import MOVE_ID_NAME, join
from node.ops.migrate_back import MOVING_NAME
from node.store import db
from scenarios.fednet import free_port
from tests.node_story import assert_story_served, serve_story, write_story

pytestmark = pytest.mark.postgresql
REPO = Path(__file__).parents[3]
BBS = [sys.executable, "-m", "node.cli"]


def bbs(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*BBS, *args], capture_output=True, text=True, check=False, cwd=REPO)


@pytest.fixture
async def story(
    tmp_path: Path, pg_store_url: str, aiohttp_client: Callable[..., Awaitable[TestClient]]
) -> dict[str, Any]:
    """A node folder on PostgreSQL (a new empty database) holding one of everything, written through the REST API;
    closed."""
    story = await write_story(tmp_path / "node", aiohttp_client, pg_store_url)
    return {**story, "url": pg_store_url}


def table_rows(conn: Any, table: str) -> list[str]:
    """Every row of `table`, each spelled by repr, sorted: a table's whole content."""
    return sorted(repr(tuple(row)) for row in conn.execute(f'SELECT * FROM "{table}"').fetchall())


def pg_state(url: str) -> dict[str, int]:
    """Row counts of every table of the database, and whether it is marked as moved."""
    with psycopg.connect(url) as conn:
        names = [
            str(r[0])
            for r in conn.execute("SELECT table_name FROM information_schema.tables WHERE table_schema = 'public'")
        ]
        counts = {n: int(conn.execute(f'SELECT count(*) FROM "{n}"').fetchone()[0]) for n in names}  # type: ignore[index]
        marked = conn.execute("SELECT count(*) FROM node_meta WHERE key = 'moved_to_sqlite'").fetchone()
    assert marked is not None
    return {**counts, "marked": int(marked[0])}


def unchanged(root: Path, url: str, before: dict[str, int]) -> None:
    """The folder still names the database, holds no SQLite file, and the database is as it was, unmarked."""
    assert (root / "store.url").read_text().strip() == url
    assert not (root / "bbs.db").exists() and not list(root.glob(MOVING_NAME + "*"))
    assert not list(root.glob("store.url.before-sqlite-*"))
    assert pg_state(url) == before and before["marked"] == 0


def back_to_marked(root: Path, url: str) -> None:
    """Put a moved folder back as an interruption after the mark left it: naming the marked database, holding the
    move's id (the copy itself is the caller's business)."""
    next(root.glob("store.url.before-sqlite-*")).rename(root / "store.url")
    with psycopg.connect(url) as pg:
        mark = pg.execute("SELECT value FROM node_meta WHERE key = 'moved_to_sqlite'").fetchone()
    assert mark is not None
    (root / MOVE_ID_NAME).write_text(json.loads(mark[0])["move"])


def test_cli_help_names_the_way_back() -> None:
    out = bbs("migrate-store", "--help")
    assert out.returncode == 0 and "'sqlite'" in out.stdout and "--to sqlite" in out.stdout


async def test_a_node_moves_back_to_sqlite_and_serves_the_same_records_with_the_next_seq(
    story: dict[str, Any],
) -> None:
    root: Path = story["root"]
    url: str = story["url"]
    before = pg_state(url)
    assert before["records"] > 10 and before["tombstones"] == 1 and before["tasks"] == 2 and before["spaces"] == 1
    with psycopg.connect(url) as pg:  # a notification handed out and forgotten (the redacted entry's): not reused
        handed_out = pg.execute("SELECT last_value FROM pg_sequences WHERE sequencename LIKE 'records%'").fetchone()
        notified = pg.execute("SELECT last_value FROM pg_sequences WHERE sequencename LIKE 'notifications%'").fetchone()
        largest_notification = pg.execute("SELECT max(id) FROM notifications").fetchone()
    assert handed_out is not None and notified is not None and largest_notification is not None
    assert notified[0] > largest_notification[0]

    moved = bbs("migrate-store", "--from", str(root), "--to", "sqlite", "--json")
    assert moved.returncode == 0, moved.stderr
    report = json.loads(moved.stdout)
    assert report["records"] == before["records"] and report["digests_checked"] == 2 and not report["finished"]
    aside = Path(report["kept_aside"])
    assert aside.parent == root and aside.name.startswith("store.url.before-sqlite-")
    assert aside.read_text().strip() == url
    assert not (root / "store.url").exists() and (root / "bbs.db").exists() and not list(root.glob(MOVING_NAME + "*"))
    assert (root / "bbs.db").stat().st_mode & 0o777 == 0o600
    assert pg_state(url) == {**before, "node_meta": before["node_meta"] + 1, "marked": 1}
    conn = db.connect(root / "bbs.db")
    try:
        with psycopg.connect(url) as pg:
            tables = [t for t in before if t not in ("marked", "schema_version")]
            differ = [t for t in tables if t != "node_meta" and table_rows(conn, t) != table_rows(pg, t)]
            meta = set(table_rows(conn, "node_meta")) ^ set(table_rows(pg, "node_meta"))
        autoincrement = {str(r[0]): int(r[1]) for r in conn.execute("SELECT name, seq FROM sqlite_sequence")}
    finally:
        conn.close()
    assert differ == []  # every table, value for value
    # node_meta differs by the mark (PostgreSQL's) and by the file's VACUUM counted as done (made with secure_delete)
    assert sorted(row.split("'")[1] for row in meta) == ["moved_to_sqlite", "secure_delete_vacuum_ms"], meta
    assert autoincrement["records"] == handed_out[0] and autoincrement["notifications"] == notified[0]

    answers = await serve_story(root, story, "posted on SQLite again")
    # the same node, now on SQLite; the log's seq goes on where PostgreSQL's left off
    assert_story_served(answers, story, report["node_id"], handed_out[0] + 1)
    assert pg_state(url)["records"] == before["records"]  # the post went to SQLite alone


def test_the_moved_from_database_is_refused_to_every_folder_that_names_it(
    story: dict[str, Any], tmp_path: Path
) -> None:
    root: Path = story["root"]
    other = tmp_path / "second-process"
    join(other, root)  # a second process of the node, joined before the move
    assert bbs("migrate-store", "--from", str(root), "--to", "sqlite").returncode == 0
    for command in (["serve", "--data", str(other), "--port", str(free_port())], ["digest", "--data", str(other)]):
        out = bbs(*command)
        assert out.returncode == 1 and "moved to SQLite" in out.stderr, out.stderr
        assert len(out.stderr.splitlines()) == 1 and story["url"] not in out.stderr
        assert f"delete {other}" in out.stderr
    doctor = bbs("doctor", "--data", str(other), "--json")
    assert doctor.returncode != 0
    failed = [c for c in json.loads(doctor.stdout) if c["status"] == "fail"]
    assert [c["name"] for c in failed] == ["database"] and "moved to SQLite" in failed[0]["detail"]
    assert not (other / "bbs.db").exists()
    out = bbs("digest", "--data", str(root))  # the folder it moved into serves it
    assert out.returncode == 0, out.stderr
    # a copy left in the joined folder (a run of the move there that was refused) never becomes a second node
    shutil.copyfile(root / "bbs.db", other / MOVING_NAME)
    out = bbs("migrate-store", "--from", str(other), "--to", "sqlite")
    assert out.returncode == 1 and f"into {root.resolve()}" in out.stderr and f"delete {other}" in out.stderr
    assert not (other / "bbs.db").exists() and (other / "store.url").exists()


def test_a_joined_folder_at_the_path_the_node_moved_into_is_not_taken_for_it(
    story: dict[str, Any], tmp_path: Path
) -> None:
    """Two folders at one path (each container's /data, two hosts): after node-1's folder moved, node-2's folder at
    the same path holds no id of the move, so no run there finishes it or copies the database again."""
    root: Path = story["root"]
    other = tmp_path / "second-process"
    join(other, root)
    assert bbs("migrate-store", "--from", str(root), "--to", "sqlite").returncode == 0
    root.rename(tmp_path / "first-process-elsewhere")
    other.rename(root)  # node-2's folder where node-1's was
    for command in (["migrate-store", "--from", str(root), "--to", "sqlite"], ["digest", "--data", str(root)]):
        out = bbs(*command)
        assert out.returncode == 1 and f"delete {root}" in out.stderr and "again to finish" not in out.stderr
    assert not (root / "bbs.db").exists() and not list(root.glob("bbs.db.*"))


def test_a_folder_holding_a_copy_but_no_move_id_is_told_how_to_decide(story: dict[str, Any]) -> None:
    """The folder the node moved into, its id file lost: never told only to delete itself, nor finished blindly; the
    refusal names the move's id, and written back, the rerun finishes. Once on SQLite, a leftover id file goes."""
    root: Path = story["root"]
    assert bbs("migrate-store", "--from", str(root), "--to", "sqlite").returncode == 0
    back_to_marked(root, story["url"])
    move = (root / MOVE_ID_NAME).read_text()
    (root / MOVE_ID_NAME).unlink()
    out = bbs("migrate-store", "--from", str(root), "--to", "sqlite")
    assert out.returncode == 1 and "holds bbs.db but not the move's id" in out.stderr and move in out.stderr
    (root / MOVE_ID_NAME).write_text(move)
    assert bbs("migrate-store", "--from", str(root), "--to", "sqlite").returncode == 0
    (root / MOVE_ID_NAME).write_text(move)  # as a move interrupted after its last rename leaves it
    out = bbs("migrate-store", "--from", str(root), "--to", "sqlite")
    assert out.returncode == 1 and "SQLite already" in out.stderr and not (root / MOVE_ID_NAME).exists()


def test_a_marked_database_whose_copy_is_gone_is_copied_again_into_its_folder(story: dict[str, Any]) -> None:
    """The mark committed but neither bbs.db.moving nor bbs.db is in the folder (deleted, or lost by the disk): the
    run in that folder copies the database again, which still holds everything; the copy carries no mark."""
    root: Path = story["root"]
    assert bbs("migrate-store", "--from", str(root), "--to", "sqlite").returncode == 0
    (root / "bbs.db").unlink()
    back_to_marked(root, story["url"])
    again = bbs("migrate-store", "--from", str(root), "--to", "sqlite", "--json")
    assert again.returncode == 0, again.stderr
    report = json.loads(again.stdout)
    assert not report["finished"] and report["records"] == pg_state(story["url"])["records"]
    conn = sqlite3.connect(root / "bbs.db")
    try:
        assert conn.execute("SELECT count(*) FROM node_meta WHERE key = 'moved_to_sqlite'").fetchone() == (0,)
    finally:
        conn.close()
    assert bbs("digest", "--data", str(root)).returncode == 0


def test_an_interrupted_move_is_finished_by_running_it_again(story: dict[str, Any]) -> None:
    """The state an interruption after the database was marked leaves: the folder still names the database, the
    copy lies in bbs.db.moving. Every command refuses and says to run the move again; that run finishes it."""
    root: Path = story["root"]
    assert bbs("migrate-store", "--from", str(root), "--to", "sqlite").returncode == 0
    (root / "bbs.db").rename(root / MOVING_NAME)
    back_to_marked(root, story["url"])
    out = bbs("digest", "--data", str(root))
    assert out.returncode == 1 and "again to finish" in out.stderr
    again = bbs("migrate-store", "--from", str(root), "--to", "sqlite", "--json")
    assert again.returncode == 0, again.stderr
    report = json.loads(again.stdout)
    assert report["finished"] and report["rows"] == 0 and report["node_id"].startswith("did:key:")
    assert (root / "bbs.db").exists() and not (root / "store.url").exists() and not (root / MOVING_NAME).exists()
    assert bbs("digest", "--data", str(root)).returncode == 0


def test_a_database_another_client_is_connected_to_is_refused(story: dict[str, Any]) -> None:
    root, url = story["root"], story["url"]
    before = pg_state(url)
    with psycopg.connect(url):  # another process of the node, a command, a psql
        out = bbs("migrate-store", "--from", str(root), "--to", "sqlite")
    assert out.returncode == 1 and "1 other connection(s)" in out.stderr and len(out.stderr.splitlines()) == 1
    unchanged(root, url, before)


def test_a_serving_folder_is_refused(story: dict[str, Any]) -> None:
    root, url = story["root"], story["url"]
    before = pg_state(url)
    handle = datalock.hold(root)
    try:
        out = bbs("migrate-store", "--from", str(root), "--to", "sqlite")
    finally:
        handle.close()
    assert out.returncode != 0 and "another bbs serve is running" in out.stderr and len(out.stderr.splitlines()) == 1
    unchanged(root, url, before)


def test_a_copy_that_does_not_verify_leaves_nothing(story: dict[str, Any]) -> None:
    """A projection row the log does not give: the copy holds it, a rebuild of the copy does not; refused, the SQLite
    file removed, the database unmarked."""
    root, url = story["root"], story["url"]
    with psycopg.connect(url, autocommit=True) as pg:
        pg.execute("INSERT INTO entry_tags (entry_id, tag) SELECT min(id), 'not-in-the-log' FROM entries")
    before = pg_state(url)
    out = bbs("migrate-store", "--from", str(root), "--to", "sqlite")
    assert out.returncode == 1 and len(out.stderr.splitlines()) == 1, out.stderr
    assert "a rebuild of the projections" in out.stderr and "entry_tags" in out.stderr
    unchanged(root, url, before)


def test_a_database_at_another_schema_version_is_refused(story: dict[str, Any]) -> None:
    root, url = story["root"], story["url"]
    with psycopg.connect(url, autocommit=True) as pg:
        pg.execute("UPDATE schema_version SET version = version + 1")
    before = pg_state(url)
    out = bbs("migrate-store", "--from", str(root), "--to", "sqlite")
    assert out.returncode == 1 and "newer than this software's" in out.stderr and "upgrade" in out.stderr
    unchanged(root, url, before)


def test_folders_on_sqlite_without_a_node_or_with_a_stray_bbs_db_are_refused(
    story: dict[str, Any], tmp_path: Path
) -> None:
    sqlite_node = tmp_path / "on-sqlite"
    assert bbs("init", "--data", str(sqlite_node)).returncode == 0
    out = bbs("migrate-store", "--from", str(sqlite_node), "--to", "sqlite")
    assert out.returncode == 1 and "SQLite already" in out.stderr
    empty = tmp_path / "empty"
    empty.mkdir()
    out = bbs("migrate-store", "--from", str(empty), "--to", "sqlite")
    assert out.returncode == 1 and "holds no node" in out.stderr
    root, url = story["root"], story["url"]
    before = pg_state(url)
    sqlite3.connect(root / "bbs.db").close()  # a file someone left beside store.url
    out = bbs("migrate-store", "--from", str(root), "--to", "sqlite")
    assert out.returncode == 1 and "holds a bbs.db beside its store.url" in out.stderr
    (root / "bbs.db").unlink()
    unchanged(root, url, before)
