"""Backup while serving, restore with a new epoch, refusal of damaged backups, and the Litestream drill."""

from __future__ import annotations

import asyncio
import io
import shutil
import stat
import subprocess
import sys
import tarfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import msgspec
import pytest
from aiohttp.test_utils import TestClient

from node.agents import recovery_file
from node.errors import Conflict, InvalidInput, NotFound
from node.features import LOG
from node.ops import backup, doctor, store
from node.ops.datadir import DataDir, initialise
from node.store import db
from scenarios.pg_cluster import Cluster
from tests.conftest import AgentCreds

REPO = Path(__file__).parents[3]
MakeAgent = Callable[[str], Awaitable[AgentCreds]]


def _store(where: Path) -> Path | str:
    """What to open: a data folder's database (either engine), or a database file itself."""
    return where if where.suffix == ".db" else DataDir(where).store


def log_of(where: Path) -> list[tuple[int, str]]:
    conn = db.connect_store(_store(where))
    try:
        return [(int(r[0]), str(r[1])) for r in conn.execute("SELECT seq, hash FROM records ORDER BY seq")]
    finally:
        conn.close()


def meta(where: Path, key: str) -> str:
    conn = db.connect_store(_store(where))
    try:
        return str(conn.execute("SELECT value FROM node_meta WHERE key = ?", (key,)).fetchone()[0])
    finally:
        conn.close()


async def post(client: TestClient, agent: AgentCreds, n: int, prefix: str = "entry") -> None:
    for i in range(n):
        resp = await client.post(
            "/v1/entries",
            json={"entry_type": "finding", "performative": "inform", "content": f"{prefix} {i}", "tags": ["t"]},
            headers=agent.headers,
        )
        assert resp.status == 201, await resp.text()


async def test_backup_while_serving_is_a_consistent_prefix_and_restores(
    client: TestClient,
    make_agent: MakeAgent,
    data_dir: tuple[Path, str],
    tmp_path: Path,
    node_store: Callable[[], str | None],
) -> None:
    root = data_dir[0]
    alice = await make_agent("alice")
    await post(client, alice, 20)
    out = tmp_path / "backups" / "node.bbsbackup"
    writer = asyncio.create_task(post(client, alice, 150, "during"))
    await asyncio.sleep(0)
    manifest = await asyncio.to_thread(backup.backup, root, out)
    await writer
    assert stat.S_IMODE(out.stat().st_mode) == 0o600
    live = log_of(root)
    assert 21 <= manifest.records <= len(live)

    restored = tmp_path / "restored"
    result = backup.restore(out, restored, store_url=node_store())
    got = log_of(restored)
    assert got == live[: len(got)] and len(got) == manifest.records  # one instant of the live log
    assert result.previous_epoch == manifest.epoch == meta(root, "epoch")
    assert result.epoch == meta(restored, "epoch") != manifest.epoch
    assert (restored / "node.key").read_bytes() == (root / "node.key").read_bytes()
    assert stat.S_IMODE((restored / "node.key").stat().st_mode) == 0o600
    assert stat.S_IMODE(restored.stat().st_mode) == 0o700
    checks = doctor.diagnose(restored, LOG, peer_timeout=1)
    assert doctor.exit_status(checks) == 0, checks


def test_restore_refuses_a_non_empty_folder_unless_forced(
    data_dir: tuple[Path, str], tmp_path: Path, node_store: Callable[[], str | None]
) -> None:
    root = data_dir[0]
    out = tmp_path / "b.tar"
    first = backup.backup(root, out)
    with pytest.raises(Conflict) as info:
        backup.restore(out, root)
    assert info.value.code == "data_exists"
    assert meta(root, "epoch") == first.epoch  # untouched
    result = backup.restore(out, root, force=True)
    assert result.replaced is not None and DataDir(Path(result.replaced)).has_store()
    assert meta(root, "epoch") == result.epoch != first.epoch
    (tmp_path / "empty").mkdir()
    assert backup.restore(out, tmp_path / "empty", store_url=node_store()).node_id == first.node_id


def test_a_restore_keeps_the_folders_agent_recovery_key(
    data_dir: tuple[Path, str], tmp_path: Path, node_store: Callable[[], str | None]
) -> None:
    """The agent recovery key is not in a backup (its copy is the operator's, offline); a restore into the folder
    keeps the one there, so the agents whose histories name it can still be revoked and recovered."""
    root = data_dir[0]
    out = tmp_path / "b.tar"
    backup.backup(root, out)
    kept = recovery_file.load_or_create(root / recovery_file.FILE_NAME)
    backup.restore(out, root, force=True)
    again = recovery_file.load(root / recovery_file.FILE_NAME)
    assert again is not None and again.seed == kept.seed
    assert stat.S_IMODE((root / recovery_file.FILE_NAME).stat().st_mode) == 0o600
    (tmp_path / "fresh").mkdir()
    backup.restore(out, tmp_path / "fresh", store_url=node_store())
    assert recovery_file.load(tmp_path / "fresh" / recovery_file.FILE_NAME) is None  # from the offline copy


def test_restore_leftovers_beside_a_folder_of_either_engine_are_removed(
    data_dir: tuple[Path, str], tmp_path: Path
) -> None:
    """A folder whose node is on PostgreSQL holds no bbs.db: its store.url is its database, so what restores left
    beside it is removed as beside a SQLite folder."""
    root = data_dir[0]
    out = tmp_path / "b.tar"
    backup.backup(root, out)
    for _ in range(2):
        backup.restore(out, root, force=True)
    assert [left.kind for left in backup.leftovers(root)] == ["replaced", "replaced"]
    removed = backup.remove_leftovers(root)
    assert len(removed) == 1 and [left.keep for left in backup.leftovers(root)] == [True]


def _rewrite(archive: Path, dest: Path, change: Callable[[str, bytes], bytes | None], extra: str | None = None) -> None:
    with tarfile.open(archive) as src, tarfile.open(dest, "w") as out:
        for member in src.getmembers():
            data = src.extractfile(member).read()  # type: ignore[union-attr]
            new = change(member.name, data)
            if new is None:
                continue
            info = tarfile.TarInfo(member.name)
            info.size = len(new)
            out.addfile(info, io.BytesIO(new))
        if extra:
            info = tarfile.TarInfo(extra)
            info.size = 1
            out.addfile(info, io.BytesIO(b"x"))


def _flip_db_byte(name: str, data: bytes) -> bytes:
    if name not in ("bbs.db", "bbs.pgdump"):
        return data
    at = len(data) // 2
    return data[:at] + bytes([data[at] ^ 0xFF]) + data[at + 1 :]


@pytest.mark.parametrize(
    ("change", "extra"),
    [
        (_flip_db_byte, None),  # checksum mismatch
        (lambda name, data: None if name == "node.key" else data, None),  # member missing
        (lambda name, data: data, "../escape"),  # a path outside the folder
        (lambda name, data: b"{" if name == "manifest.json" else data, None),  # manifest unreadable
    ],
)
def test_damaged_backups_are_refused_and_change_nothing(
    data_dir: tuple[Path, str],
    tmp_path: Path,
    node_store: Callable[[], str | None],
    change: Callable[[str, bytes], bytes | None],
    extra: str | None,
) -> None:
    good = tmp_path / "good.tar"
    backup.backup(data_dir[0], good)
    bad = tmp_path / "bad.tar"
    _rewrite(good, bad, change, extra)
    target, database = tmp_path / "target", node_store()
    with pytest.raises(InvalidInput) as info:
        backup.restore(bad, target, store_url=database)
    assert info.value.code == "backup_corrupt"
    assert not target.exists()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # no staging left behind
    assert _holds_no_node(database)


def _holds_no_node(database: str | None) -> bool:
    """Whether the PostgreSQL database a refused restore named still holds no node (True for SQLite's None)."""
    if database is None:
        return True
    conn = db.connect_store(database)
    try:
        return store.stored_node_id(conn) is None
    finally:
        conn.close()


def test_a_truncated_database_with_matching_checksums_is_refused_and_changes_nothing(
    data_dir: tuple[Path, str], tmp_path: Path, node_store: Callable[[], str | None]
) -> None:
    """The checksums only tie the files to the manifest: a database cut short before the backup was written is
    refused by the engine's own check (SQLite's integrity_check; on PostgreSQL pg_restore, before the database
    named is touched), and the database named holds no node after."""
    good = tmp_path / "good.tar"
    backup.backup(data_dir[0], good)
    staged = tmp_path / "stage"
    staged.mkdir()
    with tarfile.open(good) as tar:
        tar.extractall(staged, filter="data")
    manifest = msgspec.json.decode((staged / "manifest.json").read_bytes(), type=backup.Manifest)
    whole = (staged / manifest.db_member).read_bytes()
    (staged / manifest.db_member).write_bytes(whole[: len(whole) // 2])
    manifest.sha256[manifest.db_member] = backup._sha256(staged / manifest.db_member)
    (staged / "manifest.json").write_bytes(msgspec.json.encode(manifest))
    cut = tmp_path / "cut.tar"
    with tarfile.open(cut, "w") as tar:
        for name in ("manifest.json", "node.key", manifest.db_member):
            tar.add(staged / name, arcname=name)
    database = node_store()
    with pytest.raises(InvalidInput) as info:
        backup.restore(cut, tmp_path / "target", store_url=database)
    assert info.value.code == "backup_corrupt"
    assert not (tmp_path / "target").exists()
    assert _holds_no_node(database)


def test_not_a_tar_missing_file_and_wrong_key(
    data_dir: tuple[Path, str], tmp_path: Path, node_store: Callable[[], str | None]
) -> None:
    junk = tmp_path / "junk"
    junk.write_bytes(b"not a tar at all" * 100)
    with pytest.raises(InvalidInput):
        backup.restore(junk, tmp_path / "t1")
    with pytest.raises(NotFound):
        backup.restore(tmp_path / "missing.tar", tmp_path / "t2")
    with pytest.raises(NotFound):
        backup.backup(tmp_path / "nowhere", tmp_path / "x.tar")
    other = tmp_path / "other"
    initialise(other, node_store())
    good = tmp_path / "good.tar"
    backup.backup(data_dir[0], good)
    key = (other / "node.key").read_bytes()
    # a consistent archive (fresh checksums) whose key belongs to another node
    staged = tmp_path / "stage"
    staged.mkdir()
    with tarfile.open(good) as tar:
        tar.extractall(staged, filter="data")
    (staged / "node.key").write_bytes(key)
    mixed = tmp_path / "mixed.tar"
    manifest = msgspec.json.decode((staged / "manifest.json").read_bytes(), type=backup.Manifest)
    manifest.sha256 = {name: backup._sha256(staged / name) for name in ("node.key", manifest.db_member)}
    (staged / "manifest.json").write_bytes(msgspec.json.encode(manifest))
    with tarfile.open(mixed, "w") as tar:
        for name in ("manifest.json", "node.key", manifest.db_member):
            tar.add(staged / name, arcname=name)
    target = node_store()
    with pytest.raises(InvalidInput) as info:
        backup.restore(mixed, tmp_path / "t3", store_url=target)
    assert info.value.code == "key_mismatch"
    assert not (tmp_path / "t3").exists()
    if target is not None:  # the database named was not touched: it holds no node still
        assert DataDir(tmp_path / "other").store_url != target
    assert _holds_no_node(target)


def test_cli_backup_and_restore_exit_codes(
    data_dir: tuple[Path, str], tmp_path: Path, node_store: Callable[[], str | None]
) -> None:
    bbs = [sys.executable, "-m", "node.cli"]
    out = tmp_path / "cli.tar"
    run = subprocess.run(
        [*bbs, "backup", "--data", str(data_dir[0]), "--out", str(out)],
        capture_output=True,
        text=True,
        cwd=Path(__file__).parents[3],
    )
    assert run.returncode == 0 and '"records":' in run.stdout, run.stderr
    run = subprocess.run(
        [*bbs, "restore", "--data", str(data_dir[0]), "--from", str(out)],
        capture_output=True,
        text=True,
        cwd=Path(__file__).parents[3],
    )
    assert run.returncode == 1 and "data_exists" in run.stderr
    database = node_store()
    run = subprocess.run(
        [*bbs, "restore", "--data", str(tmp_path / "n"), "--from", str(out)]
        + ([] if database is None else ["--store", database]),
        capture_output=True,
        text=True,
        cwd=Path(__file__).parents[3],
    )
    assert run.returncode == 0 and '"previous_epoch"' in run.stdout


@pytest.mark.sqlite_only(reason="Litestream replicates SQLite files only; a node on PostgreSQL is refused")
async def test_litestream_drill_replicate_destroy_restore(
    client: TestClient, make_agent: MakeAgent, data_dir: tuple[Path, str], tmp_path: Path
) -> None:
    """Write, replicate to a local file replica, destroy the data folder, restore: the log is back, new epoch."""
    root = data_dir[0]
    config = tmp_path / "litestream.yml"
    config.write_text(backup.litestream_config(root, str(tmp_path / "replica"), sync_interval="100ms"))
    key_copy = tmp_path / "node.key.copy"
    key_copy.write_bytes((root / "node.key").read_bytes())
    proc = subprocess.Popen(
        [backup.litestream_binary(), "replicate", "-config", str(config)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        alice = await make_agent("alice")
        await post(client, alice, 30)
        live = log_of(root)
        epoch = meta(root, "epoch")
        deadline = time.monotonic() + 30
        restored: list[tuple[int, str]] = []
        probe = tmp_path / "probe.db"
        while time.monotonic() < deadline:  # wait until the replica holds every record
            probe.unlink(missing_ok=True)
            r = subprocess.run(
                [backup.litestream_binary(), "restore", "-config", str(config), "-o", str(probe), str(root / "bbs.db")],
                capture_output=True,
            )
            if r.returncode == 0:
                restored = log_of(probe)
                if restored == live:
                    break
            await asyncio.sleep(0.3)
        assert restored == live
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    await client.close()
    shutil.rmtree(root)
    result = backup.restore_litestream(config, root, key_copy)
    assert log_of(root) == live
    assert result.previous_epoch == epoch and meta(root, "epoch") == result.epoch != epoch
    assert doctor.exit_status(doctor.diagnose(root, LOG, peer_timeout=1)) == 0


def test_a_postgresql_restore_names_its_database_and_replaces_a_node_only_when_forced(
    pg_cluster: Cluster, tmp_path: Path
) -> None:
    """A backup of a node on PostgreSQL goes into the database --store names (or the folder's own); a database
    holding a node is refused unless forced, and a SQLite backup takes no --store."""
    one, two = pg_cluster.create_database(), pg_cluster.create_database()
    try:
        first, second = pg_cluster.store_url(one), pg_cluster.store_url(two)
        initialise(tmp_path / "a", first)
        initialise(tmp_path / "b", second)
        archive = tmp_path / "a.tar"
        manifest = backup.backup(tmp_path / "a", archive)
        assert manifest.engine == "postgresql" and manifest.sha256.keys() == {"node.key", "bbs.pgdump"}
        with pytest.raises(InvalidInput) as info:
            backup.restore(archive, tmp_path / "fresh")
        assert (info.value.code, info.value.field) == ("store_required", "store")
        with pytest.raises(Conflict) as conflict:
            backup.restore(archive, tmp_path / "fresh", store_url=second)
        assert conflict.value.code == "store_exists" and "back it up first" in conflict.value.detail
        assert meta(tmp_path / "b", "node_id") != manifest.node_id and not (tmp_path / "fresh").exists()
        result = backup.restore(archive, tmp_path / "fresh", store_url=second, force=True)
        assert DataDir(tmp_path / "fresh").store_url == second
        assert meta(tmp_path / "fresh", "node_id") == manifest.node_id == result.node_id
        assert meta(tmp_path / "fresh", "epoch") == result.epoch != manifest.epoch
        assert log_of(tmp_path / "fresh") == log_of(tmp_path / "a")
        sqlite_node = tmp_path / "s"
        initialise(sqlite_node)
        backup.backup(sqlite_node, tmp_path / "s.tar")
        with pytest.raises(InvalidInput) as info:
            backup.restore(tmp_path / "s.tar", tmp_path / "s2", store_url=first)
        assert info.value.code == "store_mismatch" and not (tmp_path / "s2").exists()
    finally:
        pg_cluster.drop_database(one)
        pg_cluster.drop_database(two)
