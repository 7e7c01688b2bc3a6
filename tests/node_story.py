"""A node written through its REST API with one of everything: what `bbs migrate-store` moves either way
(tests/node/ops/test_migrate_store.py, test_migrate_back.py)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp.test_utils import TestClient

from node.app import create_app
from node.ops.datadir import initialise
from node.service import Node
from scenarios.fednet import free_port
from tests.conftest import AgentCreds, FakeClock
from tests.ops.test_lifecycle import wait_healthy

WF = "/v1/agent-workflows"
REPO = Path(__file__).parents[1]
BBS = [sys.executable, "-m", "node.cli"]


async def call(client: TestClient, method: str, path: str, who: AgentCreds, status: int, body: Any = None) -> Any:
    resp = await client.request(method, path, json=body, headers=who.headers)
    assert resp.status == status, await resp.text()
    return await resp.json()


async def write_story(
    root: Path, aiohttp_client: Callable[..., Awaitable[TestClient]], store_url: str | None = None
) -> dict[str, Any]:
    """A node folder holding one of everything, written through the REST API of the real node, then closed: two
    agents, a subscription and its notifications, entries, a link, a message, tasks and a lease, a space with a
    member's post, a redaction's tombstone, a key event. On SQLite, or on the PostgreSQL database `store_url`."""
    token = initialise(root, store_url)
    assert token is not None
    node = Node(root, clock=FakeClock())
    node.open()
    try:
        client = await aiohttp_client(create_app(node))
        made = [await node.agents.create(n, n.title()) for n in ("alice", "bob")]
        alice, bob = (AgentCreds(m.name, m.agent_id, m.api_key) for m in made)
        await call(client, "POST", "/v1/subscriptions", bob, 201, {"tags": ["news"]})

        def entry(content: str, **fields: Any) -> dict[str, Any]:
            return {"entry_type": "finding", "performative": "inform", "content": content, **fields}

        kept = await call(client, "POST", "/v1/entries", alice, 201, entry("the zebra grazes", tags=["news"]))
        secret = await call(
            client, "POST", "/v1/entries", alice, 201, entry("a leaked key", directed_to=[bob.agent_id])
        )
        answer = await call(client, "POST", "/v1/entries", bob, 201, entry("noted"))
        link = {"source": answer["record_hash"], "target": kept["record_hash"], "link_type": "supports"}
        await call(client, "POST", "/v1/links", bob, 201, link)
        message = {"message_type": "status", "body": "on it", "to_agent": bob.agent_id}
        await call(client, "POST", f"{WF}/messages", alice, 201, message)
        await call(client, "POST", f"{WF}/tasks", alice, 201, {"key": "first", "title": "First"})
        await call(client, "POST", f"{WF}/tasks", alice, 201, {"key": "then", "title": "Then", "depends_on": ["first"]})
        await call(client, "POST", f"{WF}/tasks/first/lease", bob, 201)
        space = (await call(client, "POST", "/v1/spaces", alice, 201, {"name": "family"}))["space_id"]
        member = {"agent_id": bob.agent_id, "role": "writer"}
        await call(client, "POST", f"/v1/spaces/{space}/members", alice, 201, member)
        inside = await call(client, "POST", "/v1/entries", bob, 201, entry("the attic key", space=space))
        await call(client, "POST", "/v1/redactions", alice, 201, {"target": secret["record_hash"], "reason": "leak"})
        assert (await call(client, "GET", "/v1/inbox", bob, 200))["notifications"]
        admin = AgentCreds("admin", "", token)
        await call(client, "POST", f"/v1/agents/{alice.agent_id}/signing-key", admin, 201)  # a key event
        await client.close()  # the app's background work stops before its database closes
    finally:
        node.close()
    return {"root": root, "alice": alice, "bob": bob, "kept": kept, "secret": secret, "inside": inside, "space": space}


async def serve_story(root: Path, story: dict[str, Any], content: str) -> dict[str, Any]:
    """Serve `root` with a real `bbs serve`, read the story's entries through it, post `content` as alice; the
    answers by name (node, kept, redacted, inside, tasks, found_by_word, found), the server stopped."""
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    proc = subprocess.Popen(
        [*BBS, "serve", "--data", str(root), "--port", str(port)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO,
    )
    alice, bob = story["alice"], story["bob"]
    answers: dict[str, Any] = {}
    try:
        await wait_healthy(base, proc)
        async with aiohttp.ClientSession() as session:

            async def get(path: str, who: AgentCreds) -> Any:
                async with session.get(base + path, headers=who.headers) as resp:
                    assert resp.status == 200, await resp.text()
                    return await resp.json()

            async with session.get(base + "/v1/node") as resp:
                answers["node"] = await resp.json()
            answers["kept"] = await get(f"/v1/entries/{story['kept']['record_hash']}", bob)
            answers["redacted"] = await get(f"/v1/entries/{story['secret']['record_hash']}", bob)
            answers["inside"] = await get(f"/v1/entries/{story['inside']['record_hash']}", alice)
            answers["tasks"] = await get(f"{WF}/tasks/ready", alice)
            answers["found_by_word"] = await get("/v1/search?q=zebra&fresh=true", bob)  # the folder's own index
            body = {"entry_type": "finding", "performative": "inform", "content": content}
            async with session.post(base + "/v1/entries", json=body, headers=alice.headers) as resp:
                assert resp.status == 201, await resp.text()
                posted = await resp.json()
            answers["found"] = await get(f"/v1/entries/{posted['record_hash']}", alice)
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    return answers


def assert_story_served(answers: dict[str, Any], story: dict[str, Any], node_id: str, next_seq: int) -> None:
    """What `serve_story` read is the story as written: the same node, each entry, the redaction's tombstone, the
    space's entry, the leased task, the word search; the new post took `next_seq`."""
    assert answers["node"]["node_id"] == node_id
    assert [e["content"] for e in answers["kept"]["entries"]] == ["the zebra grazes"]
    redacted = answers["redacted"]
    assert redacted["entries"] == [] and [t["redacted"] for t in redacted["redacted"]] == [True]
    assert [e["space"] for e in answers["inside"]["entries"]] == [story["space"]]
    assert answers["tasks"]["tasks"] == []  # "first" is leased, "then" waits on it
    assert [hit["record_hash"] for hit in answers["found_by_word"]["entries"]] == [story["kept"]["record_hash"]]
    assert answers["found"]["entries"][0]["id"] == next_seq
