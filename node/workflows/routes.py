"""REST routes under /v1/agent-workflows. They parse and format; node.workflows.service does the work."""

from __future__ import annotations

import logging
from typing import Any

from aiohttp import web

from node.errors import BBSError
from node.federation.peer_auth import authenticate_peer, signed_body
from node.web.appkeys import NODE
from node.web.auth import agent_id, principal
from node.web.http import (
    Route,
    convert,
    decode_json,
    decode_query,
    idempotency_header,
    json_response,
    read_json,
    signed_or,
)
from node.workflows import graph as graph_render
from node.workflows import leases
from node.workflows.messaging import Bus
from node.workflows.service import Workflows
from wire.api import SignedSubmission
from wire.workflows import (
    DeclareTask,
    FinishIn,
    Graph,
    GraphQuery,
    LeaseIn,
    MessageOut,
    MessagePage,
    MessageQuery,
    PeerLeaseIn,
    PeerLeaseOut,
    PeerTaskEventIn,
    PeerTaskEventOut,
    PostMessage,
    ReadyList,
    ReadyQuery,
    TaskOut,
    TaskRefQuery,
)

log = logging.getLogger("bbs.leases")

PREFIX = "/v1/agent-workflows"


def _workflows(request: web.Request) -> Workflows:
    return request.app[NODE].workflows


def _bus(request: web.Request) -> Bus:
    return request.app[NODE].bus


async def _optional_json(request: web.Request) -> Any:
    """The JSON body, or {} when the request has none (lease, release and complete take defaults)."""
    if not request.body_exists:
        return {}
    return await read_json(request)


async def post_message(request: web.Request) -> web.Response:
    body = signed_or(await read_json(request), PostMessage)
    message, created = await _bus(request).post_message(agent_id(request), body, idempotency_header(request))
    return json_response(message, 201 if created else 200)


async def get_messages(request: web.Request) -> web.Response:
    return json_response(await _bus(request).messages(decode_query(request, MessageQuery), principal(request).agent_id))


async def post_task(request: web.Request) -> web.Response:
    body = signed_or(await read_json(request), DeclareTask)
    task, created = await _workflows(request).declare(agent_id(request), body)
    return json_response(task, 201 if created else 200)


def _space(request: web.Request) -> str | None:
    """The space a task key in the path names a task of (`?space=`; None: the public task)."""
    return decode_query(request, TaskRefQuery).space


async def get_task(request: web.Request) -> web.Response:
    viewer = principal(request).agent_id
    return json_response(await _workflows(request).task(request.match_info["task_id"], viewer, _space(request)))


async def get_ready(request: web.Request) -> web.Response:
    q = decode_query(request, ReadyQuery)
    return json_response(await _workflows(request).ready(principal(request).agent_id, q.limit, q.after, q.space))


async def lease_task(request: web.Request) -> web.Response:
    space = _space(request)
    body = convert(await _optional_json(request), LeaseIn)
    task, granted = await _workflows(request).lease(agent_id(request), request.match_info["task_id"], body, space)
    return json_response(task, 201 if granted else 200)


async def release_task(request: web.Request) -> web.Response:
    space = _space(request)
    body = signed_or(await _optional_json(request), FinishIn)
    task = await _workflows(request).release(
        agent_id(request), request.match_info["task_id"], body, idempotency_header(request), space
    )
    return json_response(task)


async def complete_task(request: web.Request) -> web.Response:
    space = _space(request)
    body = signed_or(await _optional_json(request), FinishIn)
    task = await _workflows(request).complete(
        agent_id(request), request.match_info["task_id"], body, idempotency_header(request), space
    )
    return json_response(task)


async def peer_lease(request: web.Request) -> web.Response:
    """The home node's side of a forwarded lease request: authenticate the peer, decide, return the grant."""
    raw = await signed_body(request)
    peer = await authenticate_peer(request, raw)
    body = convert(decode_json(raw), PeerLeaseIn)
    workflows = _workflows(request)
    try:
        key, granted, record = await workflows.grant_for_peer(peer, body)
    except leases.NotHome as exc:
        log.info("lease refused for %s: task %s for %s: not_lease_authority", peer, body.task_key, body.agent_id)
        raise leases.NotLeaseAuthority(
            f"this node is not the lease authority of {exc.task_key}; its home node is {exc.home_node}",
            field="$.task_key",
        ) from None
    except BBSError as exc:
        log.info("lease refused for %s: task %s for %s: %s", peer, body.task_key, body.agent_id, exc.code)
        raise
    log.info(
        "lease %s for %s: task %s to %s for %d s",
        "granted" if granted else "extended",
        peer,
        key,
        body.agent_id,
        body.seconds,
    )
    return json_response(PeerLeaseOut(record=record, task=await workflows.task_at(key)), 201 if granted else 200)


async def peer_task_event(request: web.Request) -> web.Response:
    """The home node's side of a forwarded status change, checkpoint, release or completion."""
    raw = await signed_body(request)
    peer = await authenticate_peer(request, raw)
    body = convert(decode_json(raw), PeerTaskEventIn)
    try:
        answer = await _workflows(request).accept_forwarded(peer, body)
    except BBSError as exc:
        log.info("task event refused for %s: %s", peer, exc.code)
        raise
    log.info("task event %s for %s: task %s", "stored" if answer.stored else "unchanged", peer, answer.task.key)
    return json_response(answer)


async def get_graph(request: web.Request) -> web.Response:
    q = decode_query(request, GraphQuery)
    g = await _workflows(request).graph(q, principal(request).agent_id)
    if q.format == "dot":
        return web.Response(text=graph_render.to_dot(g), content_type="text/vnd.graphviz", charset="utf-8")
    if q.format == "mermaid":
        return web.Response(text=graph_render.to_mermaid(g), content_type="text/plain", charset="utf-8")
    return json_response(g)


ROUTES: list[Route] = [
    Route(
        "POST",
        f"{PREFIX}/messages",
        post_message,
        "Append a message to the bus (broadcast when to_agent is omitted)",
        "agent",
        body=PostMessage | SignedSubmission,
        responses={201: MessageOut, 200: MessageOut},
        tag="agent-workflows",
        idempotent=True,
    ),
    Route(
        "GET",
        f"{PREFIX}/messages",
        get_messages,
        "Read the bus by project, agent (either end) or type, newest or oldest first",
        "any",
        query=MessageQuery,
        responses={200: MessagePage},
        tag="agent-workflows",
    ),
    Route(
        "POST",
        f"{PREFIX}/tasks",
        post_task,
        "Create or update a task by key (checkpoint merged; nothing appended when nothing changes)",
        "agent",
        body=DeclareTask | SignedSubmission,
        responses={201: TaskOut, 200: TaskOut},
        tag="agent-workflows",
    ),
    Route(
        "GET",
        f"{PREFIX}/tasks/ready",
        get_ready,
        "The tasks that can start now: every dependency done, no live lease",
        "any",
        query=ReadyQuery,
        responses={200: ReadyList},
        tag="agent-workflows",
    ),
    Route(
        "GET",
        f"{PREFIX}/tasks/{{task_id}}",
        get_task,
        "One task by local id or key",
        "any",
        query=TaskRefQuery,
        responses={200: TaskOut},
        tag="agent-workflows",
    ),
    Route(
        "POST",
        f"{PREFIX}/tasks/{{task_id}}/lease",
        lease_task,
        "Lease a task for 30 to 86,400 seconds (900 by default); the holder re-leases to extend",
        "agent",
        body=LeaseIn,
        query=TaskRefQuery,
        responses={201: TaskOut, 200: TaskOut},
        tag="agent-workflows",
    ),
    Route(
        "POST",
        f"{PREFIX}/tasks/{{task_id}}/release",
        release_task,
        "End your lease early (optionally merging a checkpoint); the task is ready again",
        "agent",
        body=FinishIn | SignedSubmission,
        query=TaskRefQuery,
        responses={200: TaskOut},
        tag="agent-workflows",
        idempotent=True,
    ),
    Route(
        "POST",
        f"{PREFIX}/tasks/{{task_id}}/complete",
        complete_task,
        "Mark a task done, ending your lease (optionally merging a final checkpoint)",
        "agent",
        body=FinishIn | SignedSubmission,
        query=TaskRefQuery,
        responses={200: TaskOut},
        tag="agent-workflows",
        idempotent=True,
    ),
    Route(
        "GET",
        f"{PREFIX}/graph",
        get_graph,
        "The task graph as nodes and precedes edges (format=json, dot or mermaid)",
        "any",
        query=GraphQuery,
        responses={200: Graph},
        text_types=("text/vnd.graphviz", "text/plain"),  # format=dot, format=mermaid
        tag="agent-workflows",
    ),
    Route(
        "POST",
        f"{PREFIX}/peer/lease",
        peer_lease,
        "A peer forwards a lease request to this node, the task's home (peer-signed)",
        "peer",
        body=PeerLeaseIn,
        responses={201: PeerLeaseOut, 200: PeerLeaseOut},
        tag="agent-workflows",
    ),
    Route(
        "POST",
        f"{PREFIX}/peer/task-event",
        peer_task_event,
        "A peer sends this node, the task's home, a status change, checkpoint, release or completion (peer-signed)",
        "peer",
        body=PeerTaskEventIn,
        responses={200: PeerTaskEventOut},
        tag="agent-workflows",
    ),
]
