"""The key fence: which signing keys this node has rotated out, kept outside its database so a restore cannot
bring one back into use (issue 36, "Restore"; docs/operations.md, "Keys after a restore").

A small file in the data folder (`key-fence.json`, mode 600, never in a backup: node/ops/backup.py copies only the
database and node.key, and `bbs restore --force` carries the replaced folder's file into the restored one, as it
carries the lease fence) holds, for every identity whose key this node rotated (the node's own, node-kept agents'),
the key the rotation installed, its key event and every key rotated out. It is written, fsynced and renamed into
place inside the write job that stores the rotation, after the job's last statement and before it commits, so
the file is never behind a committed rotation (a commit that then fails puts the file's previous content back).

A database restored from a backup taken before a rotation holds a key the fence lists as rotated out: the node
then signs nothing with it (`refusal`): a node-kept agent's writes are refused 409 `signing_key_rotated_out`, and
the node key's signing (sync requests, forwarded leases, node-signed records) stops with `node_key_rotated_out`;
`bbs doctor` says what to do (restore a backup taken after the rotation). The file holds no secret.
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

KEY_FENCE_NAME = "key-fence.json"

log = logging.getLogger("bbs.node")


@dataclass
class KeyFence:
    """The key fence of one data folder (see the module's docstring), read once and kept in memory."""

    path: Path | None  # None: no folder (a node without a key fence refuses nothing)
    _identities: dict[str, dict[str, Any]] = field(default_factory=dict)
    _loaded: bool = False

    def identities(self) -> dict[str, dict[str, Any]]:
        """identity -> {"key": the newest key a rotation here installed, "event": its key event, "retired": [...]}."""
        if not self._loaded:
            self._identities, self._loaded = self._read(), True
        return self._identities

    def _read(self) -> dict[str, dict[str, Any]]:
        if self.path is None:
            return {}
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
            found = data["identities"]
            if not isinstance(found, dict):
                raise TypeError("identities is not an object")
            return {str(k): dict(v) for k, v in found.items()}
        except FileNotFoundError:
            return {}
        except (OSError, ValueError, KeyError, TypeError) as exc:
            # unreadable: treated as empty, loudly (bbs doctor reports it too); it never widens what may sign
            log.warning("key fence %s is unreadable (%s): no rotated-out key is known", self.path, exc)
            return {}

    def refusal(self, identity: str, key: str) -> str | None:
        """Why this node may not sign for `identity` with `key` (a key a rotation here took out, while the newest
        key that rotation installed is not the one held), or None."""
        entry = self.identities().get(identity)
        if entry is None or key not in entry.get("retired", ()):
            return None
        return (
            f"key {key} of {identity} was rotated out on this node by key event {entry.get('event')} (it installed"
            f" {entry.get('key')}), and this database holds no newer key: it was restored from a backup taken before"
            " the rotation. Restore a backup taken after it (or the replaced folder's bbs.db); run bbs doctor"
        )

    def record(self, identity: str, retired: str, key: str, event: str) -> dict[str, dict[str, Any]]:
        """Write that a rotation of `identity` took `retired` out and installed `key` by `event`; returns the content
        before (for `put_back` when the rotation's commit fails)."""
        before = {k: dict(v) for k, v in self.identities().items()}
        entry = self._identities.setdefault(identity, {"retired": []})
        entry["retired"] = sorted({*entry.get("retired", []), retired})
        entry["key"], entry["event"] = key, event
        self._write()
        return before

    def put_back(self, before: dict[str, dict[str, Any]]) -> None:
        """Restore the content `record` returned (the rotation it recorded did not commit)."""
        self._identities, self._loaded = before, True
        self._write()

    def _write(self) -> None:
        """Replace the file atomically and durably: temp file, fsync, rename, fsync of the folder."""
        if self.path is None:
            return
        tmp = self.path.with_name(self.path.name + ".tmp")
        body = json.dumps({"identities": self._identities}, sort_keys=True, indent=1).encode()
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            os.write(fd, body)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, self.path)
        dir_fd = os.open(self.path.parent, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
