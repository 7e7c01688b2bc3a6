"""Quick reads over HTTP: searches and entry reads answered on the event loop, and the words of searches that ran
over the inline budget sent to the reader threads (the budget itself, in node/db.py: tests/node/test_db.py)."""

from __future__ import annotations

from aiohttp.test_utils import TestClient

from node.queries import HeavyWords
from node.service import Node


async def test_search_and_read_over_http_are_answered_inline(
    client: TestClient,
    make_agent,
    admin_headers: dict[str, str],  # type: ignore[no-untyped-def]
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
    inline = next(line for line in metrics.splitlines() if line.startswith("bbs_reads_inline_total "))
    assert float(inline.split()[1]) >= 2
    assert "bbs_reads_moved_total 0.0" in metrics


def test_heavy_words_are_remembered_in_any_case_and_the_oldest_forgotten_first() -> None:
    heavy = HeavyWords(size=2, strikes=1)
    heavy.observe(["Kernel"], overran=True)
    assert heavy.any_of(["the", "KERNEL"]) and not heavy.any_of(["zeppelin"])
    heavy.observe(["alpha"], overran=True)
    assert heavy.any_of(["kernel"])  # seen again: now the newest
    heavy.observe(["beta"], overran=True)  # over the size: the least recently seen (alpha) goes
    assert heavy.any_of(["kernel"]) and heavy.any_of(["beta"]) and not heavy.any_of(["alpha"])


def test_a_word_is_remembered_only_after_overruns_in_a_row() -> None:
    heavy = HeavyWords()  # two strikes
    heavy.observe(["zeppelin", "Kernel"], overran=True)  # e.g. the first search on a cold connection
    assert not heavy.any_of(["zeppelin"]) and not heavy.any_of(["kernel"])
    heavy.observe(["ZEPPELIN"], overran=False)  # within the budget: no longer a suspect
    heavy.observe(["zeppelin", "kernel"], overran=True)
    assert not heavy.any_of(["zeppelin"])  # one overrun in a row again
    assert heavy.any_of(["kernel"])  # the second in a row
    heavy.observe(["zeppelin"], overran=True)
    assert heavy.any_of(["zeppelin"])


def test_suspects_are_bounded_like_the_remembered_words() -> None:
    heavy = HeavyWords(size=2)
    for word in ("a", "b", "c"):  # one overrun each: c pushes a out of the suspects
        heavy.observe([word], overran=True)
    for word in ("c", "b", "a"):  # a second overrun: remembered, but a starts again from one
        heavy.observe([word], overran=True)
    assert not heavy.any_of(["a"]) and heavy.any_of(["b"]) and heavy.any_of(["c"])


async def test_a_search_that_held_the_loop_too_long_sends_its_words_to_the_reader_threads(
    client: TestClient,
    node: Node,
    make_agent,  # type: ignore[no-untyped-def]
    admin_headers: dict[str, str],
) -> None:
    agent = await make_agent("words")
    for content in ("alpha beta", "gamma delta"):
        posted = await client.post(
            "/v1/entries",
            json={"entry_type": "finding", "performative": "inform", "content": content},
            headers=agent.headers,
        )
        assert posted.status == 201

    async def search(q: str) -> tuple[list[str], int, int]:
        before = (node.db.read_stats.inline, node.db.read_stats.moved)
        # as the admin: an agent's search first looks up its newest entry (one more quick read: docs/api.md)
        found = await client.get("/v1/search", params={"q": q}, headers=admin_headers)
        assert found.status == 200
        after = (node.db.read_stats.inline, node.db.read_stats.moved)
        return [e["content"] for e in (await found.json())["entries"]], after[0] - before[0], after[1] - before[1]

    assert await search("alpha") == (["alpha beta"], 1, 0)  # on the loop, within the budget
    node.db.inline_budget_s = 1e-9  # every search now outlasts the budget: twice in a row, its words are remembered
    for q in ("Beta", "beta"):
        contents, inline, moved = await search(q)
        assert contents == ["alpha beta"] and inline + moved == 1
    node.db.inline_budget_s = 1.0
    assert await search("BETA") == (["alpha beta"], 0, 0)  # a remembered word: straight to a reader thread
    assert await search("alpha beta") == (["alpha beta"], 0, 0)
    assert await search("gamma") == (["gamma delta"], 1, 0)  # other words still run on the loop
