"""Forwarding to a task's home node over peer-signed requests (RFC 9421, the sync keys): lease requests, and
the task events that only the home node may decide (status and checkpoint changes, releases, completions).

The home node must list this node as a peer (it accepts signed requests only from configured peers), and
this node must know the home node's URL from its own peer list. Anything short of an answer from the home
node is a refusal with `lease_authority_unreachable`: a lease is never granted by guesswork.
"""

from __future__ import annotations

import json
import secrets
from typing import Any

import aiohttp
import msgspec

from identity import keys
from node.errors import BBSError, Conflict
from node.store.db import Database
from node.workflows.leases import LeaseAuthorityUnreachable
from node.workflows.store import leases as leases_store
from sync.auth import NodeKeyRotatedOut, NodeSigner, PeerBoots, send_as_node, send_resigned, sign_headers
from wire.workflows import PeerLeaseIn, PeerLeaseOut, PeerTaskEventIn, PeerTaskEventOut

PEER_LEASE_PATH = "/v1/agent-workflows/peer/lease"
PEER_EVENT_PATH = "/v1/agent-workflows/peer/task-event"
FORWARD_TIMEOUT_S = 10.0
MAX_REPLY_BYTES = 1024 * 1024
# The boot id of each home node (by URL) as last read: a fact about that URL, the same for every node of this
# process, so one table serves them all; refreshed when a home node answers `stale_boot`.
BOOTS = PeerBoots()


async def request_lease(
    db: Database, node_key: keys.SigningKey | NodeSigner, home_node: str, task_key: str, agent_id: str, seconds: int
) -> tuple[dict[str, Any], bool]:
    """Ask `home_node` to grant `agent_id` the lease. Returns (the grant record it signed, newly granted).

    The home node's refusals (409 lease_held, 404, ...) come back as the same problem; no answer at all is
    `lease_authority_unreachable` (503).
    """
    document = await db.read(lambda c: leases_store.agent_document(c, agent_id))
    # a fresh id per request: the home node answers each id once, so a captured request cannot be replayed
    request = PeerLeaseIn(
        task_key=task_key,
        agent_id=agent_id,
        request_id=secrets.token_urlsafe(24),
        seconds=seconds,
        agent_document=None if document is None else json.loads(document),
    )
    status, data = await _post(db, node_key, home_node, PEER_LEASE_PATH, msgspec.json.encode(request), task_key)
    if status in (200, 201):
        try:
            reply = msgspec.json.decode(data, type=PeerLeaseOut)
        except (msgspec.DecodeError, RecursionError) as exc:
            raise LeaseAuthorityUnreachable(
                f"the home node {home_node} sent an unreadable answer: {exc}", field="task_id"
            ) from None
        return reply.record, status == 201
    raise _relayed(status, data, home_node)


async def send_event(
    db: Database, node_key: keys.SigningKey | NodeSigner, home_node: str, record: dict[str, Any], lease: str | None
) -> bool:
    """Have `home_node` decide and store a task event its agent signed (a declaration changing status or
    checkpoint, a release, a completion); `lease` is a declaration's fencing token. Refusals come back as the
    home node's problem; no answer is `lease_authority_unreachable` (503)."""
    body = msgspec.json.encode(PeerTaskEventIn(record=record, lease=lease))
    status, data = await _post(db, node_key, home_node, PEER_EVENT_PATH, body, str(record.get("task_key")))
    if status != 200:
        raise _relayed(status, data, home_node, "did not accept the change")
    try:
        return msgspec.json.decode(data, type=PeerTaskEventOut).stored
    except (msgspec.DecodeError, RecursionError) as exc:
        raise LeaseAuthorityUnreachable(
            f"the home node {home_node} sent an unreadable answer: {exc}", field="task_id"
        ) from None


async def _post(
    db: Database, node_key: keys.SigningKey | NodeSigner, home_node: str, path: str, body: bytes, task_key: str
) -> tuple[int, bytes]:
    """POST a peer-signed request to the home node's `path`: (status, reply body); 503 when it cannot be asked."""
    base = await db.read(lambda c: leases_store.peer_url(c, home_node))
    if base is None:
        raise LeaseAuthorityUnreachable(
            f"task {task_key} is homed on node {home_node}, the only node that may grant its lease or change its"
            " status, and that node is not a peer of this one; ask there, or add it as a peer",
            field="task_id",
        )
    url = base.rstrip("/") + path
    signer = node_key if isinstance(node_key, NodeSigner) else NodeSigner.single(node_key)
    try:
        # one request per connection, as before the boot id look-up shared the session (scenarios/chaos.py taps it)
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(force_close=True)) as session:

            async def boot(fresh: bool) -> str | None:
                return await BOOTS.get(session, base, fresh=fresh, timeout=FORWARD_TIMEOUT_S)

            async def signed_by(key: keys.SigningKey) -> tuple[int, bytes]:
                async def send(boot: str | None) -> tuple[int, bytes]:
                    headers = sign_headers(key, "POST", url, body, boot=boot, node_id=signer.node_id)  # anew
                    headers["Content-Type"] = "application/json"
                    timeout = aiohttp.ClientTimeout(total=FORWARD_TIMEOUT_S)
                    async with session.post(url, data=body, headers=headers, timeout=timeout) as resp:
                        return resp.status, await resp.content.read(MAX_REPLY_BYTES)

                # a home node that restarted refuses a signature for its previous boot: its boot id read, signed again
                return await send_resigned(send, boot)

            # the node key the home node holds: the newest once it has pulled a rotation of it (sync/auth.py)
            return await send_as_node(signer, home_node, signed_by)
    except NodeKeyRotatedOut as exc:
        raise Conflict(exc.detail, code="node_key_rotated_out", field="task_id") from None
    except (aiohttp.ClientError, TimeoutError) as exc:
        raise LeaseAuthorityUnreachable(
            f"task {task_key} is homed on node {home_node}, the only node that may grant its lease or change its"
            f" status, and this node cannot reach it ({type(exc).__name__}); retry later",
            field="task_id",
        ) from None


def _relayed(status: int, data: bytes, home_node: str, what: str = "did not grant the lease") -> BBSError:
    """The home node's problem, relayed as is when it is the client's to act on (4xx); else unreachable."""
    try:
        problem = msgspec.json.decode(data)
    except (msgspec.DecodeError, RecursionError):
        problem = None
    if 400 <= status < 500 and status not in (401, 403) and isinstance(problem, dict) and "code" in problem:
        field = problem.get("field")
        error = BBSError(
            str(problem.get("detail", "")),
            code=str(problem["code"]),
            field=field if isinstance(field, str) and field.startswith("$.") else "task_id",
        )
        error.status, error.title = status, str(problem.get("title", "Refused by the home node"))
        return error
    code = problem.get("code") if isinstance(problem, dict) else None
    return LeaseAuthorityUnreachable(
        f"the home node {home_node} {what} (HTTP {status}{', ' + str(code) if code else ''}); retry later",
        field="task_id",
    )
