"""The `bbs` command fails with one `bbs: ...` line and exit status 1, never a traceback, and leaves nothing behind.

Each case runs the real CLI (`python -m node.cli`) as a subprocess on a real data folder: a --data that is a
file or no node, a node.key that is garbage or another node's, a damaged database, a folder or an unwritable
path as an output file, ports and hosts `bbs serve` cannot listen on, and bad node URLs and scripts.
"""

from __future__ import annotations

import hashlib
import shutil
import socket
import sqlite3
import stat
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from agent import identity_file
from identity import keys
from node.cli import explain
from node.features import LOG
from node.ops import doctor
from node.ops.datadir import DataDir, initialise
from node.store.conn import ConnectionLost
from scenarios.fednet import free_port
from tests.node.test_cli import bbs

pytestmark = pytest.mark.slow
DID = "did:key:z6MkhaXgBZDvotDkL5257faiztiGiC2QtKLGpbnnEGta2doK"


def one_line_error(result: subprocess.CompletedProcess[str], *needles: str, code: int = 1) -> str:
    """Assert the command failed with exactly one `bbs: ` line on stderr containing every needle."""
    assert result.returncode == code, (result.returncode, result.stdout, result.stderr)
    assert "Traceback" not in result.stderr, result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("bbs: "), result.stderr
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    return lines[0]


def leftovers(root: Path) -> list[Path]:
    """Temporary files a failed write could leave behind (of a key file, an identity file, a backup)."""
    return [p for p in root.rglob("*") if p.name.endswith(".tmp") or p.name.startswith(".bbs-backup-")]


def digest_of(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture
def node_dir(tmp_path: Path) -> Path:
    data = tmp_path / "node"
    initialise(data)
    created = bbs("agent", "create", "alice", "--data", str(data))
    assert created.returncode == 0, created.stderr
    return data


@pytest.fixture
def listening() -> Iterator[int]:
    """A port another process is listening on."""
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield int(sock.getsockname()[1])


# ---- --data is a file, or holds no node -------------------------------------------------------------------


def test_data_that_is_a_file_is_refused_by_every_command(tmp_path: Path, node_dir: Path) -> None:
    afile = tmp_path / "afile"
    afile.write_text("not a folder")
    identity = tmp_path / "alice.id"
    assert bbs("agent", "export", "alice", "--data", str(node_dir), "--out", str(identity)).returncode == 0
    for command in (
        ["init"],
        ["serve", "--port", "0"],
        ["agent", "create", "x"],
        ["agent", "import", str(identity)],
        ["peer", "add", "http://127.0.0.1:9", "--key", DID],
        ["restore", "--from", str(tmp_path / "none.tar")],
        ["rebuild"],
        ["peers"],
        ["digest"],
        ["backup", "--out", str(tmp_path / "b.tar")],
        ["litestream-config", "--replica", str(tmp_path / "r")],
        ["processes"],
        ["restore", "--by-hand"],
    ):
        one_line_error(bbs(*command, "--data", str(afile)), f"{afile} is a file, not a data folder")
    one_line_error(bbs("agent", "init", str(afile)), f"{afile} is a file")
    below = afile / "sub"  # a folder whose parent is a file
    for command in (["init"], ["serve", "--port", "0"], ["agent", "create", "x"], ["digest"]):
        one_line_error(bbs(*command, "--data", str(below)))
    assert afile.read_text() == "not a folder"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["afile", "alice.id", "node"]


def test_a_bare_database_is_no_node_until_init_completes_it(tmp_path: Path) -> None:
    """What `bbs rebuild` used to leave in an empty folder: a database with no node in it and no key."""
    data = tmp_path / "bare"
    data.mkdir()
    sqlite3.connect(data / "bbs.db").close()
    for command in (["rebuild"], ["digest"], ["peers"], ["agent", "create", "x"]):
        one_line_error(bbs(*command, "--data", str(data)), "holds no node", "bbs init")
    assert not (data / "node.key").exists()
    init = bbs("init", "--data", str(data))
    assert init.returncode == 0 and init.stdout.count("Admin token") == 1
    digest = bbs("digest", "--data", str(data))
    assert digest.returncode == 0, digest.stderr


def test_digest_reads_a_database_without_its_key(tmp_path: Path, node_dir: Path) -> None:
    """A replica restored next to no node.key (the restore drill's probe) has a digest; only the key is missing."""
    replica = tmp_path / "replica"
    replica.mkdir()
    shutil.copyfile(node_dir / "bbs.db", replica / "bbs.db")
    here, there = bbs("digest", "--data", str(node_dir)), bbs("digest", "--data", str(replica))
    assert here.returncode == there.returncode == 0, there.stderr
    assert here.stdout == there.stdout
    assert not (replica / "node.key").exists()


# ---- node.key and bbs.db ----------------------------------------------------------------------------------


def test_another_nodes_key_is_refused_by_serve_and_every_command_that_opens_the_node(
    tmp_path: Path, node_dir: Path
) -> None:
    other = tmp_path / "other"
    initialise(other)
    shutil.copyfile(other / "node.key", node_dir / "node.key")
    before = digest_of(node_dir / "bbs.db")
    for command in (
        ["serve", "--port", str(free_port())],
        ["init"],
        ["agent", "create", "bob"],
        ["agent", "rotate-key", "alice"],
        ["agent", "export", "alice", "--out", str(tmp_path / "a.id")],
        ["peer", "add", "http://127.0.0.1:9", "--key", DID],
        ["peers"],
        ["rebuild"],
        ["backup", "--out", str(tmp_path / "b.tar")],
    ):
        line = one_line_error(bbs(*command, "--data", str(node_dir)), "key_mismatch", "node.key")
        assert "serving" not in line
    assert digest_of(node_dir / "bbs.db") == before
    assert not (tmp_path / "a.id").exists() and not (tmp_path / "b.tar").exists()
    assert "identity" in {c.name for c in doctor.diagnose(node_dir, LOG) if c.status == "fail"}  # doctor agrees


def test_a_garbage_node_key_is_one_line_and_never_quoted(tmp_path: Path, node_dir: Path) -> None:
    secretish = "ed25519:c2VjcmV0LXNlZWQtbWF0ZXJpYWw"
    (node_dir / "node.key").write_text(secretish + "\n")
    for command in (["serve", "--port", str(free_port())], ["init"], ["agent", "create", "bob"], ["rebuild"]):
        line = one_line_error(bbs(*command, "--data", str(node_dir)), "node.key", "not a node key file")
        assert "c2VjcmV0" not in line
    (node_dir / "node.key").write_bytes(b"\xff\xfe\x00garbage")
    one_line_error(bbs("serve", "--port", str(free_port()), "--data", str(node_dir)), "not a node key file")


def test_a_missing_node_key_is_named_not_regenerated(node_dir: Path) -> None:
    (node_dir / "node.key").unlink()
    for command in (["init"], ["serve", "--port", str(free_port())], ["agent", "create", "bob"]):
        one_line_error(bbs(*command, "--data", str(node_dir)), "node.key is missing")
    assert not (node_dir / "node.key").exists()


def test_a_truncated_database_is_one_line(node_dir: Path) -> None:
    path = node_dir / "bbs.db"
    size = path.stat().st_size
    with path.open("r+b") as fh:
        fh.truncate(size // 2)
    for command in (["serve", "--port", str(free_port())], ["agent", "create", "bob"], ["digest"], ["rebuild"]):
        one_line_error(bbs(*command, "--data", str(node_dir)), "bbs.db", "malformed")
    path.write_bytes(b"this is not a database at all" * 100)
    one_line_error(bbs("agent", "create", "bob", "--data", str(node_dir)), "bbs.db", "not a readable node database")


# ---- output files: never a folder, never a temporary file left behind --------------------------------------


def test_agent_export_refuses_a_folder_and_unwritable_paths_and_leaves_no_key_behind(
    tmp_path: Path, node_dir: Path
) -> None:
    keydir = tmp_path / "keydir"
    keydir.mkdir()
    one_line_error(
        bbs("agent", "export", "alice", "--data", str(node_dir), "--out", str(keydir)), f"--out {keydir} is a folder"
    )
    assert list(keydir.iterdir()) == []
    one_line_error(bbs("agent", "export", "alice", "--data", str(node_dir), "--out", ""), "is a folder")
    one_line_error(
        bbs("agent", "export", "alice", "--data", str(node_dir), "--out", "/proc/x.key"), "cannot write /proc/x.key"
    )
    assert leftovers(tmp_path) == []
    assert not Path("/proc/x.key").exists()
    out = tmp_path / "new" / "alice.id"  # a missing parent folder is created, as before
    assert bbs("agent", "export", "alice", "--data", str(node_dir), "--out", str(out)).returncode == 0
    assert stat.S_IMODE(out.stat().st_mode) == 0o600 and leftovers(tmp_path) == []


def test_a_failed_identity_file_write_removes_its_temporary_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ident = identity_file.Identity(key=keys.SigningKey.generate(), display_name="Alice")
    target = tmp_path / "alice.id"

    def refuse(src: object, dst: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr("node.ops.datadir.os.replace", refuse)
    with pytest.raises(identity_file.IdentityFileError, match=r"cannot write .*No space left"):
        identity_file.save(target, ident)
    assert list(tmp_path.iterdir()) == []

    def interrupt(src: object, dst: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr("node.ops.datadir.os.replace", interrupt)
    with pytest.raises(KeyboardInterrupt):
        identity_file.save(target, ident)
    assert list(tmp_path.iterdir()) == []


def test_backup_refuses_a_folder_as_its_output(tmp_path: Path, node_dir: Path) -> None:
    keydir = tmp_path / "keydir"
    keydir.mkdir()
    one_line_error(bbs("backup", "--data", str(node_dir), "--out", str(keydir)), f"--out {keydir} is a folder")
    assert list(keydir.iterdir()) == [] and leftovers(tmp_path) == []
    one_line_error(
        bbs("litestream-config", "--data", str(node_dir), "--replica", "r", "--out", str(keydir)), "is a folder"
    )


def test_restore_of_a_file_that_is_no_backup_is_one_line(tmp_path: Path) -> None:
    garbage = tmp_path / "garbage.key"
    garbage.write_bytes(b"ed25519:not-a-backup\n" * 10)
    target = tmp_path / "restored"
    one_line_error(
        bbs("restore", "--data", str(target), "--from", str(garbage)), "backup_corrupt", "is not a bbs backup"
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["garbage.key"]


# ---- bbs serve: refused before it says it serves ----------------------------------------------------------


def test_serve_refuses_addresses_it_cannot_listen_on_before_announcing(tmp_path: Path, listening: int) -> None:
    data = tmp_path / "fresh"
    free = free_port()
    cases = [
        (["--port", str(listening)], ["--port", "in use"], 1),
        (["--port", str(free), "--mcp-port", str(listening)], ["--mcp-port", "in use"], 1),
        (["--port", str(free), "--mcp-port", str(free)], ["config:", "--mcp-port and --port"], 2),  # a usage error
        (["--port", str(free), "--metrics-port", str(listening)], ["--metrics-port", "in use"], 1),
        (["--port", str(free), "--host", "999.1.1.1"], ["cannot listen on 999.1.1.1"], 1),
    ]
    for flags, needles, code in cases:
        result = bbs("serve", "--data", str(data), *flags)
        one_line_error(result, *needles, code=code)
        assert "serving" not in result.stdout and "Admin token" not in result.stdout
    assert not data.exists()  # refused before the folder was created: no token was printed and lost


# ---- node URLs and agent runtime inputs -------------------------------------------------------------------


def test_bbs_mcp_refuses_a_node_url_it_cannot_call(tmp_path: Path) -> None:
    env = {"BBS_API_KEY": "bbs_x_y"}
    for url, needle in (
        ("notaurl", "http://HOST:PORT"),
        ("ftp://example.org", "http://HOST:PORT"),
        ("http://127.0.0.1:0", "port must be 1 to 65535"),
        ("http://127.0.0.1:8420/?q=1", "query"),
        ("http://[::1", "cannot be parsed"),
    ):
        one_line_error(bbs("mcp", "--node", url, env=env), "--node", "is not a node URL", needle)
    line = one_line_error(bbs("mcp", "--node", "http://me:hunter2@127.0.0.1:8420", env=env), "user name or password")
    assert "hunter2" not in line


@pytest.fixture
def agent_dir(tmp_path: Path) -> Path:
    folder = tmp_path / "agent"
    assert bbs("agent", "init", str(folder)).returncode == 0
    config = folder / "agent-config.yaml"
    text = config.read_text()
    assert "engine: openai" in text
    config.write_text(text.replace("engine: openai", "engine: scripted", 1))
    return folder


def test_agent_run_refuses_a_missing_or_malformed_script_and_a_bad_node_url(tmp_path: Path, agent_dir: Path) -> None:
    env = {"BBS_API_KEY": "bbs_x_y"}
    run = ["agent", "run", "--config", str(agent_dir / "agent-config.yaml"), "--soul", str(agent_dir / "soul.md")]
    one_line_error(bbs(*run, "--script", str(tmp_path / "missing.json"), env=env), "missing.json", code=2)
    (tmp_path / "bad.json").write_text("not json")
    one_line_error(bbs(*run, "--script", str(tmp_path / "bad.json"), env=env), "is not JSON", code=2)
    (tmp_path / "bin.json").write_bytes(b"\xff\xfe\x00")
    one_line_error(bbs(*run, "--script", str(tmp_path / "bin.json"), env=env), "is not JSON", code=2)
    config = agent_dir / "agent-config.yaml"
    config.write_text(config.read_text().replace("url: http://127.0.0.1:8420", "url: notaurl", 1))
    one_line_error(bbs(*run, env=env), "node.url 'notaurl'", "is not a node URL")


# ---- the dispatcher's mapping -----------------------------------------------------------------------------


def test_explain_maps_library_errors_to_one_line_with_the_path(tmp_path: Path) -> None:
    import argparse

    args = argparse.Namespace(data=tmp_path / "d")
    message, code = explain(IsADirectoryError(21, "Is a directory", "keydir"), args) or ("", 0)
    assert (message, code) == ("Is a directory (keydir)", 1)
    message, code = explain(FileNotFoundError(2, "No such file or directory", "a", None, "b"), args) or ("", 0)
    assert message == "No such file or directory (a -> b)"
    message, code = explain(sqlite3.DatabaseError("database disk image is malformed"), args) or ("", 0)
    assert "database disk image is malformed" in message and str(DataDir(args.data).db_path) in message
    on_postgresql = DataDir(tmp_path / "pg")
    on_postgresql.root.mkdir()
    on_postgresql.store_url_path.write_text("postgresql://bbs:a-password@localhost/bbs")
    lost = ConnectionLost("server closed the connection unexpectedly\n\tThis probably means the server terminated")
    message, code = explain(lost, argparse.Namespace(data=on_postgresql.root)) or ("", 0)
    assert str(on_postgresql.store_url_path) in message and "bbs.db" not in message and "a-password" not in message
    message, code = explain(keys.KeyError_("invalid base64url: secret"), args) or ("", 0)
    assert "secret" not in message and code == 1
    assert explain(ZeroDivisionError(), args) is None  # a bug stays a traceback
