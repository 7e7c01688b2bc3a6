"""The node's agent recovery key: one Ed25519 key in the data folder (`agent-recovery.key`, mode 0600) that the
node sets as the recovery key of every agent whose key it keeps, at the agent's first rotation or revocation.

It is not the node key (docs/decisions.md, record 59): the node key rotates (`bbs node rotate-key`), and a recovery
key that is the node key would need the node's old seed kept for as long as any identity names it. This key never
rotates (format v3 has no removal of a recovery key, record 56 #3). The operator copies it offline: it is the one
key that takes a node-kept agent back after its current key was stolen, also from a restored or rebuilt node.
"""

from __future__ import annotations

import contextlib
import os
import secrets
from pathlib import Path

from identity import key_files, keys

FILE_NAME = "agent-recovery.key"


def load_or_create(path: Path) -> keys.SigningKey:
    """The recovery key in `path`, made (mode 0600, atomically) when the file does not exist yet.

    Never replaces a file another process made meanwhile (a `bbs init --join` making it beside a serving node, or
    two requests at once): the new key is linked into place, and when a file is there already that one is used."""
    if path.exists():
        return key_files.load_key(path)
    key = keys.SigningKey.generate()
    staged = path.with_name(f".{path.name}.{secrets.token_hex(4)}.new")
    key_files.save_key(staged, key)
    try:
        os.link(staged, path)
    except FileExistsError:
        return key_files.load_key(path)
    finally:
        with contextlib.suppress(OSError):
            staged.unlink()
    return key


def load(path: Path) -> keys.SigningKey | None:
    """The recovery key in `path`, or None when the node has made none yet."""
    return key_files.load_key(path) if path.exists() else None
