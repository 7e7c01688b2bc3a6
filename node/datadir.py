"""The node's data folder: node key, database, first-run initialisation."""

from __future__ import annotations

import os
import secrets
import time
from dataclasses import dataclass
from pathlib import Path

from identity import keys
from node import agents, db


@dataclass(frozen=True)
class DataDir:
    """Paths inside a data folder."""

    root: Path

    @property
    def db_path(self) -> Path:
        return self.root / "bbs.db"

    @property
    def key_path(self) -> Path:
        return self.root / "node.key"

    def exists(self) -> bool:
        return self.key_path.exists() and self.db_path.exists()


def initialise(root: Path) -> str | None:
    """Create the node key, database and admin token if missing. Returns the admin token if one was made."""
    data = DataDir(root)
    root.mkdir(parents=True, exist_ok=True)
    os.chmod(root, 0o700)
    if not data.key_path.exists():
        keys.save_key(data.key_path, keys.SigningKey.generate())
    node_key = keys.load_key(data.key_path)
    old_umask = os.umask(0o077)
    try:
        conn = db.connect(data.db_path)
    finally:
        os.umask(old_umask)
    try:
        db.migrate(conn)
        conn.execute("BEGIN IMMEDIATE")
        try:
            token = None
            if conn.execute("SELECT 1 FROM node_meta WHERE key = 'node_id'").fetchone() is None:
                conn.execute("INSERT INTO node_meta (key, value) VALUES ('node_id', ?)", (node_key.did,))
                conn.execute("INSERT INTO node_meta (key, value) VALUES ('epoch', ?)", (secrets.token_hex(16),))
                token = agents.new_credential(conn, "admin", None, int(time.time() * 1000))
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
    finally:
        conn.close()
    return token
