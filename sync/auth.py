"""Peer authentication: every sync request is signed with the node key (RFC 9421, ed25519).

The signature covers the method, authority, path and query and, for requests with a body, its
Content-Digest; its parameters carry `created`, a random `nonce`, `keyid` (the node's
did:key) and the tag `bbs-sync`. The receiver accepts only keys of configured peers, refuses
signatures older than MAX_AGE_S or dated in the future, and remembers nonces until they expire,
so a captured request cannot be replayed; across restarts a ReplayFence (sync/replay.py) refuses every
signature created at or before the last second accepted by the previous process.
"""

from __future__ import annotations

import asyncio
import datetime
import secrets
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import msgspec
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from http_message_signatures import HTTPMessageSigner, HTTPMessageVerifier, algorithms, resolvers
from http_message_signatures.exceptions import HTTPMessageSignaturesException

from identity import keys
from sync.replay import ReplayFence

TAG = "bbs-sync"
LABEL = "bbs"
MAX_AGE_S = 60
MAX_SKEW_S = 5
# Path and query rather than @target-uri: a TLS-terminating proxy changes the scheme the node sees.
COVERED = ("@method", "@authority", "@path", "@query")


async def send_resigned(
    send: Callable[[], Awaitable[tuple[int, bytes]]], on_resign: Callable[[], None] | None = None
) -> tuple[int, bytes]:
    """Send a peer-signed request with `send` (which signs it anew each call): (status, reply body).

    A peer that restarted refuses signatures created at or before the last second its previous process accepted
    (401 `stale_request`, sync/replay.py). Such a request was refused before anything was decided, so it is
    signed again in the next second and sent once more (`on_resign` counts it); a second refusal is returned.
    """
    status, data = await send()
    if status == 401 and problem_code(data) == "stale_request":
        if on_resign is not None:
            on_resign()
        await asyncio.sleep(1.05 - time.time() % 1.0)
        status, data = await send()
    return status, data


def problem_code(data: bytes) -> str | None:
    """The `code` of a problem+json answer (None when the body is not one)."""
    try:
        problem = msgspec.json.decode(data)
    except (msgspec.DecodeError, RecursionError):
        return None
    return problem.get("code") if isinstance(problem, dict) else None


class PeerAuthError(Exception):
    """A sync request failed authentication. `code` is stable; `status` is 401 or 403."""

    def __init__(self, code: str, detail: str, status: int = 401) -> None:
        super().__init__(detail)
        self.code, self.detail, self.status = code, detail, status


class _Message:
    """The minimal request shape the signature library reads."""

    def __init__(self, method: str, url: str, headers: dict[str, str]) -> None:
        self.method, self.url, self.headers = method, url, headers


class _Keys(resolvers.HTTPSignatureKeyResolver):
    def __init__(self, private: Ed25519PrivateKey | None = None, allowed: frozenset[str] = frozenset()) -> None:
        self.private, self.allowed = private, allowed
        self.refused: str | None = None

    def resolve_private_key(self, key_id: str) -> Ed25519PrivateKey:
        assert self.private is not None
        return self.private

    def resolve_public_key(self, key_id: str) -> Ed25519PublicKey:
        if key_id not in self.allowed:
            self.refused = key_id  # the library wraps resolver errors; the verifier reports this one itself
            raise PeerAuthError("unknown_peer", "the signing key is not a configured peer of this node", 403)
        return keys.public_key_from_did(key_id)


def sign_headers(
    key: keys.SigningKey, method: str, url: str, body: bytes | None = None, *, now: float | None = None
) -> dict[str, str]:
    """Headers (Signature-Input, Signature and, with a body, Content-Digest) authenticating one request."""
    created = datetime.datetime.fromtimestamp(time.time() if now is None else now, datetime.UTC)
    message = _Message(method.upper(), url, {})
    signer = HTTPMessageSigner(
        signature_algorithm=algorithms.ED25519,
        key_resolver=_Keys(Ed25519PrivateKey.from_private_bytes(key.seed)),
    )
    signer.sign(
        message,
        key_id=key.did,
        created=created,
        nonce=secrets.token_urlsafe(16),
        label=LABEL,
        tag=TAG,
        covered_component_ids=COVERED,
        body=body,
    )
    return message.headers


class PeerVerifier:
    """Verifies signed sync requests and remembers nonces to refuse replays; with a `fence`, also those of
    requests accepted before this process started."""

    def __init__(self, clock: Callable[[], float] = time.time, fence: ReplayFence | None = None) -> None:
        self.clock, self.fence = clock, fence
        self._seen: dict[tuple[str, str], float] = {}

    def verify(
        self, method: str, url: str, headers: Mapping[str, str], body: bytes | None, allowed: frozenset[str]
    ) -> str:
        """Return the peer's node id, or raise PeerAuthError."""
        if "signature" not in {h.lower() for h in headers} or "signature-input" not in {h.lower() for h in headers}:
            raise PeerAuthError("signature_required", "sync requests must carry an RFC 9421 signature by a peer node")
        wanted = {"signature", "signature-input", "content-digest"}
        message = _Message(method.upper(), url, {k: v for k, v in headers.items() if k.lower() in wanted})
        resolver = _Keys(allowed=allowed)
        verifier = HTTPMessageVerifier(signature_algorithm=algorithms.ED25519, key_resolver=resolver)
        try:
            results = verifier.verify(
                message, max_age=None, expect_tag=TAG, require_components=COVERED, body=body if body else None
            )
        except PeerAuthError:
            raise
        except (HTTPMessageSignaturesException, ValueError, keys.KeyError_) as exc:
            if resolver.refused is not None:
                raise PeerAuthError(
                    "unknown_peer", "the signing key is not a configured peer of this node", 403
                ) from None
            if "in the future" in str(exc):  # the library's clock-skew check (MAX_SKEW_S)
                raise PeerAuthError("stale_request", "signature is dated in the future") from None
            raise PeerAuthError("bad_signature", f"request signature does not verify: {exc}") from None
        if len(results) != 1:
            raise PeerAuthError("bad_signature", "exactly one sync signature expected")
        params: dict[str, Any] = dict(results[0].parameters)
        if body and results[0].body is None:
            raise PeerAuthError("bad_signature", "the body must be covered by a signed Content-Digest")
        now = self.clock()
        created = params.get("created")
        if not isinstance(created, int) or created < now - MAX_AGE_S or created > now + MAX_SKEW_S:
            raise PeerAuthError("stale_request", f"signature must be created within the last {MAX_AGE_S} seconds")
        nonce = params.get("nonce")
        if not isinstance(nonce, str) or not 16 <= len(nonce) <= 64:
            raise PeerAuthError("nonce_required", "the signature must carry a nonce of 16 to 64 characters")
        if self.fence is not None and self.fence.refuses(created):
            raise PeerAuthError(
                "stale_request", "signed before this node last started: sign the request again (a new created)"
            )
        peer = str(params["keyid"])
        self._forget(now)
        if (peer, nonce) in self._seen:
            raise PeerAuthError("replayed_request", "this signed request was already used")
        if self.fence is not None:
            try:
                self.fence.admit(created)
            except OSError as exc:
                raise PeerAuthError(
                    "replay_fence_unwritable", f"this node cannot record accepted requests: {exc}", 503
                ) from None
        self._seen[(peer, nonce)] = created + MAX_AGE_S + MAX_SKEW_S
        return peer

    def _forget(self, now: float) -> None:
        if len(self._seen) > 1024 or secrets.randbelow(64) == 0:
            for k in [k for k, expiry in self._seen.items() if expiry < now]:
                del self._seen[k]
