"""Peer authentication: every sync request is signed with the node key (RFC 9421, ed25519).

The signature covers the method, authority, path and query, the receiving node's boot id (`Bbs-Boot`) and, for
requests with a body, its Content-Digest; its parameters carry `created`, a random `nonce`, `keyid` (the node's
did:key, or after a rotation of the node key `<node did>#<signing key did>`: `key_id`) and the tag `bbs-sync`.
The receiver accepts only keys of configured peers, refuses signatures older
than MAX_AGE_S or dated in the future, and remembers nonces until they expire, so a captured request cannot be
replayed. Across restarts the boot id closes the gap the in-memory nonces leave: each process of a node draws a
new one (shown at GET /v1/node as `boot_id`), and a request naming another boot is refused 401 `stale_boot`,
whatever the clocks say; the sender reads the current id and signs again (`send_resigned`). A request without a
`Bbs-Boot` (a peer of a release before it) is served under the ReplayFence of sync/replay.py instead, which
refuses every signature created at or before the last second accepted by the previous process.
"""

from __future__ import annotations

import asyncio
import datetime
import email.utils
import secrets
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

import aiohttp
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
BOOT_TIMEOUT_S = 10.0  # reading a peer's boot id (GET /v1/node)
BOOT_REPLY_BYTES = 64 * 1024
# Path and query rather than @target-uri: a TLS-terminating proxy changes the scheme the node sees.
COVERED = ("@method", "@authority", "@path", "@query")


BOOT_HEADER = "Bbs-Boot"
BOOT_COMPONENT = '"bbs-boot"'  # how the verifier's results name the covered header


def clock_offset(date: str | None, now: float) -> float | None:
    """A peer's clock minus ours (seconds) from the HTTP `Date` of its answer received at `now`, or None.

    Date has whole seconds: the reading is up to a second low (plus the answer's time in flight)."""
    if not date:
        return None
    try:
        sent = email.utils.parsedate_to_datetime(date)
    except (TypeError, ValueError, IndexError):
        return None
    if sent.tzinfo is None:
        return None
    return round(sent.timestamp() + 0.5 - now, 1)  # the middle of the second Date names


def clock_advice(offset: float | None) -> str | None:
    """What to do about a peer's clock offset when it is beyond what signed requests allow, else None.

    A signature is refused when created more than MAX_SKEW_S ahead of the receiver's clock or more than
    MAX_AGE_S behind it, so an offset beyond MAX_SKEW_S either way stops one direction of the federation."""
    if offset is None or abs(offset) <= MAX_SKEW_S:
        return None
    way = "ahead of" if offset > 0 else "behind"
    return (
        f"the peer's clock is {abs(offset):.0f} s {way} this node's, beyond the {MAX_SKEW_S} s signed requests"
        f" allow (a signature is valid from {MAX_SKEW_S} s ahead to {MAX_AGE_S} s behind the receiver's clock):"
        " requests between the two are refused 401 stale_request; synchronise both clocks with NTP"
        " (timedatectl set-ntp true, or chrony/ntpd)"
    )


class PeerBoots:
    """The boot id each peer (by base URL) last gave at GET /v1/node; None for a peer of a release without one."""

    def __init__(self, known: Mapping[str, str | None] | None = None) -> None:
        """`known`: boot ids by base URL taken as read (None: sign as the previous release did)."""
        self._ids: dict[str, str | None] = {base.rstrip("/"): boot for base, boot in (known or {}).items()}

    async def get(
        self, session: aiohttp.ClientSession, base: str, *, fresh: bool = False, timeout: float = BOOT_TIMEOUT_S
    ) -> str | None:
        """The peer's boot id, read from its /v1/node unless known (or `fresh`: it answered `stale_boot`).

        None when the peer has none (the previous release) or cannot be asked now (not remembered: the request
        itself then fails the same way, or is served as the previous release's would be)."""
        base = base.rstrip("/")
        if fresh or base not in self._ids:
            try:
                async with session.get(base + "/v1/node", timeout=aiohttp.ClientTimeout(total=timeout)) as resp:
                    raw = await resp.content.read(BOOT_REPLY_BYTES) if resp.status == 200 else b""
            except (aiohttp.ClientError, TimeoutError):
                return None
            try:
                info = msgspec.json.decode(raw) if raw else None
            except (msgspec.DecodeError, RecursionError):
                info = None
            boot = info.get("boot_id") if isinstance(info, dict) else None
            self._ids[base] = boot if isinstance(boot, str) and 0 < len(boot) <= 64 else None
        return self._ids[base]


async def send_resigned(
    send: Callable[[str | None], Awaitable[tuple[int, bytes]]],
    boot: Callable[[bool], Awaitable[str | None]],
    on_resign: Callable[[], None] | None = None,
) -> tuple[int, bytes]:
    """Send a peer-signed request with `send(boot_id)` (which signs it anew each call, naming that boot of the
    receiver): (status, reply body). `boot(fresh)` gives the receiver's boot id (PeerBoots.get).

    A receiver that restarted since its boot id was read refuses the request 401 `stale_boot`: the id is read
    again and the request signed and sent once more. A receiver of the previous release (no boot id) refuses a
    signature created at or before the last second its previous process accepted (401 `stale_request`,
    sync/replay.py): signed again in the next second and sent once more. Either refusal came before anything
    was decided; `on_resign` counts the second attempt, and a second refusal is returned.
    """
    boot_id = await boot(False)
    status, data = await send(boot_id)
    code = problem_code(data) if status == 401 else None
    if code == "stale_boot":
        if on_resign is not None:
            on_resign()
        status, data = await send(await boot(True))
    elif code == "stale_request" and boot_id is None:
        if on_resign is not None:
            on_resign()
        await asyncio.sleep(1.05 - time.time() % 1.0)
        status, data = await send(boot_id)
    return status, data


# A peer that refused the newest node key (it has not pulled the rotation) is asked with it again after this long.
RETRY_NEWEST_S = 30.0
# what a peer without the rotation answers (`unknown_peer`: a release before node key rotation)
NEWEST_REFUSED = frozenset({"unknown_node_key", "unknown_peer"})


class NodeKeyRotatedOut(Exception):
    """This node holds no key it may sign with: its key fence names a newer node key than any it holds (a database
    restored from before a rotation of the node key). `detail` says what to do."""

    def __init__(self, detail: str) -> None:
        super().__init__(detail)
        self.detail = detail


class NodeSigner:
    """Which key this node signs a peer's requests with, across rotations of the node key (docs/sync.md).

    `keys` are the node's signing keys, newest last: its first key alone before any rotation, else the key before
    the newest one (while some peer has not pulled the rotation) and the newest. A peer that accepted a request
    signed by the newest key holds the rotation (`holders`); one that refused it (`unknown_node_key`, or
    `unknown_peer` from a release without rotation) is signed for with the key before, and asked with the newest
    again after RETRY_NEWEST_S; one that refuses the key before (`rotated_node_key`) is signed for with the newest.
    `blocked` (a restore from before a rotation): nothing is signed (`NodeKeyRotatedOut`).
    """

    def __init__(
        self,
        node_id: str,
        signing_keys: list[keys.SigningKey],
        holders: set[str] | None = None,
        *,
        blocked: str | None = None,
        on_holder: Callable[[str], Awaitable[None]] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.node_id, self.keys, self.holders = node_id, list(signing_keys), set(holders or ())
        self.blocked, self.on_holder, self.clock = blocked, on_holder, clock
        self._lacking: dict[str, float] = {}  # peer -> when it refused the newest key

    @classmethod
    def single(cls, key: keys.SigningKey) -> NodeSigner:
        """A node that never rotated its key (or a caller that signs with one key)."""
        return cls(key.did, [key])

    @property
    def did(self) -> str:
        """The node's id (its first key's did:key, whatever key signs now)."""
        return self.node_id

    @property
    def lacking(self) -> frozenset[str]:
        """The peers that refused the newest key (`refused`) and have not accepted it since."""
        return frozenset(self._lacking)

    @property
    def current(self) -> keys.SigningKey:
        """The newest node key (what the node signs its records with); NodeKeyRotatedOut when blocked."""
        if self.blocked is not None:
            raise NodeKeyRotatedOut(self.blocked)
        return self.keys[-1]

    def for_peer(self, peer: str) -> keys.SigningKey:
        """The key to sign a request to `peer` with (see the class's docstring)."""
        newest = self.current
        if len(self.keys) == 1 or peer in self.holders:
            return newest
        refused_at = self._lacking.get(peer)
        if refused_at is not None and self.clock() - refused_at < RETRY_NEWEST_S:
            return self.keys[-2]
        return newest

    def refused(self, peer: str, key: keys.SigningKey, code: str | None) -> bool:
        """Note that `peer` refused a request signed by `key` (problem `code`); True when signing it with the other
        key may pass."""
        if len(self.keys) < 2:
            return False
        if key.did == self.keys[-1].did and code in NEWEST_REFUSED:
            self._lacking[peer] = self.clock()
            self.holders.discard(peer)
            return True
        if key.did != self.keys[-1].did and code == "rotated_node_key":
            self._lacking.pop(peer, None)
            return True
        return False

    async def accepted(self, peer: str, key: keys.SigningKey) -> None:
        """Note that `peer` accepted a request signed by `key`: with the newest key, it holds the rotation."""
        if len(self.keys) > 1 and key.did == self.keys[-1].did and peer not in self.holders:
            self.holders.add(peer)
            self._lacking.pop(peer, None)
            if self.on_holder is not None:
                await self.on_holder(peer)


async def send_as_node(
    signer: NodeSigner, peer: str, send: Callable[[keys.SigningKey], Awaitable[tuple[int, bytes]]]
) -> tuple[int, bytes]:
    """Send a peer-signed request with `send(key)`, signed by the key `signer` chooses for `peer`; once more with
    the other key when the peer refused that one (`NodeSigner.refused`). Raises NodeKeyRotatedOut when blocked."""
    key = signer.for_peer(peer)
    status, data = await send(key)
    if status in (401, 403) and signer.refused(peer, key, problem_code(data)):
        key = signer.for_peer(peer)
        status, data = await send(key)
    if status not in (401, 403):
        await signer.accepted(peer, key)
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


def key_id(node_id: str, signing_key: str) -> str:
    """The RFC 9421 `keyid` of a sync request of `node_id` signed by `signing_key`: the bare node did when the key
    is the node's first one (what every release before node key rotation sends and accepts), else
    `<node did>#<signing key did>` (docs/format-v3.md 3.8, docs/decisions.md record 56 answer 13)."""
    return node_id if signing_key == node_id else f"{node_id}#{signing_key}"


def split_key_id(value: str) -> tuple[str, str]:
    """(node id, signing key) of a `keyid` (`key_id`'s two spellings)."""
    node_id, _, signing_key = value.partition("#")
    return node_id, signing_key or node_id


class _Keys(resolvers.HTTPSignatureKeyResolver):
    def __init__(self, private: Ed25519PrivateKey | None = None, allowed: frozenset[str] = frozenset()) -> None:
        self.private, self.allowed = private, allowed
        self.refused: str | None = None

    def resolve_private_key(self, key_id: str) -> Ed25519PrivateKey:
        assert self.private is not None
        return self.private

    def resolve_public_key(self, key_id: str) -> Ed25519PublicKey:
        node_id, signing_key = split_key_id(key_id)
        if node_id not in self.allowed:
            self.refused = key_id  # the library wraps resolver errors; the verifier reports this one itself
            raise PeerAuthError("unknown_peer", "the signing key is not a configured peer of this node", 403)
        return keys.public_key_from_did(signing_key)


def sign_headers(
    key: keys.SigningKey,
    method: str,
    url: str,
    body: bytes | None = None,
    *,
    now: float | None = None,
    boot: str | None = None,
    node_id: str | None = None,
) -> dict[str, str]:
    """Headers (Signature-Input, Signature, with a body Content-Digest, with `boot` the receiver's boot id as
    Bbs-Boot) authenticating one request. Without `boot` the request is signed as the previous release did.
    `node_id`: the node `key` signs for when it is not the node's first key (after a rotation: `key_id`)."""
    created = datetime.datetime.fromtimestamp(time.time() if now is None else now, datetime.UTC)
    message = _Message(method.upper(), url, {} if boot is None else {BOOT_HEADER: boot})
    signer = HTTPMessageSigner(
        signature_algorithm=algorithms.ED25519,
        key_resolver=_Keys(Ed25519PrivateKey.from_private_bytes(key.seed)),
    )
    signer.sign(
        message,
        key_id=key_id(node_id or key.did, key.did),
        created=created,
        nonce=secrets.token_urlsafe(16),
        label=LABEL,
        tag=TAG,
        covered_component_ids=COVERED if boot is None else (*COVERED, BOOT_HEADER.lower()),
        body=body,
    )
    return message.headers


STALE_BOOT = "signed for another boot of this node (it restarted): read boot_id from GET /v1/node and sign again"
REPLAYED = "this signed request was already used"
BEFORE_START = "signed before this node last started: sign the request again (a new created)"


@dataclass(frozen=True)
class Signed:
    """A peer request whose signature verified and is fresh, not yet checked against replays: who signed it, with
    which key, its nonce, its `created` second and the boot id it names (None: a peer of the previous release)."""

    peer: str
    signing_key: str
    nonce: str
    created: int
    boot: str | None

    @property
    def expires(self) -> int:
        """The second after which the signature is no longer fresh anywhere: its nonce need not be kept past it."""
        return self.created + MAX_AGE_S + MAX_SKEW_S


class PeerVerifier:
    """Verifies signed sync requests and remembers nonces to refuse replays; requests naming another `boot_id`
    (drawn anew for each verifier: each process of a node) are refused, and with a `fence`, requests of the
    previous release (no boot id) accepted before this process started.

    A node served by several processes (PostgreSQL) keeps the nonces and the boot id in its database instead
    (node/federation/node_replay.py): it calls `check` here and decides the replay there."""

    def __init__(self, clock: Callable[[], float] = time.time, fence: ReplayFence | None = None) -> None:
        self.clock, self.fence = clock, fence
        self.boot_id = secrets.token_urlsafe(12)  # the nonce memory below starts empty with it
        self.legacy = 0  # requests accepted without a boot id (a peer of the previous release), under the fence
        self._seen: dict[tuple[str, str], float] = {}

    def verify(
        self, method: str, url: str, headers: Mapping[str, str], body: bytes | None, allowed: frozenset[str]
    ) -> str:
        """Return the peer's node id, or raise PeerAuthError."""
        return self.verify_signed(method, url, headers, body, allowed)[0]

    def verify_signed(
        self, method: str, url: str, headers: Mapping[str, str], body: bytes | None, allowed: frozenset[str]
    ) -> tuple[str, str]:
        """Return (the peer's node id, the key that signed: its first key or the one its `keyid` names), or raise
        PeerAuthError. Whether that key may still sign for the peer is the caller's to decide (its key history)."""
        signed = self.check(method, url, headers, body, allowed)
        fence = self._since_restart(signed.boot, signed.created)
        self._forget(self.clock())
        if (signed.peer, signed.nonce) in self._seen:
            raise PeerAuthError("replayed_request", REPLAYED)
        if fence is not None:
            self.legacy += 1
            try:
                fence.admit(signed.created)
            except OSError as exc:
                raise PeerAuthError(
                    "replay_fence_unwritable", f"this node cannot record accepted requests: {exc}", 503
                ) from None
        self._seen[(signed.peer, signed.nonce)] = signed.expires
        return signed.peer, signed.signing_key

    def check(
        self, method: str, url: str, headers: Mapping[str, str], body: bytes | None, allowed: frozenset[str]
    ) -> Signed:
        """The request's signature checked (a configured peer's key, the tag, the covered components and body, fresh
        within MAX_AGE_S and MAX_SKEW_S, a nonce), or PeerAuthError; whether it was seen before is not decided."""
        if "signature" not in {h.lower() for h in headers} or "signature-input" not in {h.lower() for h in headers}:
            raise PeerAuthError("signature_required", "sync requests must carry an RFC 9421 signature by a peer node")
        wanted = {"signature", "signature-input", "content-digest", BOOT_HEADER.lower()}
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
        peer, signing_key = split_key_id(str(params["keyid"]))
        return Signed(peer, signing_key, nonce, created, results[0].covered_components.get(BOOT_COMPONENT))

    def _since_restart(self, boot: str | None, created: int) -> ReplayFence | None:
        """Refuse a request that may have been accepted before this process started: one for another boot
        (`stale_boot`), or, without a boot id (a peer of the previous release), one created at or before the
        fence (`stale_request`). Returns the fence such a request is then admitted to, or None."""
        if boot is not None:
            if boot != self.boot_id:
                raise PeerAuthError("stale_boot", STALE_BOOT)
            return None
        if self.fence is not None and self.fence.refuses(created):
            raise PeerAuthError("stale_request", BEFORE_START)
        return self.fence

    def _forget(self, now: float) -> None:
        if len(self._seen) > 1024 or secrets.randbelow(64) == 0:
            for k in [k for k, expiry in self._seen.items() if expiry < now]:
                del self._seen[k]
