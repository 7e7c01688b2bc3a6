"""Quick reads over HTTP: searches and entry reads answered on the event loop (the budget itself, in node/store/db.py:
tests/node/store/test_db.py; deep search pages on a reader thread: tests/node/entries/test_reads.py)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from aiohttp.test_utils import TestClient

from tests.conftest import AgentCreds

MakeAgent = Callable[[str], Awaitable[AgentCreds]]


async def test_search_and_read_over_http_are_quick_reads(
    client: TestClient,
    make_agent: MakeAgent,
    admin_headers: dict[str, str],
) -> None:
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
    counted = {
        name: float(line.split()[1])
        for line in metrics.splitlines()
        for name in ("bbs_reads_inline_total", "bbs_reads_moved_total")
        if line.startswith(name + " ")
    }
    # both routes read quick: a read answered on the loop counts `inline`, one the budget or a busy database sent
    # to a reader thread counts `moved` (a loaded CI machine makes that happen now and then); a read that is not
    # quick counts neither
    assert counted["bbs_reads_inline_total"] + counted["bbs_reads_moved_total"] >= 2
    assert counted["bbs_reads_inline_total"] >= 1
