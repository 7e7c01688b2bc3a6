"""Every route that names an agent takes its did or its local name, resolved by node/agents/refs.py; an unknown
name is a 404 `agent_not_found` naming the field, and nothing is stored."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any

import pytest
from aiohttp.test_utils import TestClient

from node.agents import refs as agent_refs
from node.errors import InvalidInput, NotFound
from node.service import Node
from tests.conftest import AgentCreds
from tests.node.api_helpers import count, get_json, post

MakeAgent = Callable[[str], Awaitable[AgentCreds]]
WF = "/v1/agent-workflows"
REMOTE = "did:key:z6MkhaXgBZDvotDkL5257faiztiGiC2QtKLGpbnnEGta2doK"  # an agent of another node: taken as given


async def test_resolve_names_and_dids(node: Node, make_agent: MakeAgent) -> None:
    alice = await make_agent("alice")

    assert await node.db.read(lambda c: agent_refs.resolve(c, "alice", "$.x")) == alice.agent_id
    assert await node.db.read(lambda c: agent_refs.resolve(c, alice.agent_id, "$.x")) == alice.agent_id
    assert await node.db.read(lambda c: agent_refs.resolve(c, REMOTE, "$.x")) == REMOTE
    assert await node.db.read(lambda c: agent_refs.resolve_all(c, ["alice", REMOTE], "$.x")) == [alice.agent_id, REMOTE]
    assert await node.db.read(lambda c: agent_refs.resolve_optional(c, None, "$.x")) is None
    with pytest.raises(NotFound) as missing:
        await node.db.read(lambda c: agent_refs.resolve_all(c, ["alice", "nobody"], "$.to"))
    assert (missing.value.code, missing.value.field) == ("agent_not_found", "$.to[1]")
    for bad in ("Alice", "did:key:zshort", "did:web:example.com"):
        with pytest.raises(InvalidInput) as refused:
            await node.db.read(partial(agent_refs.resolve, ref=bad, field="$.x"))
        assert refused.value.code == "invalid_agent_ref"
    assert agent_refs.all_dids([REMOTE]) and not agent_refs.all_dids([REMOTE, "alice"])


async def _call(client: TestClient, method: str, path: str, who: Any, body: Any = None, params: Any = None) -> Any:
    resp = await client.request(method, path, json=body, params=params, headers=who.headers)
    return resp.status, await resp.json(content_type=None)


async def test_names_work_wherever_an_agent_is_named(client: TestClient, make_agent: MakeAgent) -> None:
    alice, bob = await make_agent("alice"), await make_agent("bob")
    # the bus: to_agent, from_agent and the agent filter
    message = {"message_type": "chat", "body": "hi", "to_agent": "bob", "from_agent": "alice"}
    status, sent = await _call(client, "POST", f"{WF}/messages", alice, message)
    assert status == 201 and sent["to_agent"] == bob.agent_id and sent["from_agent"] == alice.agent_id
    by_name = await get_json(client, f"{WF}/messages", bob, params={"agent": "bob"})
    by_did = await get_json(client, f"{WF}/messages", bob, params={"agent": bob.agent_id})
    assert by_name == by_did and [m["id"] for m in by_name["messages"]] == [sent["id"]]
    # entries: directed_to; search: author; subscriptions: authors
    entry = await post(client, alice, content="the boiler needs a service", directed_to=["bob", REMOTE])
    assert entry["directed_to"] == sorted([bob.agent_id, REMOTE])
    found = await get_json(client, "/v1/search", bob, params={"author": "alice"})
    assert [e["id"] for e in found["entries"]] == [entry["id"]]
    status, sub = await _call(client, "POST", "/v1/subscriptions", bob, {"authors": ["alice"]})
    assert status == 201 and sub["authors"] == [alice.agent_id]
    # an agent's document by name
    assert (await get_json(client, "/v1/agents/alice", bob))["agent_id"] == alice.agent_id
    # a lease held by name
    status, _ = await _call(client, "POST", f"{WF}/tasks", alice, {"key": "svc", "title": "service the boiler"})
    assert status == 201
    status, leased = await _call(client, "POST", f"{WF}/tasks/svc/lease", alice, {"agent": "alice"})
    assert status == 201 and leased["lease"]["holder"] == alice.agent_id, leased
    status, refused = await _call(client, "POST", f"{WF}/tasks/svc/lease", bob, {"agent": "alice"})
    assert (status, refused["code"], refused["field"]) == (403, "lease_for_other", "$.agent")


@pytest.mark.parametrize(
    ("method", "path", "body", "params", "field"),
    [
        ("POST", f"{WF}/messages", {"message_type": "chat", "to_agent": "nobody"}, None, "$.to_agent"),
        ("POST", f"{WF}/messages", {"message_type": "chat", "from_agent": "nobody"}, None, "$.from_agent"),
        ("GET", f"{WF}/messages", None, {"agent": "nobody"}, "$.agent"),
        ("POST", "/v1/entries", {"entry_type": "finding", "performative": "inform", "content": "x",
                                 "directed_to": ["nobody"]}, None, "$.directed_to[0]"),
        ("POST", "/v1/entries/batch", {"entries": [{"entry_type": "finding", "performative": "inform",
                                                    "content": "x", "directed_to": ["alice", "nobody"]}]},
         None, "$.entries[0].directed_to[1]"),
        ("GET", "/v1/search", None, {"author": "nobody"}, "$.author[0]"),
        ("POST", "/v1/subscriptions", {"authors": ["nobody"]}, None, "$.authors[0]"),
        ("GET", "/v1/agents/nobody", None, None, "agent_id"),
        ("POST", f"{WF}/tasks/t1/lease", {"agent": "nobody"}, None, "$.agent"),
    ],
)  # fmt: skip
async def test_an_unknown_name_is_a_404_naming_the_field(
    client: TestClient, make_agent: MakeAgent, node: Node, method: str, path: str, body: Any, params: Any, field: str
) -> None:
    alice = await make_agent("alice")
    status, _ = await _call(client, "POST", f"{WF}/tasks", alice, {"key": "t1", "title": "a task"})
    assert status == 201
    before = await count(node)
    status, problem = await _call(client, method, path, alice, body, params)
    assert (status, problem["code"], problem["field"]) == (404, "agent_not_found", field), problem
    assert await count(node) == before
