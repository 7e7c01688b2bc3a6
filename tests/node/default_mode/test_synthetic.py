"""Synthetic (truth_state simulation) entries are hidden from read and search unless include_synthetic=true;
the simulation templates' candidates are approved as simulations when what the caller supplied allows it."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import pytest
from aiohttp.test_utils import TestClient

from node.default_mode import templates, words
from tests.conftest import AgentCreds


async def _post(client: TestClient, who: AgentCreds, content: str, truth: str) -> dict[str, Any]:
    resp = await client.post(
        "/v1/entries",
        json={"entry_type": "finding", "performative": "inform", "content": content, "truth_state": truth},
        headers=who.headers,
    )
    assert resp.status == 201, await resp.text()
    return await resp.json()


async def test_synthetic_hidden_by_default_in_read_and_search(
    client: TestClient, make_agent: Callable[[str], Awaitable[AgentCreds]]
) -> None:
    alice = await make_agent("alice")
    fact = await _post(client, alice, "rooftop solar output measured", "fact")
    hypo = await _post(client, alice, "rooftop solar output may double", "hypothesis")
    sim = await _post(client, alice, "rooftop solar output simulated", "simulation")
    h = alice.headers

    async def ids(path: str, **params: str) -> list[int]:
        resp = await client.get(path, params=params, headers=h)
        assert resp.status == 200, await resp.text()
        return sorted(e["id"] for e in (await resp.json())["entries"])

    every = sorted([fact["id"], hypo["id"], sim["id"]])
    ref_list = f"{fact['id']},{hypo['id']},{sim['id']}"
    assert await ids("/v1/search", q="rooftop") == [fact["id"], hypo["id"]]
    assert await ids("/v1/search", q="rooftop", include_synthetic="true") == every
    assert await ids("/v1/search") == [fact["id"], hypo["id"]]
    assert await ids("/v1/entries", ids=ref_list) == [fact["id"], hypo["id"]]
    assert await ids("/v1/entries", ids=ref_list, include_synthetic="true") == every
    assert await ids(f"/v1/entries/{sim['record_hash']}") == []
    assert await ids(f"/v1/entries/{sim['record_hash']}", include_synthetic="true") == [sim["id"]]
    # traversal does not leak them either
    resp = await client.post(
        "/v1/links", json={"source": str(fact["id"]), "target": str(sim["id"]), "link_type": "responds_to"}, headers=h
    )
    assert resp.status == 201
    assert await ids(f"/v1/entries/{fact['id']}", hops="1") == [fact["id"]]
    assert await ids(f"/v1/entries/{fact['id']}", hops="1", include_synthetic="true") == [fact["id"], sim["id"]]


async def test_search_filters_on_truth_state(
    client: TestClient, make_agent: Callable[[str], Awaitable[AgentCreds]]
) -> None:
    alice = await make_agent("alice")
    await _post(client, alice, "tides measured at noon", "fact")
    hypo = await _post(client, alice, "tides may follow the moon", "hypothesis")
    sim = await _post(client, alice, "tides simulated for a year", "simulation")
    resp = await client.get("/v1/search", params={"truth_state": "hypothesis"}, headers=alice.headers)
    assert [e["id"] for e in (await resp.json())["entries"]] == [hypo["id"]]
    resp = await client.get(
        "/v1/search", params={"truth_state": "simulation", "include_synthetic": "true"}, headers=alice.headers
    )
    assert [e["id"] for e in (await resp.json())["entries"]] == [sim["id"]]
    resp = await client.get("/v1/search", params={"truth_state": "opinion"}, headers=alice.headers)
    assert resp.status == 422 and (await resp.json())["field"] == "$.truth_state[0]"


DM = "/v1/default-mode"
TEMPLATES = [
    (templates.simulate_future, ("move the node to a new disk",)),
    (templates.stakeholder_simulation, ("the landlord", "a rooftop antenna")),
    (templates.incubate, ("sync is slow",)),
]


@pytest.mark.parametrize(("make", "args"), TEMPLATES)
def test_the_templates_fixed_text_names_no_risk_word(make: Callable[..., tuple[str, Any]], args: tuple[str]) -> None:
    text, payload = make(*args)
    assert not words.mentions_risk(words.tokens(text)), text  # the text is what the critic reads
    # the payload's strings too (its keys keep the seed's path names, failure_path and hidden_risk)
    assert not words.mentions_risk(words.tokens(" ".join(_strings(payload)))), payload


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for v in value.values():
            yield from _strings(v)
    elif isinstance(value, list):
        for v in value:
            yield from _strings(v)


async def _dm(client: TestClient, path: str, body: dict[str, Any], who: AgentCreds, status: int) -> dict[str, Any]:
    resp = await client.post(f"{DM}/{path}", json=body, headers=who.headers)
    assert resp.status == status, await resp.text()
    return await resp.json()


async def test_simulations_are_approved_as_simulations_and_stay_hidden_once_promoted(
    client: TestClient, make_agent: Callable[[str], Awaitable[AgentCreds]]
) -> None:
    alice = await make_agent("alice")
    evidence = (await _post(client, alice, "The node's disk is 91% full", "fact"))["record_hash"]
    future = await _dm(client, "simulate-future", {"goal": "move the node to a bigger disk",
                                                   "evidence_refs": [evidence]}, alice, 201)  # fmt: skip
    stake = await _dm(client, "stakeholder-simulation", {"stakeholder": "Grandma", "proposal": "a new router",
                                                         "evidence_refs": [evidence]}, alice, 201)  # fmt: skip
    for made in (future["candidate"], stake["candidate"]):
        assert (made["status"], made["truth_state"], made["synthetic"]) == ("approved", "simulation", True)
        assert (made["risk_flag"], made["evidence_flag"]) == (False, True)
        assert made["critic_reasons"] == ["synthetic_stays_simulation"]
    incubated = await _dm(client, "incubate", {"problem": "sync is slow", "evidence_refs": [evidence]}, alice, 201)
    held = incubated["candidate"]
    assert (held["status"], held["truth_state"], held["risk_flag"]) == ("needs_review", "hypothesis", False)
    assert held["critic_reasons"] == ["runtime_summary"]  # held as a runtime summary, not for its text

    promoted = await _dm(client, f"promote/{future['candidate']['id']}", {}, alice, 201)
    entry = promoted["entry"]
    assert (entry["truth_state"], entry["metadata"]["default_mode"]["critic_decision"]) == ("simulation", "approved")
    h = alice.headers
    for path, params in (("/v1/search", {"q": "bigger disk"}), (f"/v1/entries/{entry['record_hash']}", {})):
        hidden = await (await client.get(path, params=params, headers=h)).json()
        assert hidden["entries"] == []
        shown = await (await client.get(path, params={**params, "include_synthetic": "true"}, headers=h)).json()
        assert [e["record_hash"] for e in shown["entries"]] == [entry["record_hash"]]


async def test_the_critic_judges_what_the_caller_supplied(
    client: TestClient, make_agent: Callable[[str], Awaitable[AgentCreds]]
) -> None:
    alice = await make_agent("alice")
    evidence = (await _post(client, alice, "Photos of the children are on the family NAS", "fact"))["record_hash"]
    risky = (await _dm(client, "simulate-future", {"goal": "share the family photos, privacy settings off",
                                                   "evidence_refs": [evidence]}, alice, 201))["candidate"]  # fmt: skip
    assert (risky["status"], risky["truth_state"], risky["risk_flag"]) == ("needs_review", "simulation", True)
    assert risky["critic_reasons"] == ["risk_mentioned", "synthetic_stays_simulation"]
    proposal = {"stakeholder": "the bank", "proposal": "a financial plan for the roof"}
    answer = await _dm(client, "stakeholder-simulation", {**proposal, "evidence_refs": [evidence]}, alice, 201)
    assert (answer["candidate"]["status"], answer["candidate"]["risk_flag"]) == ("needs_review", True)
    # unevidenced, a simulation is held like any other candidate, still a simulation
    bare = (await _dm(client, "simulate-future", {"goal": "paint the fence"}, alice, 201))["candidate"]
    assert (bare["status"], bare["truth_state"], bare["risk_flag"]) == ("needs_review", "simulation", False)
    assert bare["critic_reasons"] == ["no_evidence", "synthetic_stays_simulation"]
