"""What interrupted and repeated restores leave beside a data folder: `bbs doctor` lists it, `bbs
restore-leftovers --remove` removes it (keeping the newest replaced folder unless told `--all`), and nothing is
removed silently. Real `bbs` processes; a restore killed with SIGKILL while it unpacks."""

from __future__ import annotations

import json
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

BBS = [sys.executable, "-m", "node.cli"]


def bbs(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*BBS, *args], capture_output=True, text=True, timeout=300, check=False)


def doctor_leftovers(data: Path) -> dict[str, Any] | None:
    run = bbs("doctor", "--data", str(data), "--json")
    return next((c for c in json.loads(run.stdout) if c["name"] == "restore_leftovers"), None)


def kill_while_unpacking(data: Path, backup: Path) -> None:
    """Start `bbs restore --force` and SIGKILL it once its unpacked copy is being written."""
    proc = subprocess.Popen([*BBS, "restore", "--data", str(data), "--from", str(backup), "--force"])
    deadline = time.monotonic() + 60
    while not any(p.is_dir() and any(p.iterdir()) for p in data.parent.glob(f".{data.name}.restore-*")):
        assert proc.poll() is None, "the restore finished before it could be killed"
        assert time.monotonic() < deadline
        time.sleep(0.001)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)


@pytest.mark.slow
def test_leftovers_of_killed_and_repeated_restores_are_listed_and_removed_on_request(tmp_path: Path) -> None:
    data = tmp_path / "n"
    assert bbs("init", "--data", str(data)).returncode == 0
    with sqlite3.connect(data / "bbs.db") as conn:  # a database large enough to be killed while it unpacks
        conn.execute("CREATE TABLE padding (blob BLOB)")
        conn.executemany("INSERT INTO padding VALUES (randomblob(1048576))", [()] * 96)
    backup = tmp_path / "b.tar"
    assert bbs("backup", "--data", str(data), "--out", str(backup)).returncode == 0
    assert doctor_leftovers(data) is None

    for _ in range(2):  # two restores that finish: two replaced folders (the same second gets its own name)
        assert bbs("restore", "--data", str(data), "--from", str(backup), "--force").returncode == 0
    kill_while_unpacking(data, backup)
    replaced = sorted(tmp_path.glob("n.replaced-*"))
    staging = list(tmp_path.glob(".n.restore-*"))
    assert len(replaced) == 2 and len(staging) == 1

    found = doctor_leftovers(data)
    assert found is not None and found["status"] == "warn", found
    for path in [*replaced, *staging]:
        assert str(path) in found["detail"]
    assert f"bbs restore-leftovers --data {data} --remove" in found["detail"]
    assert bbs("doctor", "--data", str(data)).returncode == 0  # a warning, not a failure
    listed = bbs("restore-leftovers", "--data", str(data), "--json")
    assert {(x["path"], x["kind"], x["keep"]) for x in json.loads(listed.stdout)} == {
        (str(replaced[0]), "replaced", False),
        (str(replaced[1]), "replaced", True),
        (str(staging[0]), "staging", False),
    }
    assert all(p.exists() for p in [*replaced, *staging])  # listing removes nothing, nor does the doctor

    removed = bbs("restore-leftovers", "--data", str(data), "--remove")
    assert removed.returncode == 0, removed.stderr
    assert f"removed replaced {replaced[0]}" in removed.stdout and f"removed staging {staging[0]}" in removed.stdout
    assert sorted(tmp_path.glob("n.replaced-*")) == [replaced[1]] and not list(tmp_path.glob(".n.restore-*"))
    kept = doctor_leftovers(data)
    assert kept is not None and str(replaced[1]) in kept["detail"]
    assert bbs("restore-leftovers", "--data", str(data), "--remove", "--all").returncode == 0
    assert not list(tmp_path.glob("n.replaced-*")) and doctor_leftovers(data) is None
    assert bbs("doctor", "--data", str(data)).returncode == 0


def test_leftovers_are_not_removed_while_the_data_folder_is_missing(tmp_path: Path) -> None:
    """A restore killed between its two renames leaves no data folder: the leftovers may be the only copies."""
    data = tmp_path / "n"
    (tmp_path / "n.replaced-20261203T120000").mkdir()
    (tmp_path / "n.replaced-20261203T120000" / "bbs.db").write_bytes(b"the only copy")
    found = doctor_leftovers(data)
    assert found is not None and "n.replaced-20261203T120000" in found["detail"]
    refused = bbs("restore-leftovers", "--data", str(data), "--remove", "--all")
    assert refused.returncode != 0 and "restore first" in refused.stderr, refused.stderr
    assert (tmp_path / "n.replaced-20261203T120000" / "bbs.db").read_bytes() == b"the only copy"
