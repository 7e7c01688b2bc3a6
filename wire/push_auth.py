"""Signatures on pushes: RFC 9421 HTTP message signatures by the node key, as peers' sync requests, under the
tag `bbs-push` (sync requests carry `bbs-sync` and the sync endpoints accept no other, so a captured push cannot be
replayed as a peer request, nor a sync request as a push).

A receiver (the reference runtime, any agent) checks a push with `PushVerifier` and the node id it expects.
"""

from __future__ import annotations

import base64
import datetime
import hashlib
import secrets
import time
import urllib.parse
from collections.abc import Callable, Mapping

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from http_message_signatures import HTTPMessageSigner, HTTPMessageVerifier, algorithms, resolvers
from http_message_signatures.exceptions import HTTPMessageSignaturesException

from identity import keys

TAG = "bbs-push"
LABEL = "bbs"
MAX_AGE_S = 60
COVERED = ("@method", "@authority", "@path", "@query")


class PushAuthError(Exception):
    """A push failed verification; `code` is stable."""

    def __init__(self, code: str, detail: str) -> None:
        super().__init__(detail)
        self.code, self.detail = code, detail


class _Request:
    """The request shape the signature library reads and writes."""

    def __init__(self, method: str, url: str, headers: dict[str, str]) -> None:
        self.method, self.url, self.headers = method, url, headers


class _KeyOf(resolvers.HTTPSignatureKeyResolver):
    def __init__(self, private: Ed25519PrivateKey | None = None, expected: str = "") -> None:
        self.private, self.expected = private, expected

    def resolve_private_key(self, key_id: str) -> Ed25519PrivateKey:
        assert self.private is not None
        return self.private

    def resolve_public_key(self, key_id: str) -> Ed25519PublicKey:
        if key_id != self.expected:
            raise PushAuthError("unknown_node", "the push is not signed by the expected node")
        return keys.public_key_from_did(key_id)


def sign_push(
    key: keys.SigningKey, url: str, body: bytes, *, now: float | None = None, nonce: str | None = None
) -> dict[str, str]:
    """Signature-Input, Signature and Content-Digest for a push (POST of `body` to `url`).

    The signature base of this one fixed shape is built here: the library's general signer spent ~4 ms per push on
    structured-field parsing and serialising, the larger part of the event loop's time while pushing to 100
    endpoints (docs/performance.md). Its output is the library's to the byte (tests/wire/test_push_auth.py),
    and URLs of another shape (an IPv6 literal) go through the library."""
    created = int(time.time() if now is None else now)
    nonce = nonce or secrets.token_urlsafe(16)
    parts = urllib.parse.urlsplit(url)
    if "[" in parts.netloc or not parts.hostname:
        return library_sign(key, url, body, created, nonce)
    scheme, port = parts.scheme.lower(), parts.port
    default = {"http": 80, "https": 443}.get(scheme)
    authority = parts.hostname if port is None or port == default else f"{parts.hostname}:{port}"
    digest = f"sha-256=:{base64.b64encode(hashlib.sha256(body).digest()).decode()}:"
    components = " ".join(f'"{c}"' for c in (*COVERED, "content-digest"))
    params = f'({components});created={created};keyid="{key.did}";alg="ed25519";nonce="{nonce}";tag="{TAG}"'
    base = (
        f'"@method": POST\n"@authority": {authority}\n"@path": {parts.path or "/"}\n"@query": ?{parts.query}\n'
        f'"content-digest": {digest}\n"@signature-params": {params}'
    )
    signature = base64.b64encode(keys.b64u_decode(key.sign(base.encode()))).decode()
    return {"Content-Digest": digest, "Signature-Input": f"{LABEL}={params}", "Signature": f"{LABEL}=:{signature}:"}


def library_sign(key: keys.SigningKey, url: str, body: bytes, created_s: int, nonce: str) -> dict[str, str]:
    """The same headers through http-message-signatures' signer (the reference `sign_push` is tested against)."""
    created = datetime.datetime.fromtimestamp(created_s, datetime.UTC)
    request = _Request("POST", url, {})
    signer = HTTPMessageSigner(
        signature_algorithm=algorithms.ED25519, key_resolver=_KeyOf(Ed25519PrivateKey.from_private_bytes(key.seed))
    )
    signer.sign(
        request,
        key_id=key.did,
        created=created,
        nonce=nonce,
        label=LABEL,
        tag=TAG,
        covered_component_ids=COVERED,
        body=body,
    )
    return request.headers


class PushVerifier:
    """Checks pushes signed by one node (its did), fresh, with a body digest, and each nonce once."""

    def __init__(self, node_id: str, clock: Callable[[], float] = time.time) -> None:
        self.node_id, self.clock = node_id, clock
        self._seen: dict[str, float] = {}

    def verify(self, method: str, url: str, headers: Mapping[str, str], body: bytes) -> None:
        """Return if the push verifies; raise PushAuthError otherwise."""
        wanted = {"signature", "signature-input", "content-digest"}
        picked = {k: v for k, v in headers.items() if k.lower() in wanted}
        if {k.lower() for k in picked} != wanted:
            raise PushAuthError("signature_required", "a push carries Signature, Signature-Input and Content-Digest")
        verifier = HTTPMessageVerifier(
            signature_algorithm=algorithms.ED25519, key_resolver=_KeyOf(expected=self.node_id)
        )
        try:
            results = verifier.verify(
                _Request(method.upper(), url, picked),
                max_age=None,
                expect_tag=TAG,
                require_components=COVERED,
                body=body,
            )
        except PushAuthError:
            raise
        except (HTTPMessageSignaturesException, ValueError, keys.KeyError_) as exc:
            raise PushAuthError("bad_signature", f"the push signature does not verify: {exc}") from None
        params = dict(results[0].parameters)
        now = self.clock()
        created, nonce = params.get("created"), params.get("nonce")
        if not isinstance(created, int) or not now - MAX_AGE_S <= created <= now + 5:
            raise PushAuthError("stale_push", f"a push must be signed within the last {MAX_AGE_S} seconds")
        if not isinstance(nonce, str) or nonce in self._seen:
            raise PushAuthError("replayed_push", "this push was received already")
        if len(self._seen) > 4096:
            self._seen = {n: t for n, t in self._seen.items() if t > now - 2 * MAX_AGE_S}
        self._seen[nonce] = float(created)
