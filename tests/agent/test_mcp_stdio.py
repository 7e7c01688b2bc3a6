"""The MCP server over stdio: the real SDK client against a real `bbs mcp` subprocess and `bbs serve`."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import msgspec
import pytest
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

from agent.client import Client
from agent.mcp_common import lean
from agent.mcp_results import search_page
from tests.agent.conftest import BBS, ServedNode
from tests.agent.tool_names import ALL_TOOLS
from wire.api import InboxResult, ReadQuery, SearchQuery

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]
MAX_TOOLS_LIST_CHARS = 12_000  # about 3k tokens, for the whole round (space and redaction parameters fit in it)


@asynccontextmanager
async def mcp_session(node: ServedNode, api_key: str, errlog: Path) -> AsyncIterator[ClientSession]:
    params = StdioServerParameters(
        command=BBS[0], args=[*BBS[1:], "mcp", "--node", node.url], env={"BBS_API_KEY": api_key}, cwd=str(ROOT)
    )
    with errlog.open("w") as err:
        async with stdio_client(params, errlog=err) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            yield session


def text(result: Any) -> str:
    return "".join(block.text for block in result.content)


def ok(result: Any) -> Any:
    assert not result.is_error, text(result)
    return json.loads(text(result))


async def test_tools_list_is_lean_and_complete(served_node: ServedNode, tmp_path: Path) -> None:
    alice = served_node.create_agent("alice")
    async with mcp_session(served_node, alice["api_key"], tmp_path / "err.log") as session:
        listed = await session.list_tools()
    names = {t.name for t in listed.tools}
    assert names == ALL_TOOLS
    for t in listed.tools:
        assert t.description and t.input_schema["type"] == "object"
    size = len(json.dumps([t.model_dump(mode="json", by_alias=True, exclude_none=True) for t in listed.tools]))
    assert size <= MAX_TOOLS_LIST_CHARS, size
    for t in listed.tools:  # every tool says whether it reads only, may destroy, and can be repeated
        assert t.annotations is not None, t.name
        hints = (t.annotations.read_only_hint, t.annotations.destructive_hint, t.annotations.idempotent_hint)
        assert all(isinstance(hint, bool) for hint in hints), t.name
        assert t.input_schema["additionalProperties"] is False, t.name


async def test_every_tool_matches_rest(served_node: ServedNode, tmp_path: Path) -> None:
    alice, bob = served_node.create_agent("alice"), served_node.create_agent("bob")
    errlog = tmp_path / "err.log"
    async with (
        Client(served_node.url, api_key=alice["api_key"]) as rest,
        Client(served_node.url, api_key=bob["api_key"]) as bob_rest,
        mcp_session(served_node, alice["api_key"], errlog) as session,
    ):
        sub = ok(await session.call_tool("subscribe", {"tags": ["cache"]}))
        assert sub["tags"] == ["cache"]
        assert [s.id for s in await rest.subscriptions()] == [sub["id"]]

        first = ok(
            await session.call_tool(
                "post", {"content": "Cache hit rate fell to 41%", "tags": ["cache", "perf"], "confidence": 0.8}
            )
        )
        assert first["author_id"] == alice["agent_id"] and first["tags"] == ["cache", "perf"]
        second = ok(
            await session.call_tool(
                "post",
                {
                    "content": "Is the eviction policy the cause?",
                    "entry_type": "question",
                    "performative": "query",
                    "links": [{"target": str(first["id"]), "link_type": "responds_to"}],
                },
            )
        )
        # the same post retried with its idempotency key is one entry
        again = {"content": "Retried once", "idempotency_key": "k-1"}
        assert ok(await session.call_tool("post", again))["id"] == ok(await session.call_tool("post", again))["id"]

        link = ok(
            await session.call_tool(
                "link", {"source": str(second["id"]), "target": first["record_hash"], "link_type": "depends_on"}
            )
        )
        assert link["source"] == second["record_hash"] and link["target"] == first["record_hash"]

        read = ok(await session.call_tool("read", {"ids": [str(second["id"])], "hops": 1}))
        expected_read = await rest.read([str(second["id"])], ReadQuery(hops=1))
        assert read == lean(expected_read)
        assert "signature" not in read["entries"][0] and read["entries"][0]["content"]
        assert {e["id"] for e in read["entries"]} == {first["id"], second["id"]}

        found = ok(await session.call_tool("search", {"q": "eviction", "limit": 5}))
        assert found == search_page(await rest.search(SearchQuery(q="eviction", limit=5)))
        assert [e["id"] for e in found["entries"]] == [second["id"]]
        found = ok(await session.call_tool("search", {"q": '"eviction policy" caus*'}))
        assert found == search_page(await rest.search(SearchQuery(q='"eviction policy" caus*')))
        assert "eviction policy" in found["entries"][0]["preview"]  # the preview is the match's snippet

        posted = await bob_rest.post("Cache warmed after deploy", tags=["cache"])
        box = msgspec.convert(ok(await session.call_tool("inbox", {"limit": 10})), InboxResult)
        assert [n.record_hash for n in box.notifications] == [posted.record_hash]
        assert not hasattr(box.notifications[0], "content")
        acked = ok(await session.call_tool("inbox", {"ack": [n.notification_id for n in box.notifications]}))
        assert acked == {"acknowledged": 1}
        assert (await rest.inbox()).notifications == []
    assert alice["api_key"] not in errlog.read_text()


BAD_ARGUMENTS: list[tuple[str, dict[str, Any], str]] = [
    ("post", {"content": "x", "confidence": 3}, "confidence"),
    ("post", {"content": "x", "entry_type": "rumour"}, "entry_type"),
    ("post", {}, "content"),
    ("post", {"content": "   "}, "content"),
    ("post", {"content": "x", "links": [{"target": "424242", "link_type": "supports"}]}, "target_not_found"),
    ("read", {"ids": []}, "ids"),
    ("read", {"ids": ["1"], "hops": 9}, "hops"),
    ("search", {"since": "yesterday"}, "since"),
    ("search", {"limit": 0}, "limit"),
    ("link", {"source": "424242", "target": "1", "link_type": "supports"}, "source_not_found"),
    ("link", {"source": "1", "target": "2", "link_type": "likes"}, "link_type"),
    ("subscribe", {"authors": ["not-a-did"]}, "authors"),
    ("inbox", {"ack": []}, "ack"),
    ("inbox", {"ack": ["one"]}, "ack[0]"),
    ("search", {"min_confidence": 0.9, "nonsense": 1}, "argument nonsense"),
    ("search", {"entry_type": "question"}, "argument entry_type"),
]


async def test_bad_arguments_are_error_results(served_node: ServedNode, tmp_path: Path) -> None:
    alice = served_node.create_agent("alice")
    async with mcp_session(served_node, alice["api_key"], tmp_path / "err.log") as session:
        for tool, arguments, expected in BAD_ARGUMENTS:
            result = await session.call_tool(tool, arguments)
            assert result.is_error, (tool, arguments)
            assert expected in text(result), (tool, arguments, text(result))
            assert alice["api_key"] not in text(result)
        # nothing was stored, and the server still answers
        assert ok(await session.call_tool("search", {}))["entries"] == []


async def test_unreachable_node_is_an_error_result(tmp_path: Path) -> None:
    from tests.agent.conftest import free_port

    dead = ServedNode(f"http://127.0.0.1:{free_port()}", tmp_path, "", None, None)  # type: ignore[arg-type]
    async with mcp_session(dead, "bbs_0000000000000000_secret", tmp_path / "err.log") as session:
        result = await session.call_tool("search", {"q": "anything"})
    assert result.is_error and "unreachable" in text(result)


async def test_skill_is_served_as_a_resource(served_node: ServedNode, tmp_path: Path) -> None:
    alice = served_node.create_agent("alice")
    async with mcp_session(served_node, alice["api_key"], tmp_path / "err.log") as session:
        resource = await session.read_resource("bbs://skills/bbs-operations")
    assert "performative" in resource.contents[0].text  # type: ignore[union-attr]


def roamer(served_node: ServedNode, tmp_path: Path, *extra: str) -> StdioServerParameters:
    """An agent that holds its own key, imported into `served_node`, and the `bbs mcp --identity` that runs it."""
    import os
    import subprocess

    home, out = tmp_path / "home", tmp_path / "roamer.id"
    env = {**os.environ, "ROAMER_PW": "pw"}
    for args in (
        ["init", "--data", str(home)],
        ["agent", "create", "roamer", "--data", str(home)],
        ["agent", "export", "roamer", "--data", str(home), "--out", str(out), "--passphrase-env", "ROAMER_PW"],
        ["agent", "import", str(out), "--data", str(served_node.data), "--passphrase-env", "ROAMER_PW"],
    ):
        subprocess.run([*BBS, *args], check=True, capture_output=True, env=env)
    return StdioServerParameters(
        command=BBS[0],
        args=[*BBS[1:], "mcp", "--node", served_node.url, "--identity", str(out), "--passphrase-env", "ROAMER_PW",
              *extra],
        env={"ROAMER_PW": "pw"},
        cwd=str(ROOT),
    )  # fmt: skip


async def test_an_agent_with_an_identity_file_uses_every_tool(served_node: ServedNode, tmp_path: Path) -> None:
    from agent.runtime.memory import WorkingMemory

    memory_file = tmp_path / "memory.sqlite"
    memory = WorkingMemory(memory_file)
    memory.record("decision", action="post", reason="a finding worth sharing")
    memory.note_entry("a" * 64, [], "the boiler was serviced", ["home"])
    memory.close()
    params = roamer(served_node, tmp_path, "--memory", str(memory_file))
    alice = served_node.create_agent("alice")
    called: set[str] = set()

    async def call(session: ClientSession, name: str, arguments: dict[str, Any]) -> Any:
        called.add(name)
        return ok(await session.call_tool(name, arguments))

    errlog = tmp_path / "err.log"
    async with Client(served_node.url, api_key=alice["api_key"]) as rest:
        with errlog.open("w") as err:
            async with stdio_client(params, errlog=err) as (read, write), ClientSession(read, write) as session:
                await session.initialize()
                s = session
                entry = await call(s, "post", {"content": "the boiler was serviced today", "tags": ["home"]})
                other = await call(s, "post", {"content": "boiler service booked for March"})
                await call(s, "link", {"source": str(other["id"]), "target": str(entry["id"]), "link_type": "supports"})
                assert len((await call(s, "read", {"ids": [str(entry["id"])], "hops": 1}))["entries"]) == 2
                assert (await call(s, "search", {"q": "boiler", "author": ["roamer"]}))["entries"]
                await call(s, "subscribe", {"tags": ["home"]})
                await rest.post("alice's note for roamer", tags=["home"], directed_to=["roamer"])
                notes = (await call(s, "inbox", {}))["notifications"]
                assert notes and (await call(s, "inbox", {"ack": [n["notification_id"] for n in notes]}))
                await call(s, "message", {"action": "send", "message_type": "chat", "project": "home",
                                          "body": "We decided to service yearly.", "to_agent": "alice"})  # fmt: skip
                assert (await call(s, "message", {"action": "read", "agent": "alice"}))["messages"]
                await call(s, "task", {"action": "declare", "task": "job", "title": "Job"})
                assert (await call(s, "task", {"action": "ready"}))["tasks"]
                leased = await call(s, "task", {"action": "lease", "task": "job", "seconds": 60})
                await call(s, "task", {"action": "complete", "task": "job", "lease": leased["lease"]["lease_id"]})
                assert (await call(s, "task", {"action": "graph"}))["nodes"]
                mine = await call(s, "reflect", {"project": "home"})
                (cand,) = mine["candidates"]
                await call(s, "review", {"action": "critic", "candidate_ids": [cand["id"]]})
                promote = {"action": "promote", "candidate_id": cand["id"], "idempotency_key": "p-1"}
                promoted = await call(s, "review", promote)
                assert promoted["entry"]["author_id"] == entry["author_id"]
                assert (await call(s, "review", promote))["entry"] == promoted["entry"]  # a retry signs nothing new
                await call(s, "reflect", {"action": "consolidate", "limit": 5})
                later = {"transcript": "TODO next: bleed the radiators before winter."}
                theirs = await rest.call("POST", "/v1/default-mode/reflect-session", dict, json=later)
                their_id = theirs["candidates"][0]["id"]
                listed = await call(s, "review", {"status": ["needs_review"]})
                assert their_id in [c["id"] for c in listed["candidates"]]
                assert (await call(s, "review", {"action": "approve", "candidate_id": their_id}))[
                    "status"
                ] == "approved"
                hook = await call(s, "push", {"action": "add", "url": "http://127.0.0.1:9/roamer"})
                assert [e["id"] for e in (await call(s, "push", {"action": "list"}))["endpoints"]] == [hook["id"]]
                assert (await call(s, "push", {"action": "delete", "endpoint_id": hook["id"]}))["deleted"] == hook["id"]
                kept = await call(s, "working_memory", {})
                assert kept["events"][0]["kind"] == "decision" and kept["summaries"][0]["thread_id"] == "a" * 64
    assert called == ALL_TOOLS


async def test_bbs_mcp_with_an_identity_file_signs_on_the_agent_side(served_node: ServedNode, tmp_path: Path) -> None:
    from identity import records
    from node.ops.datadir import DataDir
    from node.store.db import connect

    params = roamer(served_node, tmp_path)
    errlog = tmp_path / "err.log"
    with errlog.open("w") as err:
        async with stdio_client(params, errlog=err) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            entry = ok(await session.call_tool("post", {"content": "Signed by the bridge", "tags": ["t"]}))
            sent = ok(
                await session.call_tool("message", {"action": "send", "message_type": "status", "body": "started"})
            )
            ok(await session.call_tool("task", {"action": "declare", "task": "job", "title": "Job"}))
            token = ok(await session.call_tool("task", {"action": "lease", "task": "job", "seconds": 60}))["lease"][
                "lease_id"
            ]
            finish = {"action": "complete", "task": "job", "checkpoint": {"rows": 3}, "lease": token}
            done = ok(await session.call_tool("task", finish))
    assert done["status"] == "done" and sent["from_agent"] == entry["author_id"]
    conn = connect(DataDir(served_node.data).db_path)
    try:
        seed = conn.execute("SELECT key_seed FROM local_agents WHERE name = 'roamer'").fetchone()[0]
        body = conn.execute("SELECT body FROM records WHERE hash = ?", (entry["record_hash"],)).fetchone()[0]
        mine = conn.execute(
            "SELECT kind, body FROM records WHERE author_id = ? AND kind IN ('message', 'task_event') ORDER BY seq",
            (entry["author_id"],),
        ).fetchall()
    finally:
        conn.close()
    assert seed is None  # the node never had the key: the bridge signed
    record_hash, decoded = records.check(json.loads(body))
    assert record_hash == entry["record_hash"] and decoded.author_id == entry["author_id"]
    assert [kind for kind, _ in mine] == ["message", "task_event", "task_event"]  # declare and complete
    assert all(records.check(json.loads(b))[1].author_id == entry["author_id"] for _, b in mine)
    assert "pw" not in errlog.read_text().split()


async def test_bbs_mcp_with_an_identity_file_follows_a_rotation_done_by_another_process(
    served_node: ServedNode, tmp_path: Path
) -> None:
    """The MCP SDK client drives `bbs mcp --identity FILE`; this test process rotates the file's key through the
    client library meanwhile; the bridge's next post is signed by the new key, naming it in `signing_key`."""
    from agent import identity_file
    from node.ops.datadir import DataDir
    from node.store.db import connect

    params = roamer(served_node, tmp_path)
    out = tmp_path / "roamer.id"
    errlog = tmp_path / "err.log"
    with errlog.open("w") as err:
        async with stdio_client(params, errlog=err) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            before = ok(await session.call_tool("post", {"content": "before the rotation"}))
            async with Client(served_node.url, identity_file=out, passphrase="pw") as other:
                rotated = await other.rotate_signing_key()
            new_key = identity_file.load(out, "pw").key.did
            assert rotated.key_history.current_key == new_key != before["author_id"]
            after = ok(await session.call_tool("post", {"content": "after the rotation"}))
    assert after["author_id"] == before["author_id"]
    conn = connect(DataDir(served_node.data).db_path)
    try:
        bodies = {
            h: json.loads(conn.execute("SELECT body FROM records WHERE hash = ?", (h,)).fetchone()[0])
            for h in (before["record_hash"], after["record_hash"])
        }
    finally:
        conn.close()
    assert "signing_key" not in bodies[before["record_hash"]]
    assert bodies[after["record_hash"]]["signing_key"] == new_key
