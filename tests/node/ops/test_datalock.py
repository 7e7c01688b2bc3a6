"""node.ops.datalock: one `bbs serve` per data folder, and one initialisation at a time."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from node.errors import Conflict
from node.ops import datalock

ROOT = Path(__file__).resolve().parents[3]


def test_the_lock_is_held_until_its_file_is_closed(tmp_path: Path) -> None:
    assert not datalock.in_use(tmp_path)  # no lock file yet
    handle = datalock.hold(tmp_path)
    try:
        assert datalock.in_use(tmp_path)
        assert (tmp_path / datalock.LOCK_NAME).read_text() == f"{os.getpid()}\n"
        with pytest.raises(Conflict) as info:
            datalock.hold(tmp_path)
        assert info.value.code == "data_in_use" and info.value.status == 409 and str(tmp_path) in info.value.detail
    finally:
        handle.close()
    assert not datalock.in_use(tmp_path)
    datalock.hold(tmp_path).close()  # free again


def test_a_killed_holder_leaves_no_stale_lock(tmp_path: Path) -> None:
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, time; from pathlib import Path; from node.ops import datalock;"
         " h = datalock.hold(Path(sys.argv[1])); print('held', flush=True); time.sleep(60)", str(tmp_path)],
        cwd=ROOT, stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)},
    )  # fmt: skip
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        assert datalock.in_use(tmp_path)
        assert (tmp_path / datalock.LOCK_NAME).read_text() == f"{holder.pid}\n"
        with pytest.raises(Conflict):
            datalock.hold(tmp_path)
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    assert not datalock.in_use(tmp_path)
    handle = datalock.hold(tmp_path)
    assert (tmp_path / datalock.LOCK_NAME).read_text() == f"{os.getpid()}\n"  # the old pid is overwritten
    handle.close()


def test_initialising_is_one_at_a_time(tmp_path: Path) -> None:
    order: list[str] = []
    first_in = threading.Event()

    def second() -> None:
        first_in.wait()
        with datalock.initialising(tmp_path):
            order.append("second")

    thread = threading.Thread(target=second)
    thread.start()
    with datalock.initialising(tmp_path):
        first_in.set()
        time.sleep(0.2)  # the second thread is waiting for the lock meanwhile
        order.append("first")
    thread.join(10)
    assert order == ["first", "second"]
    assert (tmp_path / datalock.INIT_LOCK_NAME).exists()  # the lock file stays


def test_initialised_waits_for_an_initialisation_in_progress(tmp_path: Path) -> None:
    done: list[str] = []
    started = threading.Event()

    def reader() -> None:
        started.wait()
        with datalock.initialised(tmp_path):
            done.append("read")

    thread = threading.Thread(target=reader)
    thread.start()
    with datalock.initialising(tmp_path):
        started.set()
        time.sleep(0.2)
        done.append("initialised")
    thread.join(10)
    assert done == ["initialised", "read"]


def test_initialised_creates_nothing(tmp_path: Path) -> None:
    with datalock.initialised(tmp_path):
        pass
    with datalock.initialised(tmp_path / "missing"):
        pass
    assert list(tmp_path.iterdir()) == []


def test_two_folders_do_not_wait_for_each_other(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    with datalock.initialising(tmp_path / "a"), datalock.initialising(tmp_path / "b"):
        pass
    handles = [datalock.hold(tmp_path / "a"), datalock.hold(tmp_path / "b")]
    for handle in handles:
        handle.close()
