"""Quick reads over HTTP: searches and entry reads answered on the event loop (the budget itself, in node/store/db.py:
tests/node/store/test_db.py; deep search pages on a reader thread: tests/node/entries/test_reads.py)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from aiohttp.test_utils import TestClient

from node.service import Node
from tests.conftest import AgentCreds

MakeAgent = Callable[[str], Awaitable[AgentCreds]]


async def test_search_and_read_over_http_are_answered_inline(
    client: TestClient,
    node: Node,
    make_agent: MakeAgent,
    admin_headers: dict[str, str],
) -> None:
    # what is checked is that these routes read quick (on the loop), not the 2 ms budget, which a loaded machine
    # can make a short read overrun (then it is moved, correctly): a budget no read here meets
    node.db.inline_budget_s = 5.0
    agent = await make_agent("quick")
    posted = await client.post(
        "/v1/entries",
        json={"entry_type": "finding", "performative": "inform", "content": "zeppelins float on hydrogen"},
        headers=agent.headers,
    )
    assert posted.status == 201
    entry_id = (await posted.json())["id"]
    found = await client.get("/v1/search", params={"q": "zeppelins"}, headers=agent.headers)
    assert [e["id"] for e in (await found.json())["entries"]] == [entry_id]
    read = await client.get(f"/v1/entries/{entry_id}", headers=agent.headers)
    assert (await read.json())["entries"][0]["content"] == "zeppelins float on hydrogen"
    metrics = await (await client.get("/metrics", headers=admin_headers)).text()
    inline = next(line for line in metrics.splitlines() if line.startswith("bbs_reads_inline_total "))
    assert float(inline.split()[1]) >= 2
    assert "bbs_reads_moved_total 0.0" in metrics
