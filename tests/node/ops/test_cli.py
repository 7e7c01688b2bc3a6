"""node.ops.cli: `bbs backup`, `restore`, `litestream-config` and `doctor` on real data folders, in-process."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from node.cli import build_parser, main
from node.ops.datadir import DataDir, initialise
from scenarios.pg_cluster import Cluster


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_backup_then_restore(
    data_dir: tuple[Path, str],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    node_store: Callable[[], str | None],
) -> None:
    data, archive = data_dir[0], tmp_path / "node.bak"
    code, out, _ = run(capsys, "backup", "--data", str(data), "--out", str(archive))
    manifest = json.loads(out)
    assert code == 0 and archive.is_file() and manifest["out"] == str(archive)
    assert {"format", "node_id", "epoch", "schema_version", "records", "created_ms"} <= set(manifest)
    target, database = tmp_path / "restored", node_store()
    into = [] if database is None else ["--store", database]
    code, out, err = run(capsys, "restore", "--data", str(target), "--from", str(archive), *into)
    result = json.loads(out)  # stdout holds the result alone; progress goes to stderr (plain lines: no terminal)
    assert "unpacking the backup (bytes): 0/" in err and "moving it into place: 2/2 (100%)" in err
    assert code == 0 and (result["node_id"], result["previous_epoch"]) == (manifest["node_id"], manifest["epoch"])
    assert result["epoch"] != manifest["epoch"]  # a restored store starts a new epoch
    assert DataDir(target).store == (database or DataDir(target).db_path) and DataDir(target).has_store()
    assert (target / "node.key").is_file()
    code, _, err = run(capsys, "restore", "--data", str(target), "--from", str(archive))
    assert code == 1 and err.startswith("bbs: data_exists: ")  # not over a non-empty folder without --force,
    assert len(err.splitlines()) == 1  # refused before the backup is unpacked
    code, out, _ = run(capsys, "restore", "--data", str(target), "--from", str(archive), "--force")
    assert code == 0 and json.loads(out)["replaced"]


def test_backup_and_restore_refuse_bad_paths(
    data_dir: tuple[Path, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = str(data_dir[0])
    code, out, err = run(capsys, "backup", "--data", data, "--out", str(tmp_path))
    assert (code, out) == (1, "") and "is a folder; give a file name" in err
    code, _, err = run(capsys, "backup", "--data", str(tmp_path / "nothing"), "--out", str(tmp_path / "x.bak"))
    assert code == 1 and not (tmp_path / "x.bak").exists()
    not_tar = tmp_path / "notes.txt"
    not_tar.write_text("hello")
    code, _, err = run(capsys, "restore", "--data", str(tmp_path / "r"), "--from", str(not_tar))
    assert code == 1 and "backup_corrupt" in err and not (tmp_path / "r").exists()
    a_file = tmp_path / "file"
    a_file.write_text("")
    code, _, err = run(capsys, "restore", "--data", str(a_file), "--from", str(not_tar))
    assert code == 1 and "is a file, not a data folder" in err
    code, _, err = run(capsys, "restore", "--data", str(tmp_path / "r"), "--litestream-config", str(tmp_path / "no"))
    assert code == 1 and "config_not_found" in err


@pytest.mark.sqlite_only(reason="Litestream replicates SQLite files only; a node on PostgreSQL is refused (below)")
def test_litestream_config(data_dir: tuple[Path, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = data_dir[0]
    code, out, _ = run(capsys, "litestream-config", "--data", str(data), "--replica", str(tmp_path / "replica"))
    config = yaml.safe_load(out)
    [db] = config["dbs"]
    assert code == 0 and db["path"] == str(DataDir(data).db_path.resolve())
    assert db["replica"] == {"type": "file", "path": str((tmp_path / "replica").resolve()), "sync-interval": "1s"}
    out_file = tmp_path / "litestream.yml"
    argv = ["litestream-config", "--data", str(data), "--replica", "s3://bucket/node", "--sync-interval", "10s"]
    code, out, _ = run(capsys, *argv, "--out", str(out_file))
    assert (code, out) == (0, "")
    assert yaml.safe_load(out_file.read_text())["dbs"][0]["replica"] == {"url": "s3://bucket/node",
                                                                         "sync-interval": "10s"}  # fmt: skip
    code, _, err = run(capsys, *argv, "--out", str(tmp_path))
    assert code == 1 and "is a folder" in err


def test_litestream_config_refuses_a_node_on_postgresql(
    pg_cluster: Cluster, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    name = pg_cluster.create_database()
    try:
        initialise(tmp_path / "node", pg_cluster.store_url(name))
        code, out, err = run(capsys, "litestream-config", "--data", str(tmp_path / "node"), "--replica", "s3://b/n")
        assert (code, out) == (1, "") and "litestream_sqlite_only" in err and "archive the server's WAL" in err
    finally:
        pg_cluster.drop_database(name)


def test_doctor(data_dir: tuple[Path, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = str(data_dir[0])
    code, out, _ = run(capsys, "doctor", "--data", data, "--json", "--scratch", str(tmp_path))
    checks = json.loads(out)
    assert code == 0 and checks and all(c["status"] in ("ok", "warn") for c in checks)
    assert {"name", "status", "detail"} == set(checks[0])
    code, out, _ = run(capsys, "doctor", "--data", data)
    assert code == 0 and all(line[:4].strip() in ("ok", "warn") for line in out.splitlines())
    os.chmod(data_dir[0] / "node.key", 0o644)  # a key others can read fails the check
    code, out, _ = run(capsys, "doctor", "--data", data)
    assert code == 1 and any(line.startswith("fail  node_key: ") and "chmod 600" in line for line in out.splitlines())
    code, out, _ = run(capsys, "doctor", "--data", str(tmp_path / "missing"))
    assert code == 1 and out.startswith("fail")


def test_the_operator_commands_are_registered() -> None:
    parser = build_parser()
    args = parser.parse_args(["doctor"])
    assert (args.json, args.peer_timeout, args.scratch) == (False, 5.0, None)
    assert args.data == Path(os.environ.get("BBS_DATA", "bbs-data"))
    with pytest.raises(SystemExit):
        parser.parse_args(["restore", "--data", "x"])  # --from or --litestream-config is required
    with pytest.raises(SystemExit):
        parser.parse_args(["restore", "--from", "a", "--litestream-config", "b"])  # not both
