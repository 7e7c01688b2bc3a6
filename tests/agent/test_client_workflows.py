"""The bus and the task graph through the client: an agent that holds its own key signs its messages and task
events; the node only verifies them, grants leases, and stores the records byte for byte."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import pytest
from aiohttp.test_utils import TestClient
from mcp import Client as MCPClient

from agent.client import BBSClientError, Client
from agent.mcp_server import build_server
from identity import canonical, keys, records
from node.agents import service as agents
from node.agents.portable import import_identity
from node.service import Node
from tests.conftest import AgentCreds
from tests.node.api_helpers import entry_record
from wire.workflows import DeclareTask, FinishIn, LeaseIn, MessageQuery, PostMessage

Factory = Callable[[str], Awaitable[AgentCreds]]


def base(client: TestClient) -> str:
    return str(client.make_url("")).rstrip("/")


async def self_keyed(node: Node, name: str, *, keep_key: bool = False) -> tuple[keys.SigningKey, str]:
    """Register a fresh identity; unless keep_key, the node never holds its private key. Returns (key, api key)."""
    key = keys.SigningKey.generate()
    created = await import_identity(
        node, name, key, agents.identity_record(key, name.title(), "", node.node_id), keep_key=keep_key
    )
    assert (await node.db.read(lambda c: agents.signing_key(c, key.did)) is None) is not keep_key
    return key, created.api_key


async def stored_records(node: Node, author: str, kind: str | None = None) -> list[dict[str, Any]]:
    """The stored records of `author` (of one kind), oldest first, each checked as a peer would."""
    rows = await node.db.read(
        lambda c: c.execute(
            "SELECT body FROM records WHERE author_id = ? AND (CAST(? AS text) IS NULL OR kind = ?) ORDER BY seq",
            (author, kind, kind),
        ).fetchall()
    )
    out = []
    for (body,) in rows:
        record = json.loads(body)
        _, decoded = records.check(record)  # verifies with nothing but the record itself
        assert decoded.author_id == author
        out.append(record)
    return out


async def test_self_keyed_client_sends_declares_leases_and_completes(
    client: TestClient, node: Node, make_agent: Factory
) -> None:
    key, _ = await self_keyed(node, "roamer")
    bob = await make_agent("bob")
    async with Client(base(client), signing_key=key) as c:  # no API key: a key-proof session
        sent = await c.send_message(
            PostMessage("plan", "two steps", to_agent=bob.agent_id, payload={"n": 2}, project="p1"),
            idempotency_key="plan-1",
        )
        again = await c.send_message(PostMessage("plan", "two steps", to_agent=bob.agent_id), idempotency_key="plan-1")
        assert again.id == sent.id and sent.from_agent == key.did and sent.to_agent == bob.agent_id
        page = await c.messages(MessageQuery(project="p1"))
        assert [m.record_hash for m in page.messages] == [sent.record_hash]

        publish = await c.declare_task(DeclareTask("publish", "Publish", depends_on=["review", "draft", "draft"]))
        assert publish.depends_on == ["draft", "review"] and publish.waiting_on == ["draft", "review"]
        await c.declare_task(DeclareTask("draft", "Draft", checkpoint={"outline": True}))
        await c.declare_task(DeclareTask("review", "Review"))
        unchanged = await c.declare_task(DeclareTask("draft", "Draft", checkpoint={"outline": True}))
        assert unchanged.title == "Draft"  # nothing changed: nothing appended (counted below)
        assert [t.key for t in (await c.ready_tasks()).tasks] == ["draft", "review"]

        leased = await c.lease_task("draft", LeaseIn(seconds=60))
        assert leased.lease is not None and leased.lease.holder == key.did
        done = await c.complete_task("draft", FinishIn(checkpoint={"words": 900}, lease=leased.lease.lease_id))
        assert done.status == "done" and done.lease is None and done.checkpoint == {"outline": True, "words": 900}
        assert await c.complete_task("draft") == done  # already done, nothing held: nothing appended

        review = await c.lease_task("review")
        assert review.lease is not None
        stale = await _error(c.release_task("review", FinishIn(lease=leased.lease.lease_id)))
        assert stale == (409, "stale_lease", "$.lease")  # the fencing token of another lease
        assert await _error(c.release_task("review")) == (422, "lease_required", "$.lease")
        released = await c.release_task("review", FinishIn(checkpoint={"note": "later"}, lease=review.lease.lease_id))
        assert released.lease is None and released.status == "pending"
        await c.complete_task("review")
        assert [t.key for t in (await c.ready_tasks()).tasks] == ["publish"]
        graph = await c.task_graph()
        assert {(e.from_key, e.to_key) for e in graph.edges} == {("draft", "publish"), ("review", "publish")}

    events = await stored_records(node, key.did, "task_event")
    summary = [(r["event"], r["task_key"], sorted(set(r) - {"signature", "created_at"})) for r in events]
    common = ["author_id", "event", "kind", "schema_version", "task_key"]
    assert summary == [
        ("declare", "publish", sorted([*common, "node_id", "title", "depends_on"])),
        ("declare", "draft", sorted([*common, "node_id", "title", "checkpoint"])),
        ("declare", "review", sorted([*common, "node_id", "title"])),
        ("complete", "draft", sorted([*common, "checkpoint", "lease"])),
        ("release", "review", sorted([*common, "checkpoint", "lease"])),
        ("complete", "review", common),
    ]
    grants = await node.db.read(
        lambda c: [r[0] for r in c.execute("SELECT hash FROM task_events WHERE event = 'lease' ORDER BY seq")]
    )
    assert [events[3]["lease"], events[4]["lease"]] == grants  # each ends the grant the node signed
    assert all(e["node_id"] == node.node_id for e in events[:3])
    messages = await stored_records(node, key.did, "message")
    assert len(messages) == 1 and messages[0]["tags"] == sorted([key.did, bob.agent_id])
    assert await node.db.read(lambda c: agents.signing_key(c, key.did)) is None  # still: the client signed


def _comparable(record: dict[str, Any], **same: Any) -> bytes:
    """Canonical bytes without the signature, with the fields that differ by design set to given values."""
    return canonical.canonical_bytes({k: v for k, v in {**record, **same}.items() if k != "signature"})


async def test_a_record_the_client_signs_is_the_record_the_node_builds(client: TestClient, node: Node) -> None:
    """The same agent and input, once signed by the node (the key it keeps), once by the client (the same key):
    the records differ only in created_at and the ids that name different tasks or leases."""
    key, api_key = await self_keyed(node, "twin", keep_key=True)
    peer, _ = await self_keyed(node, "peer")
    async with Client(base(client), api_key=api_key) as by_node, Client(base(client), signing_key=key) as by_client:
        assert not by_node.signs_records and by_client.signs_records
        message = PostMessage("note", "Cafe\u0301 ", to_agent=peer.did, payload={"x": 0.1, "é": [1]}, project="p")
        await by_node.send_message(message)
        await by_client.send_message(message)
        for who, name in ((by_node, "n"), (by_client, "c")):
            first = DeclareTask(name, "Title\u0301", depends_on=["z", "a", "z"], status="pending", checkpoint={"a": 1})
            await who.declare_task(first)
            update = DeclareTask(name, "Title\u0301", depends_on=[], status="processing", checkpoint={"a": None})
            await who.declare_task(update)
            token = (await who.lease_task(name)).lease
            assert token is not None
            await who.release_task(name, FinishIn(checkpoint={"b": 2, "c": {"d": 1.5}}, lease=token.lease_id))
            token = (await who.lease_task(name)).lease
            assert token is not None
            await who.complete_task(name, FinishIn(checkpoint={"c": None}, lease=token.lease_id))
    mine = await stored_records(node, key.did)
    messages = [r for r in mine if r["kind"] == "message"]
    assert len(messages) == 2 and _comparable(messages[0], created_at="t") == _comparable(messages[1], created_at="t")
    assert messages[1]["body"] == "Caf\u00e9 "  # NFC on the client as on the node
    events = {k: [r for r in mine if r.get("task_key") == k] for k in ("n", "c")}
    assert [r["event"] for r in events["c"]] == ["declare", "declare", "release", "complete"]
    for node_built, client_built in zip(events["n"], events["c"], strict=True):
        same = {"created_at": "t", "task_key": "k", "lease": "l"} if "lease" in node_built else {}
        same = same or {"created_at": "t", "task_key": "k"}
        assert _comparable(node_built, **same) == _comparable(client_built, **same), (node_built, client_built)
    for task_events in events.values():  # each event sorts after the one before it, as the fold needs
        times = [canonical.parse_created_at(r["created_at"]) for r in task_events]
        assert times == sorted(times) and len(set(times)) == len(times)


BAD_DECLARATIONS: list[tuple[dict[str, Any], int, str, str]] = [
    ({"key": "123"}, 422, "validation_error", "$.key"),
    ({"key": "k", "title": ""}, 422, "validation_error", "$.title"),
    ({"key": "k", "depends_on": ["ok", "not ok"]}, 422, "validation_error", "$.depends_on[1]"),
    ({"key": "k", "status": "finished"}, 422, "validation_error", "$.status"),
    ({"key": "k", "checkpoint": {"blob": "x" * 70_000}}, 422, "checkpoint_too_large", "$.checkpoint"),
    ({"key": "k", "depends_on": ["k"]}, 409, "dependency_cycle", "$.depends_on"),
    ({"key": "b", "depends_on": ["a"]}, 409, "dependency_cycle", "$.depends_on"),  # a already depends on b
    # msgspec would encode NaN as null, which in a merge patch deletes the key: refused instead
    ({"key": "k", "checkpoint": {"a": float("nan")}}, 422, "validation_error", "$.checkpoint.a"),
]
BAD_MESSAGES: list[tuple[dict[str, Any], int, str, str]] = [
    ({"message_type": ""}, 422, "validation_error", "$.message_type"),
    ({"message_type": "x", "to_agent": "Bob"}, 422, "validation_error", "$.to_agent"),
    ({"message_type": "x", "to_agent": "nobody"}, 404, "agent_not_found", "$.to_agent"),
    ({"message_type": "x", "payload": {"blob": "x" * 70_000}}, 422, "validation_error", "$.payload"),
    ({"message_type": "x", "payload": {"blob": "x" * 300_000}}, 422, "validation_error", "$.payload"),
    ({"message_type": "x", "dependency_ids": [""]}, 422, "validation_error", "$.dependency_ids[0]"),
    ({"message_type": "x", "payload": {"a": [1, float("inf")]}}, 422, "validation_error", "$.payload.a[1]"),
]


async def _error(call: Awaitable[Any]) -> tuple[int, str, str | None]:
    with pytest.raises(BBSClientError) as err:
        await call
    return err.value.status, err.value.code, err.value.field


@pytest.mark.parametrize(("body", "status", "code", "field"), BAD_DECLARATIONS)
async def test_bad_declarations_fail_alike_whoever_signs(
    client: TestClient, node: Node, make_agent: Factory, body: dict[str, Any], status: int, code: str, field: str
) -> None:
    key, _ = await self_keyed(node, "roamer")
    alice = await make_agent("alice")
    async with Client(base(client), signing_key=key) as signer, Client(base(client), api_key=alice.api_key) as kept:
        await kept.declare_task(DeclareTask("a", depends_on=["b"]))
        before = await node.db.read(lambda c: c.execute("SELECT count(*) FROM records").fetchone()[0])
        task = DeclareTask(**body)  # built in code, unchecked: the client validates it before sending
        for who in (signer, kept):
            assert await _error(who.declare_task(task)) == (status, code, field)
    assert await node.db.read(lambda c: c.execute("SELECT count(*) FROM records").fetchone()[0]) == before


@pytest.mark.parametrize(("body", "status", "code", "field"), BAD_MESSAGES)
async def test_bad_messages_fail_alike_whoever_signs(
    client: TestClient, node: Node, make_agent: Factory, body: dict[str, Any], status: int, code: str, field: str
) -> None:
    key, _ = await self_keyed(node, "roamer")
    alice = await make_agent("alice")
    async with Client(base(client), signing_key=key) as signer, Client(base(client), api_key=alice.api_key) as kept:
        before = await node.db.read(lambda c: c.execute("SELECT count(*) FROM records").fetchone()[0])
        for who in (signer, kept):
            assert await _error(who.send_message(PostMessage(**body))) == (status, code, field)
    assert await node.db.read(lambda c: c.execute("SELECT count(*) FROM records").fetchone()[0]) == before


async def test_lease_errors_come_from_the_node_whoever_signs(
    client: TestClient, node: Node, make_agent: Factory
) -> None:
    key, _ = await self_keyed(node, "roamer")
    alice, holder = await make_agent("alice"), await make_agent("holder")
    async with (
        Client(base(client), signing_key=key) as signer,
        Client(base(client), api_key=alice.api_key) as kept,
        Client(base(client), api_key=holder.api_key) as other,
    ):
        await other.declare_task(DeclareTask("job"))
        before = await node.db.read(lambda c: c.execute("SELECT count(*) FROM records").fetchone()[0])
        for who in (signer, kept):
            assert await _error(who.release_task("job")) == (409, "lease_not_held", "task_id")
            assert await _error(who.complete_task("missing")) == (404, "task_not_found", "task_id")
            assert await _error(who.complete_task("a b")) == (422, "invalid_task_ref", "task_id")
            assert await _error(who.complete_task("job", FinishIn(checkpoint={"x": [1] * 40_000}))) == (
                422,
                "checkpoint_too_large",
                "$.checkpoint",
            )
        assert await node.db.read(lambda c: c.execute("SELECT count(*) FROM records").fetchone()[0]) == before
        await other.lease_task("job")
        for who in (signer, kept):
            assert await _error(who.complete_task("job")) == (409, "lease_held", "task_id")
            assert await _error(who.lease_task("job")) == (409, "lease_held", "task_id")
            assert await _error(who.send_message(PostMessage("x", from_agent=holder.agent_id))) == (
                403,
                "forbidden",
                "$.from_agent",
            )


# ---- the same through the MCP tools (the real SDK client, the server in process) --------------------------


def _ok(result: Any) -> Any:
    text = "".join(block.text for block in result.content)
    assert not result.is_error, text
    return json.loads(text)


def _err(result: Any) -> str:
    assert result.is_error
    return "".join(block.text for block in result.content)


@asynccontextmanager
async def keyed_mcp(client: TestClient, key: keys.SigningKey) -> AsyncIterator[Any]:
    """An MCP session whose tools use a Client holding the agent's key, as `bbs mcp --identity FILE` does."""
    async with Client(base(client), signing_key=key) as rest:

        async def provider() -> Client:
            return rest

        async with MCPClient(build_server(provider)) as session:
            yield session


async def test_mcp_workflow_tools_sign_on_the_agent_side(client: TestClient, node: Node, make_agent: Factory) -> None:
    key, _ = await self_keyed(node, "roamer")
    bob = await make_agent("bob")
    async with keyed_mcp(client, key) as session:
        sent = _ok(
            await session.call_tool("message", {"action": "send", "message_type": "hello", "to_agent": bob.agent_id})
        )
        assert sent["from_agent"] == key.did
        assert (
            _ok(await session.call_tool("message", {"action": "read", "agent": bob.agent_id}))["messages"][0]["id"]
            == sent["id"]
        )
        _ok(
            await session.call_tool(
                "task", {"action": "declare", "task": "publish", "title": "Publish", "depends_on": ["draft"]}
            )
        )
        _ok(await session.call_tool("task", {"action": "declare", "task": "draft", "title": "Draft"}))
        assert [t["key"] for t in _ok(await session.call_tool("task", {"action": "ready"}))["tasks"]] == ["draft"]
        leased = _ok(await session.call_tool("task", {"action": "lease", "task": "draft", "seconds": 60}))
        assert leased["lease"]["holder"] == key.did
        token = leased["lease"]["lease_id"]
        assert "lease_required" in _err(await session.call_tool("task", {"action": "release", "task": "draft"}))
        release = {"action": "release", "task": "draft", "lease": token}
        released = _ok(await session.call_tool("task", release))
        assert released["lease"] is None
        assert "lease_not_held" in _err(await session.call_tool("task", release))
        # with an idempotency_key, the retry of a signed release is answered with the task, not lease_not_held
        token = _ok(await session.call_tool("task", {"action": "lease", "task": "draft"}))["lease"]["lease_id"]
        keyed = {"action": "release", "task": "draft", "lease": token, "idempotency_key": "rel-1"}
        assert _ok(await session.call_tool("task", keyed))["lease"] is None
        assert _ok(await session.call_tool("task", keyed))["lease"] is None
        token = _ok(await session.call_tool("task", {"action": "lease", "task": "draft"}))["lease"]["lease_id"]
        finish = {"action": "complete", "task": "draft", "checkpoint": {"words": 900}, "lease": token}
        done = _ok(await session.call_tool("task", finish))
        assert done["status"] == "done" and done["checkpoint"] == {"words": 900}
        assert [t["key"] for t in _ok(await session.call_tool("task", {"action": "ready"}))["tasks"]] == ["publish"]
        graph = _ok(await session.call_tool("task", {"action": "graph"}))
        assert [(e["from_key"], e["to_key"]) for e in graph["edges"]] == [("draft", "publish")]
        cycle = _err(await session.call_tool("task", {"action": "declare", "task": "draft", "depends_on": ["publish"]}))
        assert "dependency_cycle" in cycle and "depends_on" in cycle
        assert "validation_error" in _err(await session.call_tool("task", {"action": "declare", "task": "has space"}))

    events = await stored_records(node, key.did, "task_event")
    assert [(e["event"], e["task_key"]) for e in events] == [
        ("declare", "publish"),
        ("declare", "draft"),
        ("release", "draft"),
        ("release", "draft"),  # the keyed release, once for its two calls
        ("complete", "draft"),
    ]
    assert len(await stored_records(node, key.did, "message")) == 1


async def test_a_retried_signed_completion_is_applied_once(client: TestClient, node: Node) -> None:
    """The client resends the same signed record when a response is lost; the node applies it once."""
    key, _ = await self_keyed(node, "roamer")
    async with Client(base(client), signing_key=key) as c:
        await c.declare_task(DeclareTask("job"))
        leased = await c.lease_task("job")
        assert leased.lease is not None
        record = records.sign(
            {
                "kind": "task_event",
                "schema_version": canonical.SCHEMA_VERSION,
                "author_id": key.did,
                "created_at": canonical.now_created_at(),
                "event": "complete",
                "task_key": "job",
                "lease": leased.lease.lease_id,
            },
            key,
        )
        path = "/v1/agent-workflows/tasks/job/complete"
        first = await c.call("POST", path, dict, json={"record": record})
        again = await c.call("POST", path, dict, json={"record": record})
        assert first == again and first["status"] == "done"
        assert (await c.complete_task("job", FinishIn(checkpoint={"late": 1}))).checkpoint == {
            "late": 1
        }  # a new record is still applied
    assert [e["event"] for e in await stored_records(node, key.did, "task_event")] == [
        "declare",
        "complete",
        "complete",
    ]


@pytest.mark.parametrize("self_signing", [False, True])
async def test_a_message_structs_idempotency_key_makes_a_retry(
    client: TestClient, node: Node, make_agent: Factory, self_signing: bool
) -> None:
    if self_signing:
        key, _ = await self_keyed(node, "roamer")
        opened = Client(base(client), signing_key=key)
    else:
        opened = Client(base(client), api_key=(await make_agent("alice")).api_key)
    async with opened as c:
        msg = PostMessage(message_type="note", body="once", idempotency_key="note-1")
        first = await c.send_message(msg)
        again = await c.send_message(msg)
    assert again.id == first.id
    assert await node.db.read(lambda conn: conn.execute("SELECT count(*) FROM messages").fetchone()[0]) == 1


async def test_call_keeps_the_field_names_of_the_body_it_was_given(client: TestClient, node: Node) -> None:
    """Only records the client built from a Struct have their fields renamed; a body passed to `call` is the
    caller's own, so the node's `$.record.created_at` stays as it is."""
    key, _ = await self_keyed(node, "roamer")
    ahead = entry_record(key, "from the future", created_ms=node.now_ms() + 3_600_000)
    async with Client(base(client), signing_key=key) as c:
        with pytest.raises(BBSClientError) as err:
            await c.call("POST", "/v1/entries", dict, json={"record": ahead})
    assert (err.value.code, err.value.field) == ("clock_skew", "$.record.created_at")


async def test_a_self_keyed_client_works_a_task_of_a_space(client: TestClient, node: Node, make_agent: Factory) -> None:
    """A client holding its key signs its declaration and completion of a space's task with the space (format v3:
    inside the signing bytes); the same key in public is another task."""
    key, _ = await self_keyed(node, "roamer")
    owner = await make_agent("owner")
    async with Client(base(client), api_key=owner.api_key) as by_owner:
        space = (await by_owner.call("POST", "/v1/spaces", dict, json={"name": "studio"}))["space_id"]
        member = {"agent_id": key.did, "role": "writer"}
        await by_owner.call("POST", f"/v1/spaces/{space}/members", dict, json=member)
    async with Client(base(client), signing_key=key) as c:
        inside = await c.declare_task(DeclareTask("mix", "Mix the track", space=space))
        public = await c.declare_task(DeclareTask("mix", "A public mix"))
        assert inside.space == space and public.space is None and inside.id != public.id
        assert (await c.declare_task(DeclareTask("mix", "Mix the track", space=space))).id == inside.id  # unchanged
        leased = await c.lease_task("mix", LeaseIn(seconds=60), space=space)
        assert leased.lease is not None and leased.id == inside.id
        done = await c.complete_task("mix", FinishIn(lease=leased.lease.lease_id), space=space)
        assert (done.status, done.space) == ("done", space)
        assert (await c.get_task("mix")).status == "pending"  # the public one
    signed = await node.db.read(
        lambda c: c.execute(
            "SELECT body FROM records WHERE author_id = ? AND kind = 'task_event' ORDER BY seq", (key.did,)
        ).fetchall()
    )
    spaces = [json.loads(body).get("space") for (body,) in signed]
    assert spaces == [space, None, space]  # the declaration in the space, the public one, the completion
