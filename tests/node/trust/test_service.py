"""Trust: hand-computed small graphs, rings that cannot inflate themselves, and the REST surface."""

from __future__ import annotations

import random
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from aiohttp.test_utils import TestClient

from node.service import Node
from node.trust import service as trust
from node.trust.service import Signal, compute
from tests.conftest import AgentCreds

MakeAgent = Callable[[str], Awaitable[AgentCreds]]


def _c(endorser: str, author: str, target: str) -> Signal:
    return Signal(endorser, author, target, 1)


def _d(endorser: str, author: str, target: str) -> Signal:
    return Signal(endorser, author, target, -1)


def test_one_confirmation() -> None:
    r = compute([_c("B", "A", "a1")])
    assert r.agents["A"].laplace == pytest.approx(2 / 3)  # (1 + 1) / (1 + 0 + 2)
    assert r.agents["A"].score == pytest.approx(1.5 / 2.5)  # B is neutral (0.5): (1 + .5) / (2 + .5)
    assert r.agents["B"].score == 0.5 and r.agents["B"].laplace == 0.5
    assert r.entries["a1"].community_confidence == pytest.approx((0.6 + 0.5) / (1 + 0.5))


def test_confirmation_and_disconfirmation() -> None:
    r = compute([_c("B", "A", "a1"), _d("C", "A", "a1")])
    a = r.agents["A"]
    assert (a.confirms, a.disconfirms) == (1, 1)
    assert a.laplace == 0.5 and a.score == pytest.approx(1.5 / 3.0)
    assert r.entries["a1"].community_confidence == pytest.approx((0.5 + 0.5) / (1 + 0.5 + 0.5))


def test_a_trusted_endorser_counts_more() -> None:
    r = compute([_c("D", "B", "b1"), _c("B", "A", "a1")])
    assert r.agents["B"].score == pytest.approx(0.6)
    assert r.agents["A"].score == pytest.approx(1.6 / 2.6)  # B's 0.6 counts, not a flat 1
    assert r.agents["A"].laplace == pytest.approx(2 / 3)  # v2.0 does not weigh
    plain = compute([_c("B", "A", "a1")]).agents["A"].score
    assert r.agents["A"].score > plain
    assert r.entries["a1"].community_confidence == pytest.approx((1.6 / 2.6 + 0.6) / 1.6)


def test_repeated_signals_count_once_and_self_signals_never() -> None:
    r = compute([_c("B", "A", "a1"), _c("B", "A", "a1"), _c("A", "A", "a1")])
    assert r.agents["A"].confirms == 1 and r.agents["A"].score == pytest.approx(0.6)


def test_ring_cannot_inflate_itself() -> None:
    ring = ["A", "B", "C"]
    signals = [_c(x, y, f"{y}{n}") for x in ring for y in ring if x != y for n in range(20)]
    r = compute(signals)
    for member in ring:
        assert r.agents[member].laplace == pytest.approx(41 / 42)  # v2.0 alone is fooled
        assert r.agents[member].score == 0.5  # v2.1 is not
    # an outside confirmation lifts only the agent it names, by exactly one neutral endorsement
    r = compute([*signals, _c("O", "A", "A0")])
    assert r.agents["A"].score == pytest.approx(0.6)
    assert r.agents["B"].score == 0.5 and r.agents["C"].score == 0.5
    assert r.entries["A0"].community_confidence == pytest.approx((0.6 + 0.5) / 1.5)
    assert r.entries["B0"].community_confidence == 0.5


def test_cannot_raise_own_score_through_a_longer_cycle() -> None:
    # A confirms B, B confirms C, C confirms A: every edge lies on a cycle through its target.
    r = compute([_c("A", "B", "b1"), _c("B", "C", "c1"), _c("C", "A", "a1"), _c("O", "B", "b2")])
    assert r.agents["B"].score == pytest.approx(0.6)
    assert r.agents["A"].score == 0.5 and r.agents["C"].score == 0.5


def test_pure_function_of_the_signals() -> None:
    signals = [_c("D", "B", "b1"), _c("B", "A", "a1"), _d("C", "A", "a2"), _c("E", "C", "c1"), _c("A", "E", "e1")]
    expected = compute(signals)
    for seed in range(5):
        shuffled = signals[:]
        random.Random(seed).shuffle(shuffled)
        assert compute(shuffled) == expected


def test_components_put_endorsers_first_whatever_the_names_and_the_order() -> None:
    """Alphabetical order disagrees with the endorsements here; a and b confirm each other (one component)."""
    edges = [("z", "y"), ("y", "a"), ("a", "b"), ("b", "a"), ("c", "a"), ("b", "d")]
    comp, order = trust.components(sorted({a for edge in edges for a in edge}), edges)
    assert order == ["c", "z", "y", "a", "b", "d"]  # of the components free to go next, the smallest id first
    assert comp["a"] == comp["b"] and len({comp[a] for a in "abcdyz"}) == 5
    for seed in range(5):
        shuffled = edges[:]
        random.Random(seed).shuffle(shuffled)
        agents = list("dbzyac")
        random.Random(seed).shuffle(agents)
        again, same_order = trust.components(agents, shuffled)
        assert same_order == order
        pairs = [(a, b) for a in order for b in order]
        assert [again[a] == again[b] for a, b in pairs] == [comp[a] == comp[b] for a, b in pairs]


def _reference_scores(signals: list[Signal]) -> dict[str, float]:
    """v2.1 from its definition, without the condensation: a signal counts when the endorser cannot reach the
    target agent back; scores iterated until every chain of endorsements has been followed to its end."""
    sigs = sorted({s for s in signals if s.endorser != s.author})
    agents = sorted({a for s in sigs for a in (s.endorser, s.author)})
    follows = {a: {s.author for s in sigs if s.endorser == a} for a in agents}
    reach: dict[str, set[str]] = {}  # every agent a chain of endorsements leads to from each agent
    for start in agents:
        seen, todo = {start}, [start]
        while todo:
            for b in follows[todo.pop()] - seen:
                seen.add(b)
                todo.append(b)
        reach[start] = seen
    score = dict.fromkeys(agents, 0.5)
    for _ in range(len(agents) + 1):
        new = {}
        for a in agents:
            wc = wd = 0.0
            for s in sigs:
                if s.author != a or s.endorser in reach[a]:  # not a's, or the endorser depends on a
                    continue
                if s.polarity > 0:
                    wc += score[s.endorser]
                else:
                    wd += score[s.endorser]
            new[a] = (1 + wc) / (2 + wc + wd)
        score = new
    return score


@pytest.mark.parametrize("seed", range(20))
def test_scores_over_the_condensation_match_the_definition_on_random_graphs(seed: int) -> None:
    rng = random.Random(seed)
    names = [f"agent{i}" for i in range(rng.randint(2, 12))]
    signals = [
        Signal(rng.choice(names), author, f"{author}/{rng.randint(0, 3)}", rng.choice((1, -1)))
        for author in (rng.choice(names) for _ in range(rng.randint(1, 40)))
    ]
    expected = _reference_scores(signals)
    rng.shuffle(signals)
    result = compute(signals)
    assert {a: s.score for a, s in result.agents.items()} == expected  # exactly: the same sums in the same order


async def _entry(client: TestClient, who: AgentCreds, content: str, **extra: Any) -> dict[str, Any]:
    body = {"entry_type": "finding", "performative": "inform", "content": content, **extra}
    resp = await client.post("/v1/entries", json=body, headers=who.headers)
    assert resp.status == 201, await resp.text()
    return await resp.json()


async def _refresh(client: TestClient, who: AgentCreds) -> dict[str, Any]:
    resp = await client.post("/v1/trust/refresh", headers=who.headers)
    assert resp.status == 200, await resp.text()
    return await resp.json()


async def test_signals_from_records_and_the_rest_surface(client: TestClient, node: Node, make_agent: MakeAgent) -> None:
    alice, bob, carol, dave = [await make_agent(n) for n in ("alice", "bob", "carol", "dave")]
    a1 = await _entry(client, alice, "the river rises in spring")
    a2 = await _entry(client, alice, "the well is forty metres deep")
    c1 = await _entry(client, carol, "river gauge readings")
    # bob: a confirm entry that also carries a supports link -> one signal, not two
    await _entry(client, bob, "confirmed at the gauge", performative="confirm",
                 links=[{"target": a1["record_hash"], "link_type": "supports"}])  # fmt: skip
    # carol: a contradicts link record from her entry -> one disconfirmation of a2
    resp = await client.post("/v1/links", json={"source": c1["record_hash"], "target": a2["record_hash"],
                             "link_type": "contradicts"}, headers=carol.headers)  # fmt: skip
    assert resp.status == 201
    # alice confirming herself counts for nothing; a simulated confirmation counts for nothing
    await _entry(client, alice, "I agree with myself", performative="confirm",
                 links=[{"target": a1["record_hash"], "link_type": "supports"}])  # fmt: skip
    await _entry(client, dave, "simulated agreement", performative="confirm", truth_state="simulation",
                 links=[{"target": a1["record_hash"], "link_type": "supports"}])  # fmt: skip

    # the background refresh may or may not have run since these writes: ask for one now
    await _refresh(client, alice)
    assert (await _refresh(client, alice))["ran"] is False  # nothing new: no recomputation
    agent = await (await client.get(f"/v1/agents/{alice.agent_id}", headers=alice.headers)).json()
    # one confirmation (bob, 0.5) and one disconfirmation (carol, 0.5): (1 + .5) / (2 + .5 + .5)
    assert agent["trust"] == {"score": 0.5, "laplace": 0.5, "confirms": 1, "disconfirms": 1,
                              "computed_seq": agent["trust"]["computed_seq"]}  # fmt: skip
    assert agent["trust"]["computed_seq"] > 0

    async def cc(entry: dict[str, Any]) -> float:
        resp = await client.get(f"/v1/entries/{entry['record_hash']}", params={"include_links": "false"},
                                headers=alice.headers)  # fmt: skip
        return (await resp.json())["entries"][0]["community_confidence"]

    assert await cc(a1) == round((0.5 + 0.5) / 1.5, 4)  # alice's score plus bob's confirmation
    assert await cc(a2) == round(0.5 / 1.5, 4)  # carol's disconfirmation
    assert await cc(c1) == 0.5  # no signals: its author's score
    rows = await node.db.read(lambda c: c.execute("SELECT count(*) FROM entries").fetchone()[0])
    assert rows == 6  # the entries table is never written by trust


async def test_search_by_trust(client: TestClient, make_agent: MakeAgent) -> None:
    alice, bob, carol = [await make_agent(n) for n in ("alice", "bob", "carol")]
    a1 = await _entry(client, alice, "apples keep in the cellar")
    b1 = await _entry(client, bob, "apples keep better in the fridge")
    c1 = await _entry(client, carol, "carol checked the cellar", performative="confirm",
                      links=[{"target": a1["record_hash"], "link_type": "supports"}])  # fmt: skip
    await _refresh(client, alice)

    async def ids(**params: str) -> list[int]:
        resp = await client.get("/v1/search", params=params, headers=alice.headers)
        assert resp.status == 200, await resp.text()
        return [e["id"] for e in (await resp.json())["entries"]]

    assert await ids(q="apples", min_trust="0.55") == [a1["id"]]
    assert await ids(min_trust="0.55") == [a1["id"]]
    assert await ids(sort="trust") == [a1["id"], c1["id"], b1["id"]]
    assert (await ids(q="apples", sort="community_confidence"))[0] == a1["id"]
    resp = await client.get("/v1/search", params={"min_trust": "2"}, headers=alice.headers)
    assert resp.status == 422 and (await resp.json())["field"] == "$.min_trust"
    resp = await client.get("/v1/search", params={"sort": "loudest"}, headers=alice.headers)
    assert resp.status == 422 and (await resp.json())["field"] == "$.sort"


async def test_refresh_inside_the_node_matches_the_pure_function(node: Node, make_agent: MakeAgent) -> None:
    from wire.api import LinkSpec, PostEntry

    alice, bob = [await make_agent(n) for n in ("alice", "bob")]
    a1, _ = await node.entries.post(alice.agent_id, PostEntry(entry_type="finding", performative="inform",
                                                            content="x marks the spot"), None)  # fmt: skip
    await node.entries.post(bob.agent_id, PostEntry(entry_type="finding", performative="confirm", content="seen it",
                          links=[LinkSpec(target=a1.record_hash, link_type="responds_to")]), None)  # fmt: skip
    assert await node.db.write(lambda c: trust.refresh(c, node.now_ms())) is True
    signals = await node.db.read(trust.read_signals)
    assert signals == [Signal(bob.agent_id, alice.agent_id, a1.record_hash, 1)]
    stored = await node.db.read(lambda c: trust.agent_trust(c, alice.agent_id))
    assert (stored.score, stored.laplace) == (0.6, 0.6667)


async def test_an_older_computation_never_overwrites_a_newer_one(node: Node, make_agent: MakeAgent) -> None:
    from wire.api import LinkSpec, PostEntry

    alice, bob = [await make_agent(n) for n in ("alice", "bob")]
    a1, _ = await node.entries.post(alice.agent_id, PostEntry(entry_type="finding", performative="inform",
                                                            content="old snapshot"), None)  # fmt: skip
    old_head, old = await node.db.read(trust.snapshot)
    assert old is not None and old.agents == {}
    await node.entries.post(bob.agent_id, PostEntry(entry_type="finding", performative="confirm", content="agreed",
                          links=[LinkSpec(target=a1.record_hash, link_type="supports")]), None)  # fmt: skip
    fresh = await node.trust.refresh()
    assert fresh.ran and fresh.computed_seq > old_head
    assert await node.db.write(lambda c: trust.store(c, old_head, old, 0)) is False  # stale: refused
    stored = await node.db.read(lambda c: trust.agent_trust(c, alice.agent_id))
    assert stored.score == 0.6 and stored.computed_seq == fresh.computed_seq
    assert (await node.trust.refresh()).ran is False
    assert (await node.trust.refresh(force=True)).ran is True


def test_each_equivocation_weighs_as_one_full_disconfirmation() -> None:
    """node/store/equivocation.py's per-author count lowers the author's score only: (1 + W+) / (2 + W+ + W- + Q)."""
    alone = trust.compute([], {"did:key:zA": 1})
    assert alone.agents["did:key:zA"].score == 1 / 3
    signals = [trust.Signal("did:key:zB", "did:key:zA", "t1", 1)]
    plain, penalised = trust.compute(signals), trust.compute(signals, {"did:key:zA": 2})
    assert plain.agents["did:key:zA"].score == 1.5 / 2.5 and penalised.agents["did:key:zA"].score == 1.5 / 4.5
    assert penalised.agents["did:key:zB"].score == plain.agents["did:key:zB"].score
