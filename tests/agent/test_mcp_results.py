"""agent/mcp_results.py: a search page over MCP is metadata first and a preview per hit, under 400 characters a hit
(as the tool result carries it), the same page REST gives made compact; links name the page's entries by id."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable

from aiohttp.test_utils import TestClient

from agent.client import Client
from agent.mcp_results import ELLIPSIS, PREVIEW_CHARS, hit, preview, search_page
from tests.agent.mcp_inprocess import mcp_for, ok
from tests.conftest import AgentCreds
from wire.api import EntryOut, SearchQuery, SearchResult, Snippet

MakeAgent = Callable[[str], Awaitable[AgentCreds]]
HIT_CHARS = 400  # one search hit with a 100-character preview


def test_a_preview_is_one_line_of_at_most_100_characters() -> None:
    assert preview("short\n  text") == "short text"
    long = preview("word " * 100)
    assert len(long) == PREVIEW_CHARS and long.endswith(ELLIPSIS)
    assert preview("x" * PREVIEW_CHARS) == "x" * PREVIEW_CHARS


def entry(**fields: object) -> EntryOut:
    base: dict[str, object] = dict(
        id=7, record_hash="a" * 64, content_fingerprint="f" * 64, author_id="did:key:z6Mk" + "x" * 44,
        created_at="2026-12-03T16:47:48.190Z", entry_type="finding", performative="inform", content="c" * 5000,
        confidence=0.85, tags=["heating"], directed_to=[], metadata={"big": "m" * 1000}, truth_state="fact",
        authority="raw", scope="federation", signature="s" * 86, retracted=False, superseded=False,
    )  # fmt: skip
    base.update(fields)
    return EntryOut(**base)  # type: ignore[arg-type]


def test_a_hit_is_metadata_then_the_preview_with_flags_only_when_set() -> None:
    plain = hit(entry())
    assert list(plain) == ["id", "author_id", "created_at", "entry_type", "performative", "confidence", "tags",
                           "preview"]  # fmt: skip
    assert plain["preview"] == "c" * (PREVIEW_CHARS - 1) + ELLIPSIS
    flagged = hit(entry(truth_state="hypothesis", retracted=True), "…the match here…")
    assert flagged["truth_state"] == "hypothesis" and flagged["retracted"] is True
    assert flagged["preview"] == "…the match here…" and list(flagged)[-1] == "preview"


def test_a_page_puts_paging_and_freshness_first() -> None:
    result = SearchResult(
        entries=[entry()], links=[], limit=5, offset=0, next_offset=5, snippets={"a" * 64: Snippet("…hit…", [])},
        indexed_through=9,
    )  # fmt: skip
    page = search_page(result)
    assert list(page) == ["limit", "offset", "next_offset", "truncated", "stale", "indexed_through", "entries"]
    assert page["entries"][0]["preview"] == "…hit…"


async def test_a_search_page_is_metadata_first_and_a_preview_per_hit(client: TestClient, make_agent: MakeAgent) -> None:
    alice = await make_agent("alice")
    words = "the compressor of the second heat pump short-cycles every four minutes when the buffer tank is cold "
    async with mcp_for(client, alice.api_key) as session:
        for i in range(5):
            ok(await session.call_tool("post", {"content": f"{i}: " + words * 30, "tags": ["heating", "heat-pump"],
                                                 "confidence": 0.85, "entry_type": "finding"}))  # fmt: skip
        for arguments in ({"limit": 5}, {"q": "buffer tank", "limit": 5}, {"tags": ["heating"], "hops": 1}):
            result = await session.call_tool("search", arguments)
            text = "".join(block.text for block in result.content)  # type: ignore[union-attr]
            page = json.loads(text)
            assert list(page)[:3] == ["limit", "offset", "next_offset"] and list(page)[-1] in ("entries", "links")
            assert len(page["entries"]) == 5
            for item in page["entries"]:
                assert len(json.dumps(item, ensure_ascii=False, separators=(",", ":"))) <= HIT_CHARS, item  # as sent
                assert len(item["preview"]) <= PREVIEW_CHARS and list(item)[-1] == "preview"
                assert "content" not in item and "signature" not in item
            assert len(text) <= 5 * HIT_CHARS + 200
        async with Client(str(client.make_url("")).rstrip("/"), api_key=alice.api_key) as rest:
            found = await rest.search(SearchQuery(q="buffer tank", limit=5))
        assert ok(await session.call_tool("search", {"q": "buffer tank", "limit": 5})) == search_page(found)
        full = ok(await session.call_tool("read", {"ids": [str(page["entries"][0]["id"])]}))
        assert len(full["entries"][0]["content"]) > 3000  # read gives the whole text


async def test_a_search_page_s_links_name_the_page_s_entries_by_id(client: TestClient, make_agent: MakeAgent) -> None:
    alice = await make_agent("alice")
    async with mcp_for(client, alice.api_key) as session:
        first = ok(await session.call_tool("post", {"content": "the loft insulation is 100 mm", "tags": ["loft"]}))
        second = ok(await session.call_tool("post", {"content": "top it up to 270 mm", "tags": ["loft"],
                                                      "links": [{"target": str(first["id"]), "link_type": "responds_to",
                                                                 "annotation": "the fix"}]}))  # fmt: skip
        page = ok(await session.call_tool("search", {"tags": ["loft"], "hops": 1}))
    assert {e["id"] for e in page["entries"]} == {first["id"], second["id"]}
    assert page["links"] == [
        {"source": second["id"], "target": first["id"], "link_type": "responds_to", "annotation": "the fix"}
    ]
