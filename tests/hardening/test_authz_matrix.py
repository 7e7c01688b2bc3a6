"""Authorization matrix: every route and method of the node, called by every kind of caller.

Callers (columns): N no credentials, W a wrong bearer key, O another agent's key (not the owner of the
resource the path names), A the owning agent's own key, D the admin token, P a configured peer's RFC 9421
signature. Each cell holds the expected HTTP status. The set of rows must equal the set of routes the
application's router serves, so a new route without a row fails `test_every_route_has_a_row`.

Bodies are valid where that is cheap, so a cell that passes authorization shows the operation's real answer
(2xx, or the 4xx of the operation itself); 401/403 cells are the refusals.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import msgspec
import pytest
from aiohttp.test_utils import TestClient

from identity import keys
from node.app import create_app
from node.federation.routes import SyncSettings
from node.service import Node
from sync.auth import sign_headers
from tests.conftest import AgentCreds

CALLERS = ("N", "W", "O", "A", "D", "P")
WRONG_KEY = "bbs_0123456789abcdef_not-a-real-secret"


@dataclass
class Row:
    method: str
    path: str  # the router's canonical path
    expect: str  # six statuses, in CALLERS order
    url: str = ""  # concrete path (str.format over the world's ids); defaults to `path`
    body: Any = None


WF = "/v1/agent-workflows"
# fmt: off
TABLE: list[Row] = [
    # ---- public -------------------------------------------------------------------------------------------
    Row("GET", "/healthz", "200 200 200 200 200 200"),
    Row("GET", "/v1/node", "200 200 200 200 200 200"),
    Row("GET", "/openapi.json", "200 200 200 200 200 200"),
    Row("GET", "/", "200 200 200 200 200 200"),
    Row("GET", "/dashboard/static/{name}", "200 200 200 200 200 200", url="/dashboard/static/app.js"),
    Row("POST", "/v1/auth/challenge", "422 422 422 422 422 422", body={}),
    Row("POST", "/v1/auth/session", "422 422 422 422 422 422", body={}),
    # ---- admin only ---------------------------------------------------------------------------------------
    Row("POST", "/v1/agents", "401 401 403 403 201 401", body={"name": "made-{n}"}),
    Row("GET", "/v1/agents", "401 401 403 403 200 401"),
    # a bystander agent's key is rotated, so the callers' own keys keep working
    Row("POST", "/v1/agents/{agent_id}/api-key", "401 401 403 403 201 401", url="/v1/agents/{spare}/api-key"),
    # the bystander's node-kept signing key is rotated (again at each call: each rotation builds on the last)
    Row("POST", "/v1/agents/{agent_id}/signing-key", "401 401 403 403 201 401", url="/v1/agents/{spare}/signing-key"),
    # ... revoked by the node's recovery key, and recovered by it (each call builds on the last)
    Row("POST", "/v1/agents/{agent_id}/revocation", "401 401 403 403 201 401", url="/v1/agents/{spare}/revocation",
        body={}),
    Row("POST", "/v1/agents/{agent_id}/recovery", "401 401 403 403 201 401", url="/v1/agents/{spare}/recovery",
        body={}),
    # the node's own key: shown, and rotated (again at each call: each rotation builds on the last)
    Row("GET", "/v1/node/key", "401 401 403 403 200 401"),
    Row("POST", "/v1/node/key", "401 401 403 403 201 401", body={}),
    Row("GET", "/v1/admin/void-records", "401 401 403 403 200 401"),
    Row("GET", "/metrics", "401 401 403 403 200 401"),
    # the operator purges an entry of the owner's from this node alone
    Row("POST", "/v1/admin/purges", "401 401 403 403 200 401", body={"target": "{purged}"}),
    Row("GET", "/v1/admin/purges", "401 401 403 403 200 401"),
    Row("POST", "/v1/peers", "401 401 403 403 201 401", body={"url": "http://127.0.0.1:9/", "node_id": "{peer}"}),
    Row("GET", "/v1/peers", "401 401 403 403 200 401"),
    Row("GET", "/v1/sync/digest", "401 401 403 403 200 401"),
    # the configured peer listens nowhere: the admin's check answers 503 peer_unreachable
    Row("POST", "/dashboard/api/peers/{node_id}/agreement", "401 401 403 403 503 401",
        url="/dashboard/api/peers/{peer}/agreement"),
    # ---- reads for any authenticated caller ---------------------------------------------------------------
    Row("GET", "/v1/entries", "401 401 200 200 200 401", url="/v1/entries?ids={entry}"),
    Row("GET", "/v1/entries/{ref}", "401 401 200 200 200 401", url="/v1/entries/{entry}"),
    Row("GET", "/v1/search", "401 401 200 200 200 401", url="/v1/search?q=matrix"),
    Row("GET", "/v1/agents/{agent_id}", "401 401 200 200 200 401", url="/v1/agents/{own}"),
    Row("GET", "/v1/default-mode/candidates", "401 401 200 200 200 401"),
    Row("GET", "/v1/default-mode/candidates/{candidate_id}", "401 401 404 404 404 401",
        url="/v1/default-mode/candidates/999999"),
    Row("GET", "/v1/default-mode/candidates/{candidate_id}/draft", "401 401 404 404 404 401",
        url="/v1/default-mode/candidates/999999/draft"),
    Row("POST", "/v1/default-mode/candidates/{candidate_id}/review", "401 401 404 404 404 401",
        url="/v1/default-mode/candidates/999999/review", body={"decision": "approve"}),
    Row("POST", "/v1/trust/refresh", "401 401 200 200 200 401"),
    Row("GET", f"{WF}/messages", "401 401 200 200 200 401"),
    Row("GET", f"{WF}/tasks/ready", "401 401 200 200 200 401"),
    Row("GET", f"{WF}/tasks/{{task_id}}", "401 401 200 200 200 401", url=WF + "/tasks/{task}"),
    Row("GET", f"{WF}/graph", "401 401 200 200 200 401"),
    Row("GET", "/dashboard/api/session", "401 401 200 200 200 401"),
    Row("GET", "/dashboard/api/agents", "401 401 200 200 200 401"),
    Row("GET", "/dashboard/api/agents/{agent_id}/keys", "401 401 200 200 200 401",
        url="/dashboard/api/agents/{own}/keys"),
    Row("GET", "/dashboard/api/entries/{ref}/provenance", "401 401 200 200 200 401",
        url="/dashboard/api/entries/{entry}/provenance"),
    Row("GET", "/dashboard/api/entries/{ref}/graph.svg", "401 401 200 200 200 401",
        url="/dashboard/api/entries/{entry}/graph.svg"),
    Row("GET", "/dashboard/api/tasks", "401 401 200 200 200 401"),
    Row("GET", "/dashboard/api/tasks/graph.svg", "401 401 200 200 200 401"),
    Row("GET", "/dashboard/api/bus/projects", "401 401 200 200 200 401"),
    # ---- agent writes: the admin token cannot act as an agent ---------------------------------------------
    Row("POST", "/v1/entries", "401 401 201 201 403 401",
        body={"entry_type": "finding", "performative": "inform", "content": "matrix {n}"}),
    Row("POST", "/v1/entries/batch", "401 401 201 201 403 401",
        body={"entries": [{"entry_type": "finding", "performative": "inform", "content": "matrix batch {n}"}]}),
    Row("POST", "/v1/links", "401 401 201 201 403 401",
        body={"source": "{entry}", "target": "{entry2}", "link_type": "supports", "annotation": "{n}"}),
    Row("POST", "/v1/subscriptions", "401 401 201 201 403 401", body={"tags": ["t{n}"]}),
    # only the author (or an admin of its space) redacts: the other agent is refused with 403 not_target_author
    Row("POST", "/v1/redactions", "401 401 403 201 403 401", body={"target": "{redacted}"}),
    # only the agent itself submits its key events (the other agent: 403); the record's refusal shows it passed
    Row("POST", "/v1/agents/{agent_id}/key-events", "401 401 403 422 403 401", url="/v1/agents/{own}/key-events",
        body={"record": {"kind": "key_event"}}),
    # only the agent itself reads the versions its keys signed (the other agent: 403)
    Row("GET", "/v1/agents/{agent_id}/signed-versions", "401 401 403 200 403 401",
        url="/v1/agents/{own}/signed-versions?key={own}"),
    Row("GET", "/v1/subscriptions", "401 401 200 200 403 401"),
    # another agent cannot delete (or even see) the owner's subscription
    Row("DELETE", "/v1/subscriptions/{sub_id}", "401 401 404 204 403 401", url="/v1/subscriptions/{sub}"),
    Row("GET", "/v1/inbox", "401 401 200 200 403 401"),
    Row("GET", "/v1/feed", "401 401 200 200 403 401"),
    Row("POST", "/v1/push/endpoints", "401 401 201 201 403 401", body={"url": "http://127.0.0.1:10/p{n}"}),
    Row("GET", "/v1/push/endpoints", "401 401 200 200 403 401"),
    # another agent can neither delete nor test the owner's endpoint (the test answers 200 {"ok": false})
    Row("DELETE", "/v1/push/endpoints/{endpoint_id}", "401 401 404 204 403 401", url="/v1/push/endpoints/{push}"),
    Row("POST", "/v1/push/endpoints/{endpoint_id}/test", "401 401 404 200 403 401",
        url="/v1/push/endpoints/{push2}/test"),
    Row("GET", "/v1/push/status", "401 401 403 403 200 401"),
    # spaces: the owner's space "matrix", with the bystander as a writer; another agent learns nothing of it
    Row("POST", "/v1/spaces", "401 401 201 201 403 401", body={"name": "s{n}"}),
    Row("GET", "/v1/spaces", "401 401 200 200 403 401"),
    Row("GET", "/v1/spaces/{space_id}", "401 401 404 200 403 401", url="/v1/spaces/{space}"),
    Row("POST", "/v1/spaces/{space_id}/members", "401 401 404 201 403 401", url="/v1/spaces/{space}/members",
        body={"agent_id": "{spare}", "role": "reader"}),
    Row("DELETE", "/v1/spaces/{space_id}/members/{agent_id}", "401 401 404 201 403 401",
        url="/v1/spaces/{space}/members/{spare}"),
    Row("POST", "/v1/spaces/{space_id}/hosts", "401 401 404 201 403 401", url="/v1/spaces/{space}/hosts",
        body={"node": "{peer}", "role": "host"}),
    Row("DELETE", "/v1/spaces/{space_id}/hosts/{node_id}", "401 401 404 201 403 401",
        url="/v1/spaces/{space}/hosts/{here}"),  # the node of creation stops hosting
    Row("GET", "/dashboard/api/spaces", "401 401 200 200 200 401"),
    Row("GET", "/dashboard/api/spaces/{space_id}", "401 401 404 200 200 401", url="/dashboard/api/spaces/{space}"),
    Row("POST", "/nlip", "401 401 200 200 403 401", body={"format": "text", "subformat": "english", "content": "m"}),
    Row("POST", "/nlip/", "401 401 200 200 403 401", body={"format": "text", "subformat": "english", "content": "m"}),
    Row("POST", "/v1/inbox/ack", "401 401 200 200 403 401", body={"ids": [1]}),
    Row("POST", "/v1/default-mode/reflect-session", "401 401 422 422 403 401", body={}),
    Row("POST", "/v1/default-mode/critic", "401 401 200 200 403 401", body={}),
    # the admin may promote but must name the agent that signs: {} answers 422 author_required
    Row("POST", "/v1/default-mode/promote/{candidate_id}", "401 401 404 404 422 401",
        url="/v1/default-mode/promote/999999", body={}),
    Row("POST", "/v1/default-mode/consolidate", "401 401 201 201 403 401", body={}),
    Row("POST", "/v1/default-mode/simulate-future", "401 401 422 422 403 401", body={}),
    Row("POST", "/v1/default-mode/stakeholder-simulation", "401 401 422 422 403 401", body={}),
    Row("POST", "/v1/default-mode/incubate", "401 401 422 422 403 401", body={}),
    Row("POST", f"{WF}/messages", "401 401 201 201 403 401", body={"message_type": "note", "body": "m{n}"}),
    Row("POST", f"{WF}/tasks", "401 401 201 201 403 401", body={"key": "k{n}", "title": "t"}),
    # the task is leased by its owner: another agent can neither take, release nor complete it
    Row("POST", f"{WF}/tasks/{{task_id}}/lease", "401 401 409 200 403 401", url=WF + "/tasks/{task}/lease", body={}),
    Row("POST", f"{WF}/tasks/{{task_id}}/release", "401 401 409 200 403 401", url=WF + "/tasks/{task2}/release",
        body={"lease": "{lease2}"}),
    Row("POST", f"{WF}/tasks/{{task_id}}/complete", "401 401 409 200 403 401", url=WF + "/tasks/{task3}/complete",
        body={"lease": "{lease3}"}),
    # ---- peer-signed: bearer credentials of any kind are refused ------------------------------------------
    Row("GET", "/v1/sync/changes", "401 401 401 401 401 200", url="/v1/sync/changes?v=2&wait_ms=0"),
    Row("POST", "/v1/sync/fetch", "401 401 401 401 401 200", body={"type": "fetch", "hashes": ["0" * 64]}),
    Row("POST", "/v1/sync/bodies", "401 401 401 401 401 200", body={"type": "bodies_request", "seqs": "AQ=="}),
    Row("POST", "/v1/sync/reconcile", "401 401 401 401 401 422", body={"message": ""}),
    # the owner is homed on this node, not on the peer: the peer may not lease for it
    Row("POST", f"{WF}/peer/lease", "401 401 401 401 401 403",
        body={"task_key": "no-such-task", "agent_id": "{own}", "request_id": "matrix-request-{n}"}),
    Row("POST", f"{WF}/peer/task-event", "401 401 401 401 401 422", body={"record": {"kind": "task_event"}}),
]
# fmt: on


@dataclass
class World:
    client: TestClient
    admin: dict[str, str]
    own: AgentCreds
    other: AgentCreds
    peer: keys.SigningKey
    ids: dict[str, str]


@pytest.fixture
async def world(
    aiohttp_client: Callable[..., Awaitable[TestClient]],
    node: Node,
    admin_headers: dict[str, str],
    make_agent: Callable[[str], Awaitable[AgentCreds]],
) -> AsyncIterator[World]:
    # the peer added below is never pulled from
    client = await aiohttp_client(create_app(node, sync=SyncSettings(pull=False)))
    own, other = await make_agent("owner"), await make_agent("other")
    spare = await make_agent("spare")
    peer = keys.SigningKey.generate()
    peer_in = {"url": "http://127.0.0.1:9/", "node_id": peer.did}
    resp = await client.post("/v1/peers", json=peer_in, headers=admin_headers)
    assert resp.status == 201, await resp.text()

    async def ok(method: str, path: str, body: Any, creds: AgentCreds) -> Any:
        r = await client.request(method, path, json=body, headers=creds.headers)
        assert r.status in (200, 201), await r.text()
        return await r.json()

    post = {"entry_type": "finding", "performative": "inform"}
    entry = await ok("POST", "/v1/entries", {**post, "content": "matrix subject"}, own)
    entry2 = await ok("POST", "/v1/entries", {**post, "content": "matrix second"}, own)
    redacted = await ok("POST", "/v1/entries", {**post, "content": "matrix redacted"}, own)
    purged = await ok("POST", "/v1/entries", {**post, "content": "matrix purged"}, own)
    sub = await ok("POST", "/v1/subscriptions", {"tags": ["matrix"]}, own)
    push = await ok("POST", "/v1/push/endpoints", {"url": "http://127.0.0.1:10/matrix"}, own)
    push2 = await ok("POST", "/v1/push/endpoints", {"url": "http://127.0.0.1:10/matrix2"}, own)
    space = await ok("POST", "/v1/spaces", {"name": "matrix"}, own)
    await ok("POST", f"/v1/spaces/{space['space_id']}/members", {"agent_id": spare.agent_id, "role": "writer"}, own)
    task = await ok("POST", f"{WF}/tasks", {"key": "held", "title": "held by the owner"}, own)
    task2 = await ok("POST", f"{WF}/tasks", {"key": "held2", "title": "held by the owner"}, own)
    task3 = await ok("POST", f"{WF}/tasks", {"key": "held3", "title": "held by the owner"}, own)
    tokens = [
        (await ok("POST", f"{WF}/tasks/{t['id']}/lease", {}, own))["lease"]["lease_id"] for t in (task, task2, task3)
    ]
    ids = {
        "entry": str(entry["id"]),
        "entry2": str(entry2["id"]),
        "redacted": redacted["record_hash"],
        "purged": purged["record_hash"],
        "sub": str(sub["id"]),
        "push": str(push["id"]),
        "push2": str(push2["id"]),
        "space": str(space["space_id"]),
        "task": str(task["id"]),
        "task2": str(task2["id"]),
        "task3": str(task3["id"]),
        "lease2": tokens[1],
        "lease3": tokens[2],
        "own": own.agent_id,
        "spare": spare.agent_id,
        "peer": peer.did,
        "here": node.node_id,
    }
    yield World(client, admin_headers, own, other, peer, ids)


def _fill(value: Any, ids: dict[str, str]) -> Any:
    if isinstance(value, str):
        return value.format(**ids)
    if isinstance(value, list):
        return [_fill(v, ids) for v in value]
    if isinstance(value, dict):
        return {k: _fill(v, ids) for k, v in value.items()}
    return value


async def _call(world: World, row: Row, caller: str, n: int) -> int:
    ids = {**world.ids, "n": str(n)}
    url = _fill(row.url or row.path, ids)
    body = None if row.body is None else msgspec.json.encode(_fill(row.body, ids))
    headers: dict[str, str] = {}
    if body is not None:
        headers["Content-Type"] = "application/json"
    if caller == "W":
        headers["Authorization"] = f"Bearer {WRONG_KEY}"
    elif caller == "O":
        headers.update(world.other.headers)
    elif caller == "A":
        headers.update(world.own.headers)
    elif caller == "D":
        headers.update(world.admin)
    elif caller == "P":
        headers.update(sign_headers(world.peer, row.method, str(world.client.make_url(url)), body))
    resp = await world.client.request(row.method, url, data=body, headers=headers)
    await resp.read()
    return resp.status


# The owner acts last in each row, so a mutating owner call (delete, complete) cannot change another cell.
ORDER = ("N", "W", "P", "D", "O", "A")


async def test_authorization_matrix(world: World) -> None:
    mismatches = []
    n = 0
    for row in TABLE:
        expected = dict(zip(CALLERS, row.expect.split(), strict=True))
        for caller in ORDER:
            n += 1
            got = await _call(world, row, caller, n)
            if str(got) != expected[caller]:
                mismatches.append(f"{row.method} {row.path} [{caller}] expected {expected[caller]}, got {got}")
    assert not mismatches, "\n".join(mismatches)


async def test_every_route_has_a_row(world: World) -> None:
    served = {
        (route.method, route.resource.canonical)
        for route in world.client.app.router.routes()
        if route.method != "HEAD" and route.resource is not None
    }
    rows = [(row.method, row.path) for row in TABLE]
    assert len(rows) == len(set(rows)), "a route has two rows"
    assert served - set(rows) == set(), "routes without a row in the authorization matrix"
    assert set(rows) - served == set(), "rows for routes the node does not serve"
