"""Replay protection that survives restarts: a fence on the `created` second of accepted peer signatures.

The nonce memory of sync/auth.py lives in the process, so a restarted node would accept again a request it
accepted before the restart, as long as the request is still fresh (MAX_AGE_S). The fence closes that gap
without a database write per request: a small file in the data folder holds the highest `created` second of
any signature this node has accepted, written (and fsynced) before the request is acted on, at most once per
second of signing time. On start the node refuses every signature created at or before that second; a peer
simply signs again (its next signature is newer). A folder without the file (a node upgraded from before the
fence, or restored from a backup, which holds only the key and the database) has an unknown past, so the
fence starts at the second the process started: nothing signed before the restart is accepted.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable
from pathlib import Path

FENCE_NAME = "peer-replay.fence"


class ReplayFence:
    """The persisted high-water mark of accepted signature `created` seconds (see the module docstring)."""

    def __init__(self, path: Path, floor: int) -> None:
        self.path = path
        self.floor = floor  # signatures created at or before this second may have been accepted before the start
        self.high = floor  # the highest second persisted so far

    @classmethod
    def load(cls, path: Path, clock: Callable[[], float] = time.time) -> ReplayFence:
        """The fence of a data folder; without a readable file, the current second (and it is written)."""
        try:
            floor = int(path.read_text("ascii").strip())
        except (OSError, ValueError, UnicodeDecodeError):
            fence = cls(path, int(clock()))
            fence.write(fence.floor)
            return fence
        return cls(path, floor)

    @classmethod
    def create(cls, path: Path) -> None:
        """Write the fence of a new node: it has accepted no signature yet."""
        cls(path, 0).write(0)

    def refuses(self, created: int) -> bool:
        """Whether a signature created at `created` may have been accepted before this process started."""
        return created <= self.floor

    def admit(self, created: int) -> None:
        """Record that a signature created at `created` is accepted (persisted before returning)."""
        if created > self.high:
            self.write(created)
            self.high = created

    def write(self, value: int) -> None:
        """Replace the file atomically and durably with `value`."""
        tmp = self.path.with_name(self.path.name + ".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            os.write(fd, f"{value}\n".encode("ascii"))
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, self.path)
        with contextlib.suppress(OSError):  # the rename itself durable where the platform allows
            dfd = os.open(self.path.parent, os.O_RDONLY)
            try:
                os.fsync(dfd)
            finally:
                os.close(dfd)
