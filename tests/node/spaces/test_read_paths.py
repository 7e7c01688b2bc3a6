"""Every route of the node and every MCP tool, listed, and each shown to ask the read rule (issue 37; docs/spaces.md,
"Read paths"): a route that can show an entry is probed by an agent that may not read a space's entry, and answers
nothing of it (not its content, its address or its local id); a route that shows no entry says why. A route added
without a line here fails the test, so whoever adds it decides which.

The probes run on a real aiohttp server on loopback, over the REST API an agent (or the dashboard, or the NLIP
endpoint) uses. MCP tools reach the node only through these routes (agent/client.py): each tool's routes must be
listed here.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from aiohttp.test_utils import TestClient

from agent import default_mode_tools, mcp_server, memory_tools, push_tool, workflow_tools
from node.service import Node
from tests.conftest import AgentCreds
from tests.node.spaces.test_posts import post, space_with
from tests.node.spaces.test_routes import call

MakeAgent = Callable[[str], Awaitable[AgentCreds]]
SECRET = "zeppelin"  # the one word of the space's entry that no public entry holds


@dataclass
class World:
    """A space with one entry, a public entry it links to, an agent of the space and one that is not."""

    client: TestClient
    owner: AgentCreds  # owns the space
    eve: AgentCreds  # a member of no space
    space: str
    private: dict[str, Any]  # the space's entry
    public: dict[str, Any]  # a public entry the private one supports
    candidate: int | None = None  # a default-mode candidate of the space
    task: dict[str, Any] | None = None  # a task of the space (its key and title hold SECRET), leased by the owner

    def leaks(self, text: str) -> bool:
        """Whether an answer shows anything of the private entry, or of the space's task."""
        marks = [SECRET, self.private["record_hash"], f'"id": {self.private["id"]}']
        if self.task is not None:
            marks += [self.task["identity"], f'"id": {self.task["id"]},', str(self.task["lease"]["lease_id"])]
        return any(mark in text for mark in marks)

    async def text(self, method: str, path: str, who: AgentCreds, body: Any = None, status: int | None = None) -> str:
        """The answer's text; of a refusal only its status and code (its detail echoes what the probe sent)."""
        resp = await self.client.request(method, path, json=body, headers=who.headers)
        if status is not None:
            assert resp.status == status, await resp.text()
        if resp.status >= 400:
            return f"{resp.status} {(await resp.json())['code']}"
        return (await resp.text()).replace('"id":', '"id": ')


Probe = Callable[[World], Awaitable[str]]


async def _entry(w: World) -> str:
    return await w.text("GET", f"/v1/entries/{w.private['id']}", w.eve, status=404)


async def _entry_by_hash_with_hops(w: World) -> str:
    return (await w.text("GET", f"/v1/entries/{w.private['record_hash']}", w.eve, status=404)) + (
        await w.text("GET", f"/v1/entries/{w.public['id']}?hops=2", w.eve, status=200)
    )


async def _entries(w: World) -> str:
    return await w.text("GET", f"/v1/entries?ids={w.private['id']}&ids={w.public['id']}&hops=1", w.eve, status=200)


async def _search(w: World) -> str:
    words = await w.text("GET", f"/v1/search?q={SECRET}&fresh=true", w.eve, status=200)
    filters = await w.text("GET", "/v1/search?hops=2&tags=attic", w.eve, status=200)
    return words + filters


async def _feed(w: World) -> str:
    return await w.text("GET", "/v1/feed?after=0", w.eve, status=200)


async def _inbox(w: World) -> str:
    return await w.text("GET", "/v1/inbox", w.eve, status=200)


async def _post_entry(w: World) -> str:
    links = [{"target": str(w.private["id"]), "link_type": "supports"}]
    body = {"entry_type": "finding", "performative": "inform", "content": "naming it", "links": links}
    return await w.text("POST", "/v1/entries", w.eve, body, status=404)


async def _post_batch(w: World) -> str:
    item = {"entry_type": "finding", "performative": "inform", "content": "x",
            "links": [{"target": w.private["record_hash"], "link_type": "supports"}]}  # fmt: skip
    return await w.text("POST", "/v1/entries/batch", w.eve, {"entries": [item]}, status=404)


async def _post_link(w: World) -> str:
    body = {"source": str(w.public["id"]), "target": str(w.private["id"]), "link_type": "supports"}
    return await w.text("POST", "/v1/links", w.eve, body, status=404)


async def _nlip(w: World) -> str:
    out = ""
    for op, args in (("read", {"ids": [str(w.private["id"])]}), ("search", {"q": SECRET, "fresh": True})):
        body = {"format": "structured", "subformat": "JSON", "content": {"op": op, "args": args}}
        out += await w.text("POST", "/nlip/", w.eve, body, status=200)
    text = {"format": "text", "subformat": "english", "content": SECRET}  # a text message is a search
    return out + await w.text("POST", "/nlip", w.eve, text, status=200)


async def _provenance(w: World) -> str:
    return await w.text("GET", f"/dashboard/api/entries/{w.private['id']}/provenance", w.eve, status=404)


async def _graph(w: World) -> str:
    hidden = await w.text("GET", f"/dashboard/api/entries/{w.private['id']}/graph.svg", w.eve, status=404)
    return hidden + await w.text("GET", f"/dashboard/api/entries/{w.public['id']}/graph.svg?hops=2", w.eve, status=200)


async def _agent_counts(w: World) -> str:
    """An agent's entry count counts its public entries only: the owner posted one public entry."""
    one = await w.text("GET", f"/v1/agents/{w.owner.agent_id}", w.eve, status=200)
    listed = await w.text("GET", "/dashboard/api/agents", w.eve, status=200)
    assert '"entry_count":1,' in one, one
    return one + listed


async def _messages(w: World) -> str:
    by_agent = await w.text("GET", f"/v1/agent-workflows/messages?agent={w.owner.agent_id}", w.eve, status=200)
    return by_agent + await w.text("GET", "/v1/agent-workflows/messages?order=arrival", w.eve, status=200)


async def _bus_projects(w: World) -> str:
    """A project's message count counts what the reader sees: the space's message is in project `zeppelin-bus`."""
    return await w.text("GET", "/dashboard/api/bus/projects", w.eve, status=200)


async def _candidates(w: World) -> str:
    """A candidate of the space (its evidence names the space's entry) is shown to its readers only."""
    listed = await w.text("GET", "/v1/default-mode/candidates", w.eve, status=200)
    assert w.candidate is not None
    one = await w.text("GET", f"/v1/default-mode/candidates/{w.candidate}", w.eve, status=404)
    draft = await w.text("GET", f"/v1/default-mode/candidates/{w.candidate}/draft", w.eve, status=404)
    return listed + one + draft


async def _consolidate(w: World) -> str:
    """Asked in no space, default mode reads the public federation only, even for a member (docs/spaces.md)."""
    return await w.text("POST", "/v1/default-mode/consolidate", w.owner, {"tags": ["attic"]})


async def _reflect(w: World) -> str:
    return await w.text("POST", "/v1/default-mode/reflect-session", w.owner, {"session_id": "s1"})


TASKS = "/v1/agent-workflows/tasks"


def _task_refs(w: World) -> list[str]:
    """Every way to name the space's task in a path: its id, its key, its key in the space."""
    assert w.task is not None
    return [str(w.task["id"]), w.task["key"], f"{w.task['key']}?space={w.space}"]


async def _task(w: World) -> str:
    return "".join([await w.text("GET", f"{TASKS}/{ref}", w.eve, status=404) for ref in _task_refs(w)])


async def _task_lists(w: World) -> str:
    """The ready set and the graph in every format: the public task only; a space filter is 404 `unknown_space`."""
    out = await w.text("GET", f"{TASKS}/ready", w.eve, status=200)
    out += await w.text("GET", f"{TASKS}/ready?space={w.space}", w.eve, status=404)
    for fmt in ("json", "dot", "mermaid"):
        out += await w.text("GET", f"/v1/agent-workflows/graph?format={fmt}", w.eve, status=200)
    out += await w.text("GET", f"/v1/agent-workflows/graph?space={w.space}", w.eve, status=404)
    assert "open-task" in out, out  # the probe is not blind: the public task shows
    return out


async def _task_board(w: World) -> str:
    out = await w.text("GET", "/dashboard/api/tasks", w.eve, status=200)
    out += await w.text("GET", "/dashboard/api/tasks/graph.svg", w.eve, status=200)
    assert "open-task" in out, out
    return out


async def _task_writes(w: World) -> str:
    """Lease, release and complete the space's task, and declare into the space: all 404, nothing of it shown."""
    assert w.task is not None
    out = ""
    for action in ("lease", "release", "complete"):
        for ref in _task_refs(w):
            path, _, query = ref.partition("?")
            out += await w.text("POST", f"{TASKS}/{path}/{action}" + (f"?{query}" if query else ""), w.eve, {}, 404)
    body = {"key": w.task["key"], "space": w.space, "depends_on": [w.task["key"]]}
    return out + await w.text("POST", TASKS, w.eve, body, status=404)


PROBES: dict[str, Probe] = {
    "GET /v1/entries/{ref}": _entry_by_hash_with_hops,
    "GET /v1/entries": _entries,
    "GET /v1/search": _search,
    "GET /v1/feed": _feed,
    "GET /v1/inbox": _inbox,
    "POST /v1/entries": _post_entry,
    "POST /v1/entries/batch": _post_batch,
    "POST /v1/links": _post_link,
    "POST /nlip/": _nlip,
    "POST /nlip": _nlip,
    "GET /dashboard/api/entries/{ref}/provenance": _provenance,
    "GET /dashboard/api/entries/{ref}/graph.svg": _graph,
    "GET /v1/agents/{agent_id}": _agent_counts,
    "GET /dashboard/api/agents": _agent_counts,
    "POST /v1/default-mode/consolidate": _consolidate,
    "POST /v1/default-mode/reflect-session": _reflect,
    "GET /v1/agent-workflows/messages": _messages,
    "GET /v1/default-mode/candidates": _candidates,
    "GET /v1/default-mode/candidates/{candidate_id}": _candidates,
    "GET /v1/default-mode/candidates/{candidate_id}/draft": _candidates,
    "GET /dashboard/api/bus/projects": _bus_projects,
    "GET /v1/agent-workflows/tasks/{task_id}": _task,
    "GET /v1/agent-workflows/tasks/ready": _task_lists,
    "GET /v1/agent-workflows/graph": _task_lists,
    "GET /dashboard/api/tasks": _task_board,
    "GET /dashboard/api/tasks/graph.svg": _task_board,
    "POST /v1/agent-workflows/tasks": _task_writes,
    "POST /v1/agent-workflows/tasks/{task_id}/lease": _task_writes,
    "POST /v1/agent-workflows/tasks/{task_id}/release": _task_writes,
    "POST /v1/agent-workflows/tasks/{task_id}/complete": _task_writes,
}

NO_ENTRY = "shows no entry, and names none"
PEER_TASKS = (
    "peers only: a peer names public tasks (a key holds no space) and a task event of a space is refused (too_new)"
)
DEFAULT_MODE = "acts on a candidate the caller may see (404 otherwise: tests/node/spaces/test_default_mode.py)"
SYNC = "a space's records are stored with scope local, which the sync feed, fetch, reconciliation and digest leave out"
OPERATOR = "the node's admin only: the operator reads every space it holds (docs/spaces.md, threat model)"
SPACES = "spaces' own routes: members only (tests/node/spaces/test_routes.py)"

# Every other route, with why no entry of a space can show through it.
NO_ENTRIES: dict[str, str] = {
    "GET /": NO_ENTRY, "GET /dashboard/static/{name}": NO_ENTRY, "GET /healthz": NO_ENTRY, "GET /v1/node": NO_ENTRY,
    "GET /openapi.json": NO_ENTRY, "HEAD /openapi.json": NO_ENTRY,
    "GET /metrics": OPERATOR, "HEAD /metrics": OPERATOR,
    "GET /dashboard/api/session": NO_ENTRY, "GET /dashboard/api/agents/{agent_id}/keys": NO_ENTRY,
    "GET /v1/agents": OPERATOR, "POST /v1/agents": OPERATOR, "POST /v1/agents/{agent_id}/api-key": OPERATOR,
    "POST /v1/agents/{agent_id}/recovery": OPERATOR, "POST /v1/agents/{agent_id}/revocation": OPERATOR,
    "POST /v1/agents/{agent_id}/signing-key": OPERATOR, "GET /v1/node/key": OPERATOR, "POST /v1/node/key": OPERATOR,
    "GET /v1/admin/void-records": OPERATOR, "POST /v1/admin/purges": OPERATOR, "GET /v1/admin/purges": OPERATOR,
    "GET /v1/peers": OPERATOR, "POST /v1/peers": OPERATOR,
    "GET /v1/push/status": OPERATOR, "POST /dashboard/api/peers/{node_id}/agreement": OPERATOR,
    "POST /v1/agents/{agent_id}/key-events": NO_ENTRY,
    "GET /v1/agents/{agent_id}/signed-versions": "an agent's own records only",
    "POST /v1/auth/challenge": NO_ENTRY, "POST /v1/auth/session": NO_ENTRY,
    "POST /v1/subscriptions": NO_ENTRY, "GET /v1/subscriptions": NO_ENTRY,
    "DELETE /v1/subscriptions/{sub_id}": NO_ENTRY,
    "POST /v1/inbox/ack": "acknowledges the caller's own notifications, created for readers only (GET /v1/inbox)",
    "POST /v1/push/endpoints": NO_ENTRY, "GET /v1/push/endpoints": NO_ENTRY,
    "DELETE /v1/push/endpoints/{endpoint_id}": NO_ENTRY, "POST /v1/push/endpoints/{endpoint_id}/test": NO_ENTRY,
    "POST /v1/trust/refresh": "trust is computed from public entries only (node/trust/store.py)",
    "POST /v1/redactions": "a target in a space the caller may not read is answered as one not seen here"
    " (tests/node/redaction/test_service.py)",
    "GET /v1/spaces": SPACES, "GET /v1/spaces/{space_id}": SPACES, "POST /v1/spaces": SPACES,
    "POST /v1/spaces/{space_id}/members": SPACES, "DELETE /v1/spaces/{space_id}/members/{agent_id}": SPACES,
    "POST /v1/spaces/{space_id}/hosts": SPACES, "DELETE /v1/spaces/{space_id}/hosts/{node_id}": SPACES,
    "GET /dashboard/api/spaces": SPACES, "GET /dashboard/api/spaces/{space_id}": SPACES,
    "GET /v1/sync/changes": SYNC, "POST /v1/sync/fetch": SYNC, "POST /v1/sync/bodies": SYNC,
    "POST /v1/sync/reconcile": SYNC,
    "GET /v1/sync/digest": SYNC,
    "POST /v1/agent-workflows/messages": "sends; a message names no space's entry (its addressee must read it)",
    "POST /v1/agent-workflows/peer/lease": PEER_TASKS, "POST /v1/agent-workflows/peer/task-event": PEER_TASKS,
    "POST /v1/default-mode/critic": DEFAULT_MODE, "POST /v1/default-mode/promote/{candidate_id}": DEFAULT_MODE,
    "POST /v1/default-mode/candidates/{candidate_id}/review": DEFAULT_MODE,
    "POST /v1/default-mode/simulate-future": DEFAULT_MODE, "POST /v1/default-mode/stakeholder-simulation": DEFAULT_MODE,
    "POST /v1/default-mode/incubate": DEFAULT_MODE,
}  # fmt: skip


def served_routes(client: TestClient) -> set[str]:
    return {f"{route.method} {route.resource.canonical}" for route in client.app.router.routes() if route.resource}


def test_every_route_is_listed_once() -> None:
    assert not set(PROBES) & set(NO_ENTRIES)


async def test_every_route_is_probed_or_says_why_it_shows_no_entry(client: TestClient) -> None:
    assert served_routes(client) == set(PROBES) | set(NO_ENTRIES)


def test_every_mcp_tool_reaches_the_node_through_listed_routes() -> None:
    tools = [*mcp_server.TOOLS, *workflow_tools.TOOLS, *default_mode_tools.TOOLS, *memory_tools.TOOLS, *push_tool.TOOLS]
    listed = set(PROBES) | set(NO_ENTRIES)
    for tool in tools:
        for route in tool.rest:
            assert route in listed, (tool.name, route)


async def test_no_route_shows_a_space_entry_to_a_non_member(
    client: TestClient, node: Node, make_agent: MakeAgent
) -> None:
    owner, eve = await make_agent("owner"), await make_agent("eve")
    space = await space_with(client, owner)
    await call(client, "POST", "/v1/subscriptions", eve, 201, {"tags": ["attic"]})
    public = await post(client, owner, "the attic has a window", tags=["attic", "session:s1"])
    links = [{"target": public["record_hash"], "link_type": "supports"}]
    private = await post(client, owner, f"the {SECRET} is in the attic", space=space, tags=["attic", "session:s1"],
                         directed_to=[eve.agent_id], links=links)  # fmt: skip
    message = {"message_type": "note", "body": f"the {SECRET} plan", "project": f"{SECRET}-bus", "space": space}
    await call(client, "POST", "/v1/agent-workflows/messages", owner, 201, message)
    world = World(client, owner, eve, space, private, public)
    task = {"key": f"{SECRET}-task", "title": f"the {SECRET} job", "space": space}
    await call(client, "POST", "/v1/agent-workflows/tasks", owner, 201, task)
    world.task = await call(client, "POST", f"/v1/agent-workflows/tasks/{SECRET}-task/lease?space={space}", owner, 201)
    await call(client, "POST", "/v1/agent-workflows/tasks", owner, 201, {"key": f"{SECRET}-ready", "space": space})
    await call(client, "POST", "/v1/agent-workflows/tasks", eve, 201, {"key": "open-task"})
    made = await call(client, "POST", "/v1/default-mode/consolidate", owner, 201, {"space": space, "tags": ["attic"]})
    assert private["record_hash"] in made["evidence_refs"]
    world.candidate = made["id"]
    assert world.leaks(await world.text("GET", f"/v1/entries/{private['id']}", owner, status=200))  # the probe sees
    for route, probe in PROBES.items():
        answer = await probe(world)
        assert not world.leaks(answer), (route, answer[:500])
