"""Forwarding a lease request to the task's home node over a peer-signed request (RFC 9421, the sync keys).

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
from node.db import Database
from node.errors import BBSError
from node.wire.workflows import PeerLeaseIn, PeerLeaseOut
from node.workflows.leases import LeaseAuthorityUnreachable
from sync.auth import sign_headers

PEER_LEASE_PATH = "/v1/agent-workflows/peer/lease"
FORWARD_TIMEOUT_S = 10.0
MAX_REPLY_BYTES = 1024 * 1024


async def request_lease(
    db: Database, node_key: keys.SigningKey, home_node: str, task_key: str, agent_id: str, seconds: int
) -> tuple[dict[str, Any], bool]:
    """Ask `home_node` to grant `agent_id` the lease. Returns (the grant record it signed, newly granted).

    The home node's refusals (409 lease_held, 404, ...) come back as the same problem; no answer at all is
    `lease_authority_unreachable` (503).
    """
    row = await db.read(lambda c: c.execute("SELECT url FROM peers WHERE node_id = ?", (home_node,)).fetchone())
    if row is None:
        raise LeaseAuthorityUnreachable(
            f"task {task_key} is homed on node {home_node}, the only node that may grant its lease, and that node"
            " is not a peer of this one; lease it there, or add it as a peer",
            field="task_id",
        )
    url = str(row[0]).rstrip("/") + PEER_LEASE_PATH
    document = await db.read(
        lambda c: c.execute(
            "SELECT r.body FROM agents a JOIN records r ON r.hash = a.doc_hash WHERE a.id = ?", (agent_id,)
        ).fetchone()
    )
    # a fresh id per request: the home node answers each id once, so a captured request cannot be replayed
    request = PeerLeaseIn(
        task_key=task_key,
        agent_id=agent_id,
        request_id=secrets.token_urlsafe(24),
        seconds=seconds,
        agent_document=None if document is None else json.loads(document[0]),
    )
    body = msgspec.json.encode(request)
    headers = sign_headers(node_key, "POST", url, body)
    headers["Content-Type"] = "application/json"
    try:
        async with (
            aiohttp.ClientSession() as session,
            session.post(
                url, data=body, headers=headers, timeout=aiohttp.ClientTimeout(total=FORWARD_TIMEOUT_S)
            ) as resp,
        ):
            data = await resp.content.read(MAX_REPLY_BYTES)
            status = resp.status
    except (aiohttp.ClientError, TimeoutError) as exc:
        raise LeaseAuthorityUnreachable(
            f"task {task_key} is homed on node {home_node}, the only node that may grant its lease, and this node"
            f" cannot reach it ({type(exc).__name__}); retry later",
            field="task_id",
        ) from None
    if status in (200, 201):
        try:
            reply = msgspec.json.decode(data, type=PeerLeaseOut)
        except (msgspec.DecodeError, RecursionError) as exc:
            raise LeaseAuthorityUnreachable(
                f"the home node {home_node} sent an unreadable answer: {exc}", field="task_id"
            ) from None
        return reply.record, status == 201
    raise _relayed(status, data, home_node)


def _relayed(status: int, data: bytes, home_node: str) -> BBSError:
    """The home node's problem, relayed as is when it is the client's to act on (4xx); else unreachable."""
    try:
        problem = msgspec.json.decode(data)
    except (msgspec.DecodeError, RecursionError):
        problem = None
    if 400 <= status < 500 and status not in (401, 403) and isinstance(problem, dict) and "code" in problem:
        error = BBSError(str(problem.get("detail", "")), code=str(problem["code"]), field="task_id")
        error.status, error.title = status, str(problem.get("title", "Refused by the home node"))
        return error
    code = problem.get("code") if isinstance(problem, dict) else None
    return LeaseAuthorityUnreachable(
        f"the home node {home_node} did not grant the lease (HTTP {status}{', ' + str(code) if code else ''});"
        " retry later",
        field="task_id",
    )
