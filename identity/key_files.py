"""Key files: a node's or an agent's signing key on disk (one line `ed25519:<base64url seed>`, mode 0600), and the
atomic, never-world-readable write every secret file of the project goes through.

Apart from `identity.keys` (the keys and signatures, no I/O) so that code which only verifies records, such as the
default-mode runtime, imports nothing that touches files (tests/node/default_mode/test_boundary.py).
"""

from __future__ import annotations

import contextlib
import errno
import os
import tempfile
from pathlib import Path

from identity.keys import KeyError_, SigningKey, b64u, b64u_decode


def write_private_file(path: Path, data: bytes) -> None:
    """Write a secret file atomically, created with mode 0600 (never world-readable, not even briefly).

    The bytes go to a uniquely named temporary file in the target's folder, which is renamed over the target;
    on any failure the temporary file is removed, so a secret is never left behind under another name.
    A folder as the target is refused (IsADirectoryError) before anything is written.
    """
    if path.is_dir() or not path.name:
        raise IsADirectoryError(errno.EISDIR, "is a folder; give a file name", str(path))
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")  # mode 0600
    tmp = Path(name)
    try:
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.chmod(tmp, 0o600)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
    with contextlib.suppress(OSError):  # make the rename durable too; not every file system allows it
        fsync_path(path.parent)


def fsync_path(path: Path) -> None:
    """Flush a file, or a folder (the names it holds: a rename or a new file in it), to the disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def save_key(path: Path, key: SigningKey) -> None:
    """Store a key as a one-line file `ed25519:<base64url seed>`, mode 0600."""
    write_private_file(path, f"ed25519:{b64u(key.seed)}\n".encode("ascii"))


def load_key(path: Path) -> SigningKey:
    """Load a key saved by `save_key`."""
    try:
        text = path.read_text("ascii").strip()
    except UnicodeDecodeError:
        raise KeyError_(f"{path} is not an ed25519 key file") from None
    if not text.startswith("ed25519:"):
        raise KeyError_(f"{path} is not an ed25519 key file")
    seed = b64u_decode(text[len("ed25519:") :])
    if len(seed) != 32:
        raise KeyError_(f"{path} holds a key of the wrong length")
    return SigningKey.from_seed(seed)
