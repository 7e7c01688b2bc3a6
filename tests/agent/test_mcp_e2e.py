"""Every MCP tool with every parameter, and one bad argument each, through the official SDK client against a real
`bbs serve` over both transports: stdio (`bbs mcp --node URL`, with BBS_API_KEY) and streamable HTTP
(`bbs serve --mcp-port`). Each answer is compared with the REST API's answer to the same request; at the end every
argument of every tool has been given at least once (issue 32)."""

from __future__ import annotations

import json
import sqlite3
from collections import defaultdict
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

from agent.client import Client
from agent.mcp_common import lean
from agent.mcp_results import search_page
from agent.runtime.memory import WorkingMemory
from tests.agent.conftest import BBS, ServedNode
from tests.agent.test_mcp_http import remote_session
from tests.agent.test_mcp_stdio import ROOT
from wire.api import InboxQuery, ReadQuery, SearchQuery
from wire.workflows import GraphQuery, MessageQuery, ReadyQuery

pytestmark = [pytest.mark.slow, pytest.mark.remote_mcp]  # served_node with --mcp-port (tests/agent/conftest.py)
DM = "/v1/default-mode"
LONG_AGO = "2000-01-01T00:00:00Z"
LATER = "2100-01-01T00:00:00Z"


@asynccontextmanager
async def stdio_session(node: ServedNode, api_key: str, memory: Path, errlog: Path) -> AsyncIterator[ClientSession]:
    params = StdioServerParameters(
        command=BBS[0],
        args=[*BBS[1:], "mcp", "--node", node.url, "--memory", str(memory)],
        env={"BBS_API_KEY": api_key},
        cwd=str(ROOT),
    )
    with errlog.open("w") as err:
        async with stdio_client(params, errlog=err) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            yield session


class Driver:
    """Calls tools, remembers which arguments each tool was given, and checks answers and refusals."""

    def __init__(self, session: ClientSession) -> None:
        self.session = session
        self.given: dict[str, set[str]] = defaultdict(set)

    async def ok(self, tool: str, arguments: dict[str, Any]) -> Any:
        result = await self.session.call_tool(tool, arguments)
        text = "".join(block.text for block in result.content)  # type: ignore[union-attr]
        assert not result.is_error, (tool, arguments, text)
        self.given[tool] |= set(arguments)
        return text if arguments.get("format") in ("dot", "mermaid") else json.loads(text)

    async def refused(self, tool: str, arguments: dict[str, Any], argument: str, code: str = "validation_error") -> str:
        """A call refused with one line that starts with `code` and names `argument`."""
        result = await self.session.call_tool(tool, arguments)
        text = "".join(block.text for block in result.content)  # type: ignore[union-attr]
        assert result.is_error, (tool, arguments, text)
        assert text.startswith(f"{code}: ") and f"(argument {argument})" in text, (tool, text)
        assert "\n" not in text and "pydantic" not in text, text
        return text


def notification_status(node: ServedNode, notification_id: int) -> str:
    conn = sqlite3.connect(f"file:{node.data / 'bbs.db'}?mode=ro", uri=True)
    try:
        return str(conn.execute("SELECT status FROM notifications WHERE id = ?", (notification_id,)).fetchone()[0])
    finally:
        conn.close()


@pytest.mark.parametrize("transport", ["stdio", "http"])
async def test_every_tool_with_every_parameter_answers_as_rest(
    served_node: ServedNode, tmp_path: Path, transport: str
) -> None:
    alice, bob = served_node.create_agent("alice"), served_node.create_agent("bob")
    memory_file = tmp_path / "memory.sqlite"
    memory = WorkingMemory(memory_file)
    memory.record("decision", action="post", reason="worth sharing")
    memory.note_entry("a" * 64, [], "the boiler was serviced", ["home"])
    memory.close()
    session_cm = (
        stdio_session(served_node, alice["api_key"], memory_file, tmp_path / "err.log")
        if transport == "stdio"
        else remote_session(served_node, alice["api_key"])
    )
    async with (
        Client(served_node.url, api_key=alice["api_key"]) as rest,
        Client(served_node.url, api_key=bob["api_key"]) as bob_rest,
        session_cm as session,
    ):
        d = Driver(session)
        tools = {t.name: set(t.input_schema["properties"]) for t in (await session.list_tools()).tools}

        # ---- subscribe: add, list, delete ----
        sub = await d.ok(
            "subscribe",
            {
                "action": "add",
                "tags": ["e2e"],
                "entry_types": ["finding", "question"],
                "performatives": ["inform", "query"],
                "authors": ["bob"],
                "directed": False,
            },
        )
        spare = await d.ok("subscribe", {"tags": ["spare"], "directed": True})
        assert sub["authors"] == [bob["agent_id"]] and spare["directed"] is True
        listed = await d.ok("subscribe", {"action": "list"})
        assert listed == lean({"subscriptions": await rest.subscriptions()})
        assert await d.ok("subscribe", {"action": "delete", "subscription_id": spare["id"]}) == {"deleted": spare["id"]}
        assert [s.id for s in await rest.subscriptions()] == [sub["id"]]
        await d.refused("subscribe", {"action": "list", "tags": ["x"]}, "tags")

        # ---- post, with every field ----
        theirs = await bob_rest.post("Cache hit rate fell to 41% after the deploy", tags=["e2e", "cache"])
        post = {
            "content": "Is the eviction policy the cause of the cache misses?",
            "entry_type": "question",
            "performative": "query",
            "confidence": 0.7,
            "tags": ["e2e", "cache"],
            "directed_to": ["bob"],
            "links": [{"target": str(theirs.id), "link_type": "responds_to", "annotation": "re: the drop"}],
            "metadata": {"source": "e2e"},
            "truth_state": "hypothesis",
            "authority": "raw",
            "scope": "local",
            "idempotency_key": f"e2e-post-{transport}",
        }
        mine = await d.ok("post", post)
        assert mine == lean((await rest.get_entry(str(mine["id"]), ReadQuery(include_links=False))).entries[0])
        assert (mine["directed_to"], mine["scope"], mine["metadata"]) == ([bob["agent_id"]], "local", {"source": "e2e"})
        assert (await d.ok("post", post))["id"] == mine["id"]  # the same key: stored once
        await d.refused("post", {"content": "x", "confidence": 2}, "confidence")
        leaked = await d.ok("post", {"content": f"the wifi password, sent by mistake ({transport})"})
        gone = await d.ok("post", {"redact": leaked["record_hash"], "content": "a password"})  # a redaction instead
        assert gone["tombstone"] == lean((await rest.get_entry(leaked["record_hash"])).redacted[0])
        await d.refused("post", {"redact": "not-a-hash", "content": "x"}, "redact")

        # ---- link ----
        support = await bob_rest.post("Evictions tripled at 14:00", tags=["e2e"], confidence=0.95)
        made = await d.ok(
            "link",
            {
                "source": str(mine["id"]),
                "target": support.record_hash,
                "link_type": "supports",
                "annotation": "the evidence",
                "idempotency_key": f"e2e-link-{transport}",
            },
        )
        assert (
            await d.ok(
                "link",
                {
                    "source": str(mine["id"]),
                    "target": support.record_hash,
                    "link_type": "supports",
                    "idempotency_key": f"e2e-link-{transport}",
                    "annotation": "the evidence",
                },
            )
        )["id"] == made["id"]
        around = await rest.read([str(mine["id"])], ReadQuery())
        assert lean(next(link for link in around.links if link.id == made["id"])) == made
        await d.refused("link", {"source": "1", "target": "2", "link_type": "likes"}, "link_type")

        # ---- read, with every parameter ----
        query: dict[str, Any] = {
            "ids": [str(mine["id"])],
            "include_links": True,
            "hops": 1,
            "link_types": ["supports"],
            "direction": "outbound",
            "include_synthetic": False,
        }
        read = await d.ok("read", query)
        assert read == lean(await rest.read(query["ids"], ReadQuery(**{k: v for k, v in query.items() if k != "ids"})))
        assert {link["link_type"] for link in read["links"]} == {"supports"}  # the filter holds, as over REST
        bare = await d.ok("read", {"ids": [str(mine["id"])], "include_links": False})
        assert bare["links"] == [] and bare == lean(await rest.read(query["ids"], ReadQuery(include_links=False)))
        await d.refused("read", {"ids": ["1"], "hops": 9}, "hops")

        # ---- search, with every parameter ----
        search: dict[str, Any] = {
            "q": "eviction",
            "tags": ["e2e"],
            "entry_type": ["question", "finding"],
            "performative": ["query", "inform"],
            "author": ["alice", "bob"],
            "truth_state": ["hypothesis", "fact"],
            "min_confidence": 0.6,
            "since": LONG_AGO,
            "include_synthetic": False,
            "min_trust": 0.0,
            "sort": "default",
            "limit": 5,
            "offset": 0,
            "hops": 1,
            "link_types": ["supports"],
            "direction": "outbound",
            "fresh": True,
        }
        found = await d.ok("search", search)
        assert found == search_page(await rest.search(SearchQuery(**search)))
        assert {e["id"] for e in found["entries"]} >= {mine["id"]}
        assert {link["link_type"] for link in found.get("links", [])} == {"supports"}
        confident = await d.ok("search", {"tags": ["e2e"], "min_confidence": 0.9})
        assert [e["id"] for e in confident["entries"]] == [support.id]  # nothing of confidence 0.5 or 0.7
        await d.refused("search", {"entry_type": "question"}, "entry_type")

        # ---- a space: post into it and search it (docs/spaces.md); bob, not a member, sees nothing of it ----
        space = (await rest.call("POST", "/v1/spaces", dict, json={"name": f"e2e-{transport}"}))["space_id"]
        inside = await d.ok("post", {"content": f"Private eviction notes {transport}", "space": space})
        assert inside["space"] == space
        in_space = await d.ok("search", {"space": [space], "q": "eviction", "fresh": True})
        assert [e["id"] for e in in_space["entries"]] == [inside["id"]]
        assert in_space == search_page(await rest.search(SearchQuery(space=[space], q="eviction", fresh=True)))
        assert inside["id"] not in [
            e.id for e in (await bob_rest.search(SearchQuery(q="eviction", fresh=True))).entries
        ]
        await d.refused("post", {"content": "x", "space": "not-a-space"}, "space")
        assert (await d.ok("inbox", {"space": space, "limit": 5}))["notifications"] == []  # bob posted none there
        only_space = await d.ok("subscribe", {"tags": ["e2e-space"], "spaces": [space]})
        assert only_space["spaces"] == [space]
        assert await d.ok("subscribe", {"action": "delete", "subscription_id": only_space["id"]}) == {
            "deleted": only_space["id"]
        }
        linked = await d.ok("link", {"source": str(inside["id"]), "target": str(mine["id"]), "link_type": "supports",
                                     "space": space})  # fmt: skip
        assert linked["space"] == space

        # ---- inbox: lease, ack, mark_delivered ----
        posted = await bob_rest.post("Cache warmed again", tags=["e2e"])
        box = await d.ok("inbox", {"limit": 10, "since": LONG_AGO, "mark_delivered": False})
        assert posted.record_hash in [n["record_hash"] for n in box["notifications"]]
        assert (await rest.inbox(InboxQuery(limit=10))).notifications == []  # leased by the tool, as by REST
        ids = [n["notification_id"] for n in box["notifications"]]
        assert await d.ok("inbox", {"ack": ids}) == {"acknowledged": len(ids)}
        again = await bob_rest.post("Cache hit rate back at 90%", tags=["e2e"])
        delivered = await d.ok("inbox", {"mark_delivered": True})
        (note,) = [n for n in delivered["notifications"] if n["record_hash"] == again.record_hash]
        assert notification_status(served_node, note["notification_id"]) == "delivered"
        await d.refused("inbox", {"ack": [1], "limit": 3}, "limit")

        # ---- message: send and read ----
        sent = await d.ok(
            "message",
            {
                "action": "send",
                "message_type": "plan",
                "body": "two steps",
                "to_agent": "bob",
                "payload": {"steps": 2},
                "dependency_ids": [mine["record_hash"]],
                "project": f"e2e-{transport}",
                "from_agent": "alice",
                "idempotency_key": f"e2e-msg-{transport}",
            },
        )
        assert sent["to_agent"] == bob["agent_id"] and sent["payload"] == {"steps": 2}
        page = await d.ok(
            "message",
            {
                "action": "read",
                "project": f"e2e-{transport}",
                "agent": "bob",
                "message_type": "plan",
                "order": "oldest",
                "limit": 5,
            },
        )
        assert page == lean(
            await rest.messages(
                MessageQuery(project=f"e2e-{transport}", agent="bob", message_type="plan", order="oldest", limit=5)
            )
        )
        assert [m["id"] for m in page["messages"]] == [sent["id"]]
        tail = await d.ok("message", {"action": "read", "order": "arrival", "cursor": f"0.{sent['id']}"})
        assert tail == lean(await rest.messages(MessageQuery(order="arrival", cursor=f"0.{sent['id']}")))
        await d.refused("message", {"action": "read", "body": "x"}, "body")
        private = await d.ok("message", {"action": "send", "message_type": "plan", "body": "ours", "space": space})
        in_space = await d.ok("message", {"action": "read", "space": space})
        assert private["space"] == space and [m["id"] for m in in_space["messages"]] == [private["id"]]
        assert private["id"] not in [m.id for m in (await bob_rest.messages(MessageQuery(limit=50))).messages]

        # ---- task: declare, get, lease, complete, release, ready, graph ----
        await d.ok("task", {"action": "declare", "task": "publish", "title": "Publish", "depends_on": ["draft"]})
        declared = await d.ok(
            "task",
            {"action": "declare", "task": "draft", "title": "Draft", "status": "pending", "checkpoint": {"words": 0}},
        )
        assert declared == lean(await rest.get_task("draft"))
        ready = await d.ok("task", {"action": "ready", "limit": 1})
        assert ready == lean(await rest.ready_tasks(ReadyQuery(limit=1)))
        assert await d.ok("task", {"action": "ready", "after": ready["next_after"] or 0}) == lean(
            await rest.ready_tasks(ReadyQuery(after=ready["next_after"] or 0))
        )
        leased = await d.ok("task", {"action": "lease", "task": "draft", "agent": "alice", "seconds": 60})
        token = leased["lease"]["lease_id"]
        noted = await d.ok("task", {"action": "declare", "task": "draft", "checkpoint": {"words": 500}, "lease": token})
        assert noted["checkpoint"] == {"words": 500}
        done = await d.ok(
            "task",
            {
                "action": "complete",
                "task": "draft",
                "checkpoint": {"words": 900},
                "lease": token,
                "idempotency_key": f"e2e-done-{transport}",
            },
        )
        assert done == lean(await rest.get_task("draft")) and done["status"] in ("done", "completed")
        assert await d.ok("task", {"action": "get", "task": "draft"}) == done
        token = (await d.ok("task", {"action": "lease", "task": "publish"}))["lease"]["lease_id"]
        released = await d.ok(
            "task",
            {
                "action": "release",
                "task": "publish",
                "lease": token,
                "checkpoint": {"half": True},
                "idempotency_key": f"e2e-rel-{transport}",
            },
        )
        assert released == lean(await rest.get_task("publish")) and released["lease"] is None
        graph = await d.ok("task", {"action": "graph", "limit": 100, "format": "json"})
        assert graph == lean(await rest.task_graph(GraphQuery(limit=100)))
        dot = await d.ok("task", {"action": "graph", "format": "dot"})
        assert dot == await rest.task_graph_text(GraphQuery(format="dot"))
        await d.refused("task", {"action": "lease", "task": "publish", "seconds": 5}, "seconds")
        # a task of the space: the key names it only with `space`; bob, not a member, sees none of it
        own = await d.ok("task", {"action": "declare", "task": "draft", "title": "Our draft", "space": space})
        assert own["space"] == space and own["id"] != done["id"]
        got = await d.ok("task", {"action": "get", "task": "draft", "space": space})
        assert got == own == lean(await rest.get_task("draft", space))
        assert [t["id"] for t in (await d.ok("task", {"action": "ready", "space": space}))["tasks"]] == [own["id"]]
        inside_graph = await d.ok("task", {"action": "graph", "space": space})
        assert inside_graph == lean(await rest.task_graph(GraphQuery(space=space)))
        assert own["id"] not in [n.id for n in (await bob_rest.task_graph()).nodes]

        # ---- reflect: session (a transcript, then a project's messages) and consolidate ----
        transcript = "We decided to keep the LRU policy, remember that.\nTODO next: benchmark the ingest path."
        weights = {
            "action": 0.5,
            "risk": 0.4,
            "novelty": 0.05,
            "repetition": 0.05,
            "emphasis": 0.4,
            "goal_relevance": 0.1,
            "evidence_strength": 0.1,
        }
        reflected = await d.ok(
            "reflect",
            {
                "action": "session",
                "transcript": transcript,
                "evidence_refs": [support.record_hash],
                "goal_relevance": 0.5,
                "evidence_strength": 0.5,
                "weights": weights,
                "tags": ["e2e"],
                "idempotency_key": f"e2e-refl-{transport}",
            },
        )
        assert reflected["candidates"]
        for cand in reflected["candidates"]:
            assert cand == await rest.call("GET", f"{DM}/candidates/{cand['id']}", dict)
        await d.ok(
            "message",
            {
                "action": "send",
                "message_type": "chat",
                "project": "meet",
                "body": "We decided to move the backups to the NAS in the hall.",
            },
        )
        session_made = await d.ok(
            "reflect", {"session_id": "none-tagged", "project": "meet", "since": LONG_AGO, "until": LATER}
        )
        assert [c["kind"] for c in session_made["candidates"]] == ["decision"]
        summary = await d.ok(
            "reflect",
            {
                "action": "consolidate",
                "limit": 10,
                "since": LONG_AGO,
                "tags": ["e2e"],
                "include_synthetic": False,
                "idempotency_key": f"e2e-sum-{transport}",
            },
        )
        assert summary == await rest.call("GET", f"{DM}/candidates/{summary['id']}", dict)
        await d.refused("reflect", {"action": "consolidate", "transcript": "x"}, "transcript")
        in_space = await d.ok("reflect", {"action": "consolidate", "space": space, "limit": 10})
        assert in_space["space"] == space  # reads the space's entries with the public ones; lands in it
        assert in_space["id"] not in [
            c["id"] for c in (await bob_rest.call("GET", f"{DM}/candidates", dict))["candidates"]
        ]

        # ---- review: list, critic, approve, reject, promote ----
        page = await d.ok(
            "review", {"action": "list", "status": ["needs_review", "approved"], "limit": 50, "offset": 0}
        )
        params = [("status", "needs_review"), ("status", "approved"), ("limit", "50")]
        assert page == await rest.call("GET", f"{DM}/candidates", dict, params=params)
        proposal = {
            "kind": "decision",
            "text": "Keep two weekly snapshots of the NAS.",
            "evidence_refs": [support.record_hash],
            "truth_state": "fact",
        }
        criticised = await d.ok(
            "review",
            {
                "action": "critic",
                "candidate_ids": [summary["id"]],
                "candidates": [proposal],
                "idempotency_key": f"e2e-critic-{transport}",
            },
        )
        for cand in criticised["candidates"]:
            assert cand == await rest.call("GET", f"{DM}/candidates/{cand['id']}", dict)
        theirs_made = await bob_rest.call(
            "POST",
            f"{DM}/critic",
            dict,
            json={
                "candidates": [
                    {
                        "kind": "decision",
                        "text": "Label every cable in the rack.",
                        "evidence_refs": [support.record_hash],
                    },
                    {
                        "kind": "decision",
                        "text": "Move the router to the hall.",
                        "evidence_refs": [support.record_hash],
                    },
                ]
            },
        )
        first, second = (c["id"] for c in theirs_made["candidates"])
        approved = await d.ok("review", {"action": "approve", "candidate_id": first, "note": "agreed"})
        assert approved == await rest.call("GET", f"{DM}/candidates/{first}", dict) and approved["status"] == "approved"
        rejected = await d.ok("review", {"action": "reject", "candidate_id": second, "note": "no"})
        assert rejected["status"] == "rejected" and rejected["decided_by"] == alice["agent_id"]
        promote = {
            "action": "promote",
            "candidate_id": first,
            "scope": "local",
            "idempotency_key": f"e2e-p-{transport}",
        }
        promoted = await d.ok("review", promote)
        assert promoted["entry"] == lean((await rest.get_entry(promoted["entry"]["record_hash"])).entries[0])
        assert promoted["entry"]["scope"] == "local" and promoted["entry"]["author_id"] == alice["agent_id"]
        assert (await d.ok("review", promote))["entry"] == promoted["entry"]  # a retry with its key: the same
        refusal = await d.refused(
            "review", {"action": "promote", "candidate_id": first}, "candidate_id", "candidate_not_promotable"
        )
        assert promoted["entry"]["record_hash"] in refusal
        await d.refused("review", {"action": "promote"}, "candidate_id")

        # ---- push: add, list, test, delete ----
        hook = await d.ok(
            "push",
            {
                "action": "add",
                "url": "http://127.0.0.1:9/e2e",
                "tiers": [1, 2],
                "reasons": ["directed", "subscription"],
            },
        )
        assert (hook["tiers"], hook["reasons"]) == ([1, 2], ["directed", "subscription"])
        assert await d.ok("push", {"action": "list"}) == await rest.call("GET", "/v1/push/endpoints", dict)
        tested = await d.ok("push", {"action": "test", "endpoint_id": hook["id"]})
        assert tested["ok"] is False  # nothing listens on port 9
        assert await d.ok("push", {"action": "delete", "endpoint_id": hook["id"]}) == {"deleted": hook["id"]}
        assert (await rest.call("GET", "/v1/push/endpoints", dict))["endpoints"] == []
        await d.refused("push", {"action": "add"}, "url")

        # ---- working_memory: the bridge's file over stdio; remote MCP has none ----
        memory_args = {"limit": 5, "event_kind": "decision", "touching": ["a" * 64]}
        if transport == "stdio":
            kept = await d.ok("working_memory", memory_args)
            assert kept["events"][0]["kind"] == "decision" and kept["summaries"][0]["thread_id"] == "a" * 64
        else:  # the arguments are checked, then the tool says why it cannot answer
            result = await session.call_tool("working_memory", memory_args)
            assert result.is_error and "memory_not_configured" in result.content[0].text  # type: ignore[union-attr]
            d.given["working_memory"] |= set(memory_args)
        await d.refused("working_memory", {"limit": 0}, "limit")

    # every argument of every tool was given at least once
    assert {name: tools[name] - d.given[name] for name in tools} == {name: set() for name in tools}
