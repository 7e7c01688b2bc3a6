"""Issue 25 through MCP (the real SDK client, in-process, against a real node): reflecting a session, `same_as`
both ways, `supersedes` claims, hidden simulations with their links, and agents named by did or name."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable

from aiohttp.test_utils import TestClient

from tests.agent.mcp_inprocess import failed, mcp_for, ok
from tests.conftest import AgentCreds

MakeAgent = Callable[[str], Awaitable[AgentCreds]]

MEETING = [
    ("Morning all, sorry I'm a couple of minutes late.", None),
    ("We decided to move the backups to the NAS in the hall cupboard.", "decision"),
    ("Who has the admin password for the NAS?", "open_question"),
    ("TODO next: restore one folder from the NAS before we wipe the old drive.", "open_loop"),
    ("Dana prefers nightly backups because the hourly ones wake her up.", "preference"),
    ("The backups hold the kids' school reports, so there is a privacy risk if the NAS is open.", "risk"),
    ("Lovely weather for the weekend, apparently.", None),
]


async def test_reflect_a_meeting_held_on_the_bus(client: TestClient, make_agent: MakeAgent) -> None:
    alice, bob = await make_agent("alice"), await make_agent("bob")
    async with mcp_for(client, alice.api_key) as a, mcp_for(client, bob.api_key) as b:
        for i, (line, _) in enumerate(MEETING):
            sent = ok(
                await (a if i % 2 else b).call_tool(
                    "message", {"action": "send", "message_type": "chat", "body": line, "project": "backups"}
                )
            )
        out = ok(await a.call_tool("reflect", {"project": "backups", "until": sent["created_at"]}))
        assert {c["text"]: c["kind"] for c in out["candidates"]} == {line: kind for line, kind in MEETING if kind}
        assert {c["status"] for c in out["candidates"] if c["kind"] != "risk"} == {"approved"}
        assert "session_not_found" in failed(await a.call_tool("reflect", {"project": "nothing"}))
        assert "transcript_or_session" in failed(await a.call_tool("reflect", {"transcript": "x", "project": "p"}))


async def test_same_as_is_followed_both_ways(client: TestClient, make_agent: MakeAgent) -> None:
    alice = await make_agent("alice")
    async with mcp_for(client, alice.api_key) as s:
        a = ok(await s.call_tool("post", {"content": "the boiler is a Vaillant ecoTEC"}))
        b = ok(await s.call_tool("post", {"content": "our boiler: Vaillant ecoTEC plus"}))
        ok(await s.call_tool("link", {"source": str(a["id"]), "target": str(b["id"]), "link_type": "same_as"}))
        back = ok(await s.call_tool("read", {"ids": [str(b["id"])], "hops": 1, "direction": "outbound"}))
        assert sorted(e["id"] for e in back["entries"]) == sorted([a["id"], b["id"]])


async def test_supersedes_of_another_author_is_a_claim_until_acked(client: TestClient, make_agent: MakeAgent) -> None:
    alice, bob = await make_agent("alice"), await make_agent("bob")
    async with mcp_for(client, alice.api_key) as a, mcp_for(client, bob.api_key) as b:
        old = ok(await a.call_tool("post", {"content": "the router password is on the fridge"}))
        new = ok(
            await b.call_tool(
                "post",
                {
                    "content": "the router password moved to the vault",
                    "links": [{"target": str(old["id"]), "link_type": "supersedes"}],
                },
            )
        )
        (entry,) = ok(await b.call_tool("read", {"ids": [str(old["id"])]}))["entries"]
        assert entry["superseded"] is False and entry["superseded_claims"] == [new["record_hash"]]
        ok(
            await a.call_tool(
                "post",
                {
                    "content": "yes, the vault",
                    "performative": "ack",
                    "links": [{"target": new["record_hash"], "link_type": "responds_to"}],
                },
            )
        )
        (entry,) = ok(await b.call_tool("read", {"ids": [str(old["id"])]}))["entries"]
        assert entry["superseded"] is True and entry["superseded_claims"] == []


async def test_a_hidden_simulation_shows_no_links(client: TestClient, make_agent: MakeAgent) -> None:
    alice, bob = await make_agent("alice"), await make_agent("bob")
    async with mcp_for(client, alice.api_key) as s, mcp_for(client, bob.api_key) as b:
        ok(await b.call_tool("subscribe", {"authors": ["alice"]}))
        fact = ok(await s.call_tool("post", {"content": "the heat pump draws 2 kW"}))
        sim = ok(
            await s.call_tool(
                "post",
                {
                    "content": "a colder winter might double it",
                    "truth_state": "simulation",
                    "links": [{"target": str(fact["id"]), "link_type": "derived_from"}],
                },
            )
        )
        hidden = ok(await s.call_tool("read", {"ids": [sim["record_hash"]], "hops": 1}))
        assert hidden["entries"] == [] and hidden["links"] == []
        around = ok(await s.call_tool("read", {"ids": [str(fact["id"])], "hops": 1}))
        assert [e["id"] for e in around["entries"]] == [fact["id"]] and around["links"] == []
        shown = ok(await s.call_tool("read", {"ids": [sim["record_hash"]], "include_synthetic": True}))
        assert [e["id"] for e in shown["entries"]] == [sim["id"]] and len(shown["links"]) == 1
        notified = ok(await b.call_tool("inbox", {}))["notifications"]
        assert [n["entry_id"] for n in notified] == [fact["id"]]  # the subscriber hears of the fact only


async def test_agents_are_named_by_did_or_name(client: TestClient, make_agent: MakeAgent) -> None:
    alice, bob = await make_agent("alice"), await make_agent("bob")
    async with mcp_for(client, alice.api_key) as s:
        sent = ok(
            await s.call_tool("message", {"action": "send", "message_type": "chat", "body": "hi", "to_agent": "bob"})
        )
        assert sent["to_agent"] == bob.agent_id
        assert ok(await s.call_tool("message", {"action": "read", "agent": "bob"}))["messages"][0]["id"] == sent["id"]
        entry = ok(await s.call_tool("post", {"content": "for bob", "directed_to": ["bob"]}))
        assert entry["directed_to"] == [bob.agent_id]
        assert ok(await s.call_tool("search", {"author": ["alice"]}))["entries"][0]["id"] == entry["id"]
        assert ok(await s.call_tool("subscribe", {"authors": ["bob"]}))["authors"] == [bob.agent_id]
        error = failed(await s.call_tool("message", {"action": "send", "message_type": "chat", "to_agent": "nobody"}))
        assert "agent_not_found" in error and "to_agent" in error
        assert "agent_not_found" in failed(await s.call_tool("search", {"author": ["nobody"]}))


async def test_post_with_redact_takes_a_record_back_and_refuses_anothers(
    client: TestClient, make_agent: MakeAgent
) -> None:
    alice, bob = await make_agent("alice"), await make_agent("bob")
    async with mcp_for(client, alice.api_key) as a, mcp_for(client, bob.api_key) as b:
        leaked = ok(await a.call_tool("post", {"content": "the wifi password is hunter2"}))
        refused = failed(await b.call_tool("post", {"redact": leaked["record_hash"], "content": "not mine"}))
        assert "not_target_author" in refused
        done = ok(await a.call_tool("post", {"redact": leaked["record_hash"], "content": "pasted a password"}))
        assert done["created"] is True and done["tombstone"]["redacted"] is True
        back = ok(await b.call_tool("read", {"ids": [leaked["record_hash"]]}))
        assert back["entries"] == [] and [t["hash"] for t in back["redacted"]] == [leaked["record_hash"]]
        assert "hunter2" not in json.dumps(back)
