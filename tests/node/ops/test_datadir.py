"""node.ops.datadir: first-run initialisation of a data folder, and the checks (`require_node`, `require_database`)
every other command runs on it: a folder without a node, a missing or foreign node.key, a file that is not a
database, all refused with one line and without creating anything."""

from __future__ import annotations

import sqlite3
import stat
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from aiohttp.test_utils import TestClient

from identity import key_files, keys
from node.app import create_app
from node.errors import Conflict
from node.ops import datadir
from node.ops.datadir import DataDir, initialise, require_database, require_node
from node.service import Node
from node.store import db
from wire.cli import CommandError


def node_id_in(store: Path | str) -> str:
    conn = db.connect_store(store, readonly=True)
    try:
        return str(conn.execute("SELECT value FROM node_meta WHERE key = 'node_id'").fetchone()[0])
    finally:
        conn.close()


def test_datadir_paths(tmp_path: Path) -> None:
    data = DataDir(tmp_path)
    assert (data.db_path, data.key_path) == (tmp_path / "bbs.db", tmp_path / "node.key")
    assert not data.exists()
    data.key_path.write_text("x")
    assert not data.exists()  # both files, or no node
    data.db_path.write_bytes(b"")
    assert data.exists()


def test_initialise_creates_a_private_node_and_an_admin_token(
    tmp_path: Path, node_store: Callable[[], str | None]
) -> None:
    root = tmp_path / "a" / "b" / "node"
    store_url = node_store()
    token = initialise(root, store_url)
    assert isinstance(token, str) and token
    data = DataDir(root)
    assert data.exists()
    assert stat.S_IMODE(root.stat().st_mode) == 0o700
    private = data.db_path if store_url is None else data.store_url_path  # what the folder holds of the database
    assert stat.S_IMODE(private.stat().st_mode) & 0o077 == 0
    key = key_files.load_key(data.key_path)
    assert node_id_in(data.store) == key.did
    assert require_node(root) == key.did == require_database(root)


async def test_the_admin_token_is_an_admin_credential_of_the_node(
    tmp_path: Path, aiohttp_client: Callable[..., Awaitable[TestClient]], node_store: Callable[[], str | None]
) -> None:
    token = initialise(tmp_path / "node", node_store())
    assert token is not None
    client = await aiohttp_client(create_app(Node(tmp_path / "node")))
    admin = await client.get("/v1/peers", headers={"Authorization": f"Bearer {token}"})
    assert admin.status == 200, await admin.text()
    assert (await client.get("/v1/peers", headers={"Authorization": "Bearer nope"})).status == 401


def test_initialise_again_keeps_the_node_and_makes_no_token(
    tmp_path: Path, node_store: Callable[[], str | None]
) -> None:
    root = tmp_path / "node"
    assert initialise(root, node_store()) is not None
    first = require_node(root)
    key_bytes = (root / "node.key").read_bytes()
    assert initialise(root) is None  # the folder names its store
    assert require_node(root) == first
    assert (root / "node.key").read_bytes() == key_bytes


def test_concurrent_initialisations_create_one_node(tmp_path: Path, node_store: Callable[[], str | None]) -> None:
    root = tmp_path / "node"
    store_url = node_store()
    with ThreadPoolExecutor(max_workers=4) as pool:
        tokens = list(pool.map(lambda _: initialise(root, store_url), range(4)))
    assert sum(t is not None for t in tokens) == 1
    assert require_node(root) == key_files.load_key(root / "node.key").did


def test_an_interrupted_initialisation_keeps_its_key(tmp_path: Path, node_store: Callable[[], str | None]) -> None:
    """A key written without a database: the next initialise builds the node around that key."""
    root = tmp_path / "node"
    root.mkdir()
    key = keys.SigningKey.generate()
    key_files.save_key(root / "node.key", key)
    assert initialise(root, node_store()) is not None
    assert require_node(root) == key.did


@pytest.mark.parametrize("check", [require_node, require_database])
def test_a_folder_without_a_node_is_refused_and_left_alone(tmp_path: Path, check: object) -> None:
    empty, absent = tmp_path / "empty", tmp_path / "absent"
    empty.mkdir()
    for root in (empty, absent):
        with pytest.raises(CommandError, match="holds no node; run 'bbs init --data"):
            check(root)  # type: ignore[operator]
    assert list(empty.iterdir()) == [] and not absent.exists()


@pytest.mark.parametrize("call", [initialise, require_node, require_database])
def test_a_file_in_place_of_the_folder_is_refused(tmp_path: Path, call: object) -> None:
    path = tmp_path / "not-a-folder"
    path.write_text("hello")
    with pytest.raises(CommandError, match="is a file, not a data folder"):
        call(path)  # type: ignore[operator]
    assert path.read_text() == "hello"


def test_a_database_without_its_key(tmp_path: Path, node_store: Callable[[], str | None]) -> None:
    root = tmp_path / "node"
    initialise(root, node_store())
    node_id = require_node(root)
    (root / "node.key").unlink()
    for call in (require_node, initialise):
        with pytest.raises(CommandError, match=f"node.key is missing; the database belongs to {node_id}"):
            call(root)
    assert not (root / "node.key").exists()  # never replaced by a new key
    assert require_database(root) == node_id  # a replica without its key still has a digest


def test_a_foreign_key_is_a_key_mismatch(tmp_path: Path, node_store: Callable[[], str | None]) -> None:
    root = tmp_path / "node"
    initialise(root, node_store())
    node_id = require_node(root)
    other = keys.SigningKey.generate()
    key_files.save_key(root / "node.key", other)
    for call in (require_node, initialise):
        with pytest.raises(Conflict) as caught:
            call(root)
        assert caught.value.code == "key_mismatch"
        assert other.did in caught.value.detail and node_id in caught.value.detail


def test_a_damaged_key_file_is_refused_without_quoting_it(tmp_path: Path, node_store: Callable[[], str | None]) -> None:
    root = tmp_path / "node"
    initialise(root, node_store())
    (root / "node.key").write_text("ed25519:SECRETSECRET-not-a-seed\n")
    for call in (require_node, initialise):
        with pytest.raises(CommandError, match="is not a node key file") as caught:
            call(root)
        assert "SECRET" not in str(caught.value)


@pytest.mark.sqlite_only(reason="a damaged SQLite file in the folder")
def test_a_file_that_is_not_a_database_is_refused(tmp_path: Path) -> None:
    root = tmp_path / "node"
    initialise(root)
    (root / "bbs.db").write_bytes(b"this is not an SQLite database at all, just some text" * 100)
    for call in (require_node, require_database, initialise):
        with pytest.raises(CommandError, match=r"is not a readable node database.*bbs doctor --data"):
            call(root)


def test_a_database_from_a_newer_version_is_refused_by_initialise(
    tmp_path: Path, node_store: Callable[[], str | None]
) -> None:
    root = tmp_path / "node"
    store_url = node_store()
    initialise(root, store_url)
    if store_url is None:
        conn = sqlite3.connect(root / "bbs.db")
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        conn.execute(f"PRAGMA user_version = {version + 1}")
        conn.close()
    else:  # PostgreSQL's schema version is a row
        pg = db.connect_store(store_url)
        pg.execute("UPDATE schema_version SET version = version + 1")
        pg.close()
    with pytest.raises(db.SchemaTooNew):
        initialise(root)


@pytest.mark.sqlite_only(reason="an empty SQLite file in the folder")
def test_an_empty_database_file_holds_no_node(tmp_path: Path) -> None:
    """A database with no node_meta table (a start that never got going) is not a node."""
    root = tmp_path / "node"
    root.mkdir()
    sqlite3.connect(root / "bbs.db").close()
    with pytest.raises(CommandError, match="holds no node"):
        require_database(root)
    assert initialise(root) is not None  # and initialise makes one there
    assert require_node(root) == key_files.load_key(root / "node.key").did


def test_no_node_names_both_commands_that_create_one(tmp_path: Path) -> None:
    message = str(datadir.no_node(tmp_path))
    assert f"bbs init --data {tmp_path}" in message and f"bbs serve --data {tmp_path}" in message


@pytest.mark.sqlite_only(reason="SQLite's secure_delete and its one VACUUM; PostgreSQL has neither")
def test_a_database_init_creates_needs_no_vacuum_and_one_it_completes_keeps_its_own(tmp_path: Path) -> None:
    def vacuumed(store: Path) -> bool:
        conn = db.connect(store, readonly=True)
        try:
            found = conn.execute("SELECT 1 FROM node_meta WHERE key = ?", (db.SECURE_DELETE_VACUUM,)).fetchone()
            return found is not None
        finally:
            conn.close()

    initialise(tmp_path / "new")
    assert vacuumed(DataDir(tmp_path / "new").db_path)  # every write had secure_delete on: the start runs none
    bare = DataDir(tmp_path / "bare")
    bare.root.mkdir()
    conn = db.connect(bare.db_path)  # a database migrated before init completed it: it is not init's to vouch for
    db.migrate(conn)
    conn.close()
    initialise(bare.root)
    assert not vacuumed(bare.db_path)
    node = Node(bare.root)
    node.open(search_index=False)
    node.close()
    assert vacuumed(bare.db_path)  # the first start ran it
