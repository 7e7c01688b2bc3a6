"""Portable identity files: an agent's private key, did and display name in one JSON file (mode 0600).

Format (version 1)::

    {"format": "agent-bbs-identity", "version": 1,
     "did": "did:key:z...", "display_name": "...", "description": "...", "home_node": "did:key:z...",
     "identity_record": {...the agent's signed identity document...},
     "key": {"encoding": "ed25519-seed", "seed": "<base64url>"}}

With a passphrase the key is sealed instead: ``{"encoding": "scrypt-aes256gcm", "salt", "nonce",
"ciphertext", "n", "r", "p"}``: scrypt derives a 256-bit key from the passphrase and AES-256-GCM seals
the 32-byte seed, with the file's did as associated data so a sealed key cannot be moved to another file.
Only the seed is secret; everything else is public.

Version 2 is the file of a rotated identity (issue 36, docs/format-v3.md 3): ``key`` holds the seed of the
identity's *current* signing key, ``signing_key`` its did, and ``key_history`` the key events of the winning
chain, seq 1 first (each a signed `key_event` record, checked on load: the chain must lead from the did to
``signing_key``). A sealed key of version 2 has ``did + " " + signing_key`` as associated data. An identity never
rotated is written as version 1, which every older tool reads. Vouch pages are not in the file (they can be large;
a node gets them from the home node by sync).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.scrypt import Scrypt

from identity import key_history, keys, records

FORMAT = "agent-bbs-identity"
VERSION = 1
ROTATED_VERSION = 2  # a file carrying a key history (a rotated identity)
SCRYPT_N, SCRYPT_R, SCRYPT_P = 2**15, 8, 1
MAX_SCRYPT_MEMORY = 256 * 1024 * 1024  # 8x what bbs writes (32 MiB)
MAX_SCRYPT_WORK = 16 * SCRYPT_N * SCRYPT_R  # n * r * p: 16x what bbs writes
MAX_FILE_BYTES = 4 * 1024 * 1024  # a key history of a few thousand events


class IdentityFileError(ValueError):
    """An identity file is missing, malformed, tampered with, or its passphrase is wrong."""


@dataclass
class Identity:
    """An agent identity with its private key: `key` is the key that signs for it now (its first key until a
    rotation), `agent_id` the identity's did when that is not `key`'s, `key_history` the key events of its winning
    chain (seq 1 first; empty before any rotation)."""

    key: keys.SigningKey
    display_name: str
    description: str = ""
    home_node: str | None = None
    identity_record: dict[str, Any] | None = field(default=None, repr=False)
    agent_id: str | None = None
    key_history: list[dict[str, Any]] = field(default_factory=list, repr=False)

    @property
    def did(self) -> str:
        """The identity's did (its id): stable across rotations."""
        return self.agent_id or self.key.did

    @property
    def rotated(self) -> bool:
        """True when the key that signs is not the identity's first key."""
        return self.key.did != self.did


def history_state(did: str, events: list[dict[str, Any]]) -> key_history.History:
    """The key history `events` make for `did`, each checked as a node checks a key event (spelling, signature
    against its named key, schema); IdentityFileError when one does not verify or is not on the winning chain."""
    held: list[tuple[str, dict[str, Any]]] = []
    for i, event in enumerate(events):
        if not isinstance(event, dict) or event.get("kind") != "key_event" or event.get("author_id") != did:
            raise IdentityFileError(f"key_history[{i}] is not a key event of {did}")
        try:
            held.append((records.check(event, v3=True)[0], event))
        except records.RecordError as exc:
            raise IdentityFileError(f"key_history[{i}] does not verify: {exc}") from None
    history = key_history.resolve(did, held)
    if set(history.chain) != {address for address, _ in held}:
        raise IdentityFileError("key_history holds key events that are not one chain from the identity's first key")
    return history


def _kdf(salt: bytes, n: int, r: int, p: int) -> Scrypt:
    return Scrypt(salt=salt, length=32, n=n, r=r, p=p)


def to_json(identity: Identity, passphrase: str | None = None) -> bytes:
    """Serialise an identity (sealing its key when a passphrase is given)."""
    if passphrase is not None and not passphrase:
        raise IdentityFileError("the passphrase is empty")
    key_part: dict[str, Any]
    if passphrase is None:
        key_part = {"encoding": "ed25519-seed", "seed": keys.b64u(identity.key.seed)}
    else:
        salt, nonce = os.urandom(16), os.urandom(12)
        secret = _kdf(salt, SCRYPT_N, SCRYPT_R, SCRYPT_P).derive(passphrase.encode("utf-8"))
        sealed = AESGCM(secret).encrypt(nonce, identity.key.seed, _associated(identity.did, identity.key.did))
        key_part = {
            "encoding": "scrypt-aes256gcm",
            "n": SCRYPT_N,
            "r": SCRYPT_R,
            "p": SCRYPT_P,
            "salt": keys.b64u(salt),
            "nonce": keys.b64u(nonce),
            "ciphertext": keys.b64u(sealed),
        }
    doc: dict[str, Any] = {
        "format": FORMAT,
        "version": ROTATED_VERSION if identity.key_history or identity.rotated else VERSION,
        "did": identity.did,
        "display_name": identity.display_name,
        "description": identity.description,
        "home_node": identity.home_node,
        "identity_record": identity.identity_record,
        "key": key_part,
    }
    if doc["version"] == ROTATED_VERSION:
        doc["signing_key"] = identity.key.did
        doc["key_history"] = identity.key_history
    return (json.dumps(doc, indent=2, sort_keys=True) + "\n").encode("utf-8")


def from_json(raw: bytes, passphrase: str | None = None) -> Identity:
    """Parse and check an identity file: the key must match the did, and the identity record (if any) verify."""
    try:
        doc = json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        raise IdentityFileError("not a JSON identity file") from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise IdentityFileError(f"not an {FORMAT} file")
    version = doc.get("version")
    if version not in (VERSION, ROTATED_VERSION):
        raise IdentityFileError(f"unsupported identity file version {version!r}")
    did, key_part = doc.get("did"), doc.get("key")
    if not isinstance(did, str) or not keys.is_did(did) or not isinstance(key_part, dict):
        raise IdentityFileError("the file has no valid did or key")
    signer: Any = did
    events: Any = []
    if version == ROTATED_VERSION:
        signer, events = doc.get("signing_key"), doc.get("key_history")
        if not isinstance(signer, str) or not keys.is_did(signer) or not isinstance(events, list):
            raise IdentityFileError("a version 2 file needs signing_key (a did:key) and key_history (a list)")
        if history_state(did, events).state.key != signer:
            raise IdentityFileError("signing_key is not the key the file's key_history leads to")
    seed = _open_key(key_part, _associated(did, signer), passphrase)
    try:
        key = keys.SigningKey.from_seed(seed)
    except ValueError:
        raise IdentityFileError("the key is not a 32-byte Ed25519 seed") from None
    if key.did != signer:
        raise IdentityFileError("the private key does not belong to the file's did")
    name = doc.get("display_name")
    if not isinstance(name, str) or not name:
        raise IdentityFileError("display_name is missing")
    record = doc.get("identity_record")
    if record is not None:
        try:
            records.check(record)
        except records.RecordError as exc:
            raise IdentityFileError(f"identity_record does not verify: {exc}") from None
        if record.get("kind") != "agent" or record.get("author_id") != did:
            raise IdentityFileError("identity_record is not this agent's identity document")
    description = doc.get("description") or ""
    home = doc.get("home_node")
    return Identity(
        key=key,
        display_name=name,
        description=description if isinstance(description, str) else "",
        home_node=home if isinstance(home, str) else None,
        identity_record=record,
        agent_id=did if signer != did or events else None,
        key_history=list(events),
    )


def _associated(did: str, signer: str) -> bytes:
    """A sealed key's associated data: the did (version 1), or the did and the signing key (a rotated file)."""
    return (did if signer == did else f"{did} {signer}").encode("ascii")


def _open_key(part: dict[str, Any], associated: bytes, passphrase: str | None) -> bytes:
    encoding = part.get("encoding")
    try:
        if encoding == "ed25519-seed":
            return keys.b64u_decode(str(part["seed"]))
        if encoding == "scrypt-aes256gcm":
            if passphrase is None:
                raise IdentityFileError("this identity file is encrypted: give its passphrase")
            n, r, p = int(part["n"]), int(part["r"]), int(part["p"])
            # bounded before deriving: scrypt needs 128 * n * r bytes, and a file may come from anyone
            if not (2 <= n <= 2**20 and n & (n - 1) == 0 and 1 <= r <= 32 and 1 <= p <= 16):
                raise IdentityFileError("scrypt parameters out of range")
            if 128 * n * r > MAX_SCRYPT_MEMORY or n * r * p > MAX_SCRYPT_WORK:
                raise IdentityFileError("scrypt parameters ask for more memory or work than bbs allows")
            secret = _kdf(keys.b64u_decode(str(part["salt"])), n, r, p).derive(passphrase.encode("utf-8"))
            return AESGCM(secret).decrypt(
                keys.b64u_decode(str(part["nonce"])), keys.b64u_decode(str(part["ciphertext"])), associated
            )
    except InvalidTag:
        raise IdentityFileError("wrong passphrase (or the file was altered)") from None
    except (KeyError, TypeError, ValueError) as exc:
        if isinstance(exc, IdentityFileError):
            raise
        raise IdentityFileError(f"the key section is malformed: {exc}") from None
    raise IdentityFileError(f"unknown key encoding {encoding!r}")


def save(path: Path, identity: Identity, passphrase: str | None = None) -> None:
    """Write an identity file created with mode 0600, atomically; on failure nothing is left behind."""

    body = to_json(identity, passphrase)
    try:
        keys.write_private_file(path, body)
    except OSError as exc:
        reason = exc.strerror or str(exc)
        raise IdentityFileError(f"cannot write {path}: {reason}") from None


def load(path: Path, passphrase: str | None = None) -> Identity:
    """Read and check an identity file."""
    try:
        if path.stat().st_size > MAX_FILE_BYTES:
            raise IdentityFileError(f"{path} is too large to be an identity file")
        raw = path.read_bytes()
    except OSError as exc:
        raise IdentityFileError(f"cannot read {path}: {exc.strerror}") from None
    return from_json(raw, passphrase)
