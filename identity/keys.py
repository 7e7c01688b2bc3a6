"""Ed25519 keys, self-certifying `did:key` identifiers and key files.

A did:key id is `did:key:z` + base58btc(0xed 0x01 + 32-byte public key), so a
signature can be checked with nothing but the id that claims it.
"""

from __future__ import annotations

import base64
import functools
import re

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from nacl import bindings as sodium
from nacl.exceptions import BadSignatureError

_B58 = "123456789ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz"
_B58_INDEX = {c: i for i, c in enumerate(_B58)}
_ED25519_MULTICODEC = b"\xed\x01"
DID_PREFIX = "did:key:z"


class KeyError_(ValueError):
    """A key, id or signature is malformed."""


def b58encode(data: bytes) -> str:
    """Bitcoin-alphabet base58."""
    num = int.from_bytes(data, "big")
    out = ""
    while num:
        num, rem = divmod(num, 58)
        out = _B58[rem] + out
    pad = len(data) - len(data.lstrip(b"\0"))
    return "1" * pad + out


def b58decode(text: str) -> bytes:
    """Inverse of b58encode; raises KeyError_ on characters outside the alphabet."""
    num = 0
    for char in text:
        if char not in _B58_INDEX:
            raise KeyError_(f"invalid base58 character {char!r}")
        num = num * 58 + _B58_INDEX[char]
    body = num.to_bytes((num.bit_length() + 7) // 8, "big") if num else b""
    pad = len(text) - len(text.lstrip("1"))
    return b"\0" * pad + body


def b64u(data: bytes) -> str:
    """Unpadded base64url."""
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def b64u_decode(text: str) -> bytes:
    """Decode unpadded base64url; raises KeyError_ if malformed."""
    try:
        return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except (ValueError, TypeError) as exc:
        raise KeyError_(f"invalid base64url: {exc}") from None


def public_key_bytes(key: Ed25519PublicKey) -> bytes:
    """Raw 32-byte public key."""
    return key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)


def did_from_public_key(key: Ed25519PublicKey) -> str:
    """The did:key id of an Ed25519 public key."""
    return DID_PREFIX + b58encode(_ED25519_MULTICODEC + public_key_bytes(key))


def public_key_from_did(did: str) -> Ed25519PublicKey:
    """Recover the public key from a did:key id; raises KeyError_ if it is not an Ed25519 did:key."""
    if not isinstance(did, str) or not did.startswith(DID_PREFIX) or len(did) > 80:
        raise KeyError_("not an Ed25519 did:key id")
    return _decoded_did(did)


@functools.lru_cache(maxsize=4096)
def _decoded_did(did: str) -> Ed25519PublicKey:
    """Remembered for the 4,096 most recent ids: every verify asks, and a node sees the same authors again."""
    raw = b58decode(did[len(DID_PREFIX) :])
    if len(raw) != 34 or raw[:2] != _ED25519_MULTICODEC:
        raise KeyError_("not an Ed25519 did:key id")
    return Ed25519PublicKey.from_public_bytes(raw[2:])


def is_did(value: str) -> bool:
    """True if `value` is a well-formed Ed25519 did:key id."""
    try:
        public_key_from_did(value)
    except (KeyError_, ValueError):
        return False
    return True


class SigningKey:
    """An Ed25519 private key with its did:key id."""

    def __init__(self, private: Ed25519PrivateKey) -> None:
        self._private = private
        public = private.public_key()
        self.did = did_from_public_key(public)
        # libsodium's form of the same key (seed || public key): it signs in 55 to 75% of OpenSSL's time
        # through `cryptography`, and Ed25519 signing is deterministic, so the signature is the same bytes
        # (docs/decisions.md record 42).
        self._sodium_secret = self.seed + public_key_bytes(public)

    @classmethod
    def generate(cls) -> SigningKey:
        """A fresh random key."""
        return cls(Ed25519PrivateKey.generate())

    @classmethod
    def from_seed(cls, seed: bytes) -> SigningKey:
        """The key with this 32-byte private seed."""
        return cls(Ed25519PrivateKey.from_private_bytes(seed))

    @property
    def seed(self) -> bytes:
        """The raw 32-byte private seed (secret)."""
        return self._private.private_bytes(
            serialization.Encoding.Raw, serialization.PrivateFormat.Raw, serialization.NoEncryption()
        )

    @property
    def public_key(self) -> Ed25519PublicKey:
        return self._private.public_key()

    def sign(self, data: bytes) -> str:
        """Sign bytes; the signature as unpadded base64url."""
        return b64u(sodium.crypto_sign(data, self._sodium_secret)[: sodium.crypto_sign_BYTES])

    def __repr__(self) -> str:  # never show the secret
        return f"SigningKey({self.did})"


_SIGNATURE = re.compile(r"[A-Za-z0-9_-]{85}[AQgw]")


def verify(did: str, data: bytes, signature: str) -> bool:
    """True if `signature` (unpadded base64url, one spelling only) is `did`'s Ed25519 signature over `data`."""
    if not isinstance(signature, str) or not _SIGNATURE.fullmatch(signature):
        return False
    try:
        key = public_key_from_did(did)
        raw = b64u_decode(signature)
    except (KeyError_, ValueError):
        return False
    if len(raw) != 64:
        return False
    if _sodium_verifies(did, raw, data):
        return True
    try:  # libsodium refuses some signatures OpenSSL accepts (small-order keys): cryptography decides
        key.verify(raw, data)
    except InvalidSignature:
        return False
    return True


def _sodium_verifies(did: str, signature: bytes, data: bytes) -> bool:
    """libsodium's verdict: about twice as fast as OpenSSL's through `cryptography`, and it lets other threads run.

    Its rules are OpenSSL's plus a few more refusals (small-order or non-canonical keys and R), so what it
    accepts OpenSSL accepts too; `verify` asks `cryptography` only when libsodium refuses, which keeps the
    accepted set exactly the one `cryptography` defines (docs/decisions.md).
    """
    try:
        sodium.crypto_sign_open(signature + data, _did_key_bytes(did))
    except (BadSignatureError, ValueError):
        return False
    return True


@functools.lru_cache(maxsize=4096)
def _did_key_bytes(did: str) -> bytes:
    return public_key_bytes(_decoded_did(did))
