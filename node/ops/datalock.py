"""Locks on a data folder. One `bbs serve` per folder: an advisory lock (flock) held for the life of the process.

A second node on the same folder would hand out the same sequence numbers twice; a restore over a
serving folder would pull the files from under it. Both are refused while the lock is held. The lock
dies with the process (even on SIGKILL), so a crash never leaves a stale lock behind.

Creating a node in a folder takes a second lock (`init.lock`, see `initialising`) so that concurrent commands
never build two nodes in one folder.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator
from pathlib import Path
from typing import IO

from node.errors import Conflict

LOCK_NAME = "serve.lock"


def hold(root: Path) -> IO[bytes]:
    """Take the folder's lock for this process; keep the returned file open for as long as it serves."""
    fd = os.open(root / LOCK_NAME, os.O_RDWR | os.O_CREAT, 0o600)
    handle = os.fdopen(fd, "r+b")
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.close()
        raise Conflict(f"another bbs serve is running on {root}", code="data_in_use") from None
    handle.truncate(0)
    handle.write(f"{os.getpid()}\n".encode())
    handle.flush()
    return handle


def in_use(root: Path) -> bool:
    """Whether a running `bbs serve` holds the folder's lock."""
    path = root / LOCK_NAME
    if not path.exists():
        return False
    with path.open("rb") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        fcntl.flock(handle, fcntl.LOCK_UN)
    return False


INIT_LOCK_NAME = "init.lock"


@contextlib.contextmanager
def initialising(root: Path) -> Iterator[None]:
    """Hold the folder's initialisation lock (exclusive, waiting for it) while creating a node in `root`.

    Two processes creating the same fresh folder at once (`bbs serve` in one terminal, `bbs init` in another)
    would otherwise both write node.key and both create the schema. The second one waits here, then finds an
    initialised folder. The lock file stays (removing it would let a third process lock a different file).
    """
    fd = os.open(root / INIT_LOCK_NAME, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock


@contextlib.contextmanager
def initialised(root: Path) -> Iterator[None]:
    """Wait for an initialisation in progress in `root` (if any) to finish; creates nothing."""
    try:
        fd = os.open(root / INIT_LOCK_NAME, os.O_RDONLY)
    except OSError:  # no lock file: nobody ever initialised here, or not a folder; the caller finds out
        fd = -1
    if fd < 0:
        yield
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_SH)
        yield
    finally:
        os.close(fd)
