"""One `bbs serve` per data folder: an advisory lock (flock) held for the life of the process.

A second node on the same folder would hand out the same sequence numbers twice; a restore over a
serving folder would pull the files from under it. Both are refused while the lock is held. The lock
dies with the process (even on SIGKILL), so a crash never leaves a stale lock behind.
"""

from __future__ import annotations

import fcntl
import os
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
