"""HTTP client of one peer's sync endpoints; every request signed with this node's key."""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from typing import Any

import aiohttp
import msgspec
from yarl import URL

from identity import keys
from sync import compact
from sync import messages as m
from sync.auth import (
    NodeKeyRotatedOut,
    NodeSigner,
    PeerBoots,
    clock_advice,
    clock_offset,
    problem_code,
    send_as_node,
    send_resigned,
    sign_headers,
)
from sync.server import MAX_PAGE_BYTES

MAX_RESPONSE_BYTES = 64 * 1024 * 1024  # a fetch of 256 hashes of records up to 256 KiB each
# a changes page holds at most MAX_PAGE_BYTES of records (sync/server.py) plus its hashes and framing
MAX_CHANGES_BYTES = MAX_PAGE_BYTES + 1024 * 1024
REPLY_TIMEOUT_S = 30.0  # beyond a long-poll's wait, the most a peer may take to answer (a stall is cut off)
NODE_INFO_BYTES = 64 * 1024  # GET /v1/node is a few hundred bytes
UNSUPPORTED_SYNC_VERSION = "unsupported_sync_version"


class SyncError(Exception):
    """An exchange with a peer failed (network, HTTP status, or a malformed reply). `code` is the problem code
    of the peer's error answer when it gave one (`unknown_peer`: it has not added this node yet)."""

    def __init__(
        self, message: str, code: str | None = None, detail: str | None = None, field: str | None = None
    ) -> None:
        super().__init__(message)
        self.code = code
        self.detail = detail  # the problem's detail, when the peer answered with one
        self.field = field  # the problem's field, when it named one


@dataclass
class Traffic:
    """Requests and body bytes exchanged (shared by every client of one puller)."""

    requests: int = 0
    bytes_sent: int = 0
    bytes_received: int = 0


def spoken_versions(detail: str | None) -> set[int]:
    """The sync protocol versions a peer's `422 unsupported_sync_version` names: "this node speaks sync protocol
    v2, not v3: ..." (a node of protocol v2) or "... speaks sync protocol v4 and v3, not v2: ..."."""
    found = re.search(r"speaks sync protocol ((?:v[0-9]{1,6}(?:, | and )?)+)", detail or "")
    return {int(n) for n in re.findall(r"v([0-9]{1,6})", found.group(1))} if found else set()


async def node_sync_versions(session: aiohttp.ClientSession, base: str) -> set[int]:
    """The sync protocol versions a peer's `GET /v1/node` lists (`sync_versions`); a node of protocol v2 lists
    none: {2}. Raises SyncError when the peer cannot be asked."""
    url = base.rstrip("/") + "/v1/node"
    try:
        async with session.get(url, timeout=aiohttp.ClientTimeout(total=REPLY_TIMEOUT_S)) as resp:
            raw = await resp.content.read(NODE_INFO_BYTES)
            status = resp.status
    except (aiohttp.ClientError, TimeoutError) as exc:
        raise SyncError(f"GET /v1/node: {type(exc).__name__}: {exc}") from None
    try:
        info = msgspec.json.decode(raw) if status == 200 else None
    except (msgspec.DecodeError, RecursionError):
        info = None
    if not isinstance(info, dict):
        raise SyncError(f"GET /v1/node: HTTP {status}: not a node's description")
    listed = info.get("sync_versions")
    if listed is None:
        return {2}
    if not isinstance(listed, list) or not all(type(n) is int for n in listed):
        raise SyncError("GET /v1/node: sync_versions is not a list of integers")
    return set(listed)


class PeerClient:
    """Signed requests to one peer: the changes feed, fetch by hash, reconciliation rounds, in protocol `version`
    (one of `m.SYNC_VERSIONS`: the puller speaks v2 to a peer of protocol v2)."""

    def __init__(
        self,
        session: aiohttp.ClientSession,
        key: keys.SigningKey | NodeSigner,
        node_id: str,
        url: str,
        traffic: Traffic | None = None,
        health: m.PeerHealth | None = None,
        boots: PeerBoots | None = None,
        version: int = m.PROTOCOL_VERSION,
    ) -> None:
        self.session, self.node_id = session, node_id
        self.signer = key if isinstance(key, NodeSigner) else NodeSigner.single(key)  # which node key signs
        self.version = version
        self.base = url.rstrip("/")
        self.bytes_sent = 0
        self.bytes_received = 0
        self.requests = 0
        self.resigned = 0  # requests signed again after the peer restarted
        self.traffic = traffic or Traffic()
        self.health = health
        self.boots = boots or PeerBoots()  # shared by the clients of one puller

    async def changes(self, since: int, epoch: str | None, limit: int, wait_ms: int, ids: int = 0) -> m.ChangesReply:
        """A page of the peer's feed after `since`; with `ids`, a page of ids and sizes (decision 70): an item may
        still carry its body (a peer that serves bodies anyway), never both nor neither. With `ids=2` the peer
        answers a compact page (decision 74), returned expanded as `Changes` of seqs, versions and sizes; one that
        cannot be read is a malformed batch."""
        query: dict[str, str] = {
            "since": str(since),
            "limit": str(limit),
            "wait_ms": str(wait_ms),
            "v": str(self.version),
        }
        if epoch is not None:
            query["epoch"] = epoch
        if ids:  # never sent otherwise: a peer of an earlier release refuses a parameter it does not know
            query["ids"] = str(int(ids))
        timeout = wait_ms / 1000 + REPLY_TIMEOUT_S
        raw = await self._request("GET", "/v1/sync/changes", query=query, timeout=timeout, max_bytes=MAX_CHANGES_BYTES)
        reply = self._decode(m.CHANGES_DECODER, raw)
        if isinstance(reply, m.IdsPage) and ids != m.IDS_COMPACT:  # a JSON page to ids=2 is read as to ids=1
            raise SyncError(f"malformed batch: a compact page in reply to ids={int(ids)}")
        if isinstance(reply, m.IdsPage):
            if not (since <= reply.next <= reply.head or reply.next == since):
                raise SyncError(f"malformed batch: next cursor {reply.next} outside [{since}, {reply.head}]")
            try:
                return compact.expand(reply, self.node_id, since, limit, epoch)
            except compact.CompactError as exc:
                raise SyncError(f"malformed batch: {exc.field}: {exc}") from None
        if isinstance(reply, m.Changes) and len(reply.items) > limit:  # what a page may hold is ours to say
            raise SyncError(f"malformed batch: {len(reply.items)} records for a page of at most {limit}")
        if isinstance(reply, m.Changes) and not (since <= reply.next <= reply.head or reply.next == since):
            raise SyncError(f"malformed batch: next cursor {reply.next} outside [{since}, {reply.head}]")
        if isinstance(reply, m.Changes):
            for item in reply.items:
                bodied = item.record is not msgspec.UNSET
                if bodied == (item.size is not msgspec.UNSET) or (not ids and not bodied) or (bodied and not item.hash):
                    raise SyncError(
                        f"malformed batch: item {item.seq} must carry its body and address" + (" or its size" * ids)
                    )
        return reply

    async def fetch(self, hashes: list[str]) -> m.Records:
        body = msgspec.json.encode(m.FetchRequest(v=self.version, hashes=hashes))
        reply: m.Records = self._decode(m.RECORDS_DECODER, await self._request("POST", "/v1/sync/fetch", body=body))
        asked = set(hashes)
        # an address brings each version the peer keeps of it: at most two
        if len(reply.items) > 2 * len(asked) or any(
            item.hash not in asked and item.version not in asked for item in reply.items
        ):
            raise SyncError("malformed batch: records that were not asked for")
        return reply

    async def bodies(self, seqs: list[int]) -> list[bytes]:
        """The bodies of the peer's records at `seqs` (increasing, from a compact ids page just read), as it sends
        them: the caller checks each one's version (sync/ids_first.py). More bodies than seqs is a malformed batch."""
        body = msgspec.json.encode(m.BodiesRequest(v=self.version, seqs=compact.pack_seqs(seqs)))
        reply: m.Bodies = self._decode(m.BODIES_DECODER, await self._request("POST", "/v1/sync/bodies", body=body))
        if len(reply.records) > len(seqs):
            raise SyncError(f"malformed batch: {len(reply.records)} bodies for {len(seqs)} seqs")
        return [bytes(record) for record in reply.records]

    async def reconcile(self, message: bytes, set_: str | msgspec.UnsetType = msgspec.UNSET) -> m.ReconcileReply:
        """One round over `set_` (`m.PUBLIC_SET` or a space id; unset: the whole set, as a peer of the previous
        release is asked)."""
        body = msgspec.json.encode(m.ReconcileRequest(v=self.version, message=message.hex(), set=set_))
        reply: m.ReconcileReply = self._decode(
            m.RECONCILE_DECODER, await self._request("POST", "/v1/sync/reconcile", body=body)
        )
        if reply.spaces is not msgspec.UNSET and set_ != m.PUBLIC_SET:
            raise SyncError("malformed batch: a list of spaces in reply to a round not over the public federation")
        return reply

    def _decode(self, decoder: msgspec.json.Decoder[Any], raw: bytes) -> Any:
        try:
            reply = decoder.decode(raw)
        except msgspec.DecodeError as exc:
            raise SyncError(f"malformed batch: {exc}") from None
        except RecursionError:
            raise SyncError("malformed batch: nested too deeply to decode") from None
        if getattr(reply, "v", self.version) != self.version:
            raise SyncError(f"malformed batch: a reply in sync protocol v{reply.v} to a request in v{self.version}")
        if getattr(reply, "node_id", self.node_id) != self.node_id:
            raise SyncError(f"the peer answered as {reply.node_id}, not {self.node_id}")
        return reply

    async def _request(
        self,
        method: str,
        path: str,
        *,
        query: dict[str, str] | None = None,
        body: bytes | None = None,
        timeout: float = REPLY_TIMEOUT_S,
        max_bytes: int = MAX_RESPONSE_BYTES,
    ) -> bytes:
        url = URL(self.base + path)
        if query:
            url = url.with_query(query)

        async def signed_by(key: keys.SigningKey) -> tuple[int, bytes]:
            return await send_resigned(
                lambda boot: self._send(method, url, body, timeout, max_bytes, boot, key),
                self._boot,
                self._count_resigned,
            )

        try:
            status, data = await send_as_node(self.signer, self.node_id, signed_by)
        except NodeKeyRotatedOut as exc:
            raise SyncError(f"{method} {path}: not signed: {exc.detail}", "node_key_rotated_out", exc.detail) from None
        if status != 200:
            advice = clock_advice(self.health.clock_offset_s) if self.health is not None else None
            raise SyncError(
                f"{method} {path}: HTTP {status}: {_problem(data)}" + (f" ({advice})" if advice else ""),
                problem_code(data),
                _detail(data),
                _member(data, "field"),
            )
        return data

    async def _boot(self, fresh: bool) -> str | None:
        """The peer's boot id (sync/auth.py PeerBoots), named in each signature."""
        return await self.boots.get(self.session, self.base, fresh=fresh, timeout=REPLY_TIMEOUT_S)

    def _count_resigned(self) -> None:
        # the peer restarted since its boot id was read (or, of the previous release, since our signature's
        # second: sync/replay.py): signed again
        self.resigned += 1
        if self.health is not None:
            self.health.resigned_requests += 1

    async def _send(
        self,
        method: str,
        url: URL,
        body: bytes | None,
        timeout: float,
        max_bytes: int,
        boot: str | None,
        key: keys.SigningKey,
    ) -> tuple[int, bytes]:
        headers = sign_headers(key, method, str(url), body, boot=boot, node_id=self.signer.node_id)
        if body is not None:
            headers["Content-Type"] = "application/json"
        self.requests += 1
        self.bytes_sent += len(body or b"")
        self.traffic.requests += 1
        self.traffic.bytes_sent += len(body or b"")
        try:
            async with self.session.request(
                method, url, data=body, headers=headers, timeout=aiohttp.ClientTimeout(total=timeout)
            ) as resp:
                chunks, size = [], 0
                async for chunk in resp.content.iter_chunked(1 << 16):
                    chunks.append(chunk)
                    size += len(chunk)
                    if size > max_bytes:
                        raise SyncError(f"malformed batch: reply exceeds {max_bytes} bytes")
                if self.health is not None:
                    offset = clock_offset(resp.headers.get("Date"), time.time())
                    if offset is not None:
                        self.health.clock_offset_s = offset
                data = b"".join(chunks)
                self.bytes_received += len(data)
                self.traffic.bytes_received += len(data)
                return resp.status, data
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise SyncError(f"{method} {url.path}: {type(exc).__name__}: {exc}") from None


def _detail(data: bytes) -> str | None:
    """The `detail` of a problem+json answer (None when the body is not one)."""
    return _member(data, "detail")


def _member(data: bytes, name: str) -> str | None:
    """The string member `name` of a problem+json answer (None when the body is not one or has none)."""
    try:
        problem = msgspec.json.decode(data)
    except (msgspec.DecodeError, RecursionError):
        return None
    value = problem.get(name) if isinstance(problem, dict) else None
    return value if isinstance(value, str) else None


def _problem(data: bytes) -> str:
    try:
        problem = msgspec.json.decode(data)
        return f"{problem.get('code')}: {problem.get('detail')}"
    except (msgspec.DecodeError, RecursionError, AttributeError):
        return data[:200].decode("utf-8", "replace")
