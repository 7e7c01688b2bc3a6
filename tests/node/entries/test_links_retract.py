"""Links (including to entries not yet present) and retractions through a real server."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp.test_utils import TestClient

from node.service import Node
from tests.conftest import AgentCreds, FakeClock
from tests.node.api_helpers import count, entry_record, get_json, hash_of, link, link_record, post, problem, self_signer

MakeAgent = Callable[[str], Awaitable[AgentCreds]]


async def links_of(client: TestClient, who: Any, ref: str | int) -> list[dict[str, Any]]:
    body = await get_json(client, f"/v1/entries/{ref}", who, params={"include_links": "true"})
    return list(body["links"])


async def test_link_between_present_entries(client: TestClient, make_agent: MakeAgent) -> None:
    alice = await make_agent("alice")
    a = await post(client, alice, content="claim")
    b = await post(client, alice, content="evidence")
    made = await link(
        client, alice, source=str(b["id"]), target=a["record_hash"], link_type="supports", annotation="see table 2"
    )
    assert made["source"] == b["record_hash"] and made["target"] == a["record_hash"]
    assert made["link_type"] == "supports" and made["annotation"] == "see table 2"
    assert made["resolved"] is True and made["derived"] is False and made["author_id"] == alice.agent_id
    assert [x["id"] for x in await links_of(client, alice, a["id"])] == [made["id"]]
    # The same author asserting the same link again is the same link.
    again = await link(client, alice, 200, source=b["record_hash"], target=a["record_hash"], link_type="supports")
    assert again["id"] == made["id"]


async def test_link_errors_store_nothing(client: TestClient, make_agent: MakeAgent, node: Node) -> None:
    alice = await make_agent("alice")
    a = await post(client, alice, content="claim")
    before = await count(node)
    cases = [
        ({"source": "999", "target": a["record_hash"], "link_type": "supports"}, 404, "source_not_found", "$.source"),
        ({"source": "f" * 64, "target": a["record_hash"], "link_type": "supports"}, 404, "source_not_found", None),
        ({"source": a["record_hash"], "target": "12345", "link_type": "supports"}, 404, "target_not_found", "$.target"),
        ({"source": a["record_hash"], "target": "nope", "link_type": "supports"}, 404, "target_not_found", "$.target"),
        ({"source": a["record_hash"], "target": str(a["id"]), "link_type": "supports"}, 422, "self_link", "$.target"),
        ({"source": str(a["id"]), "target": "f" * 64, "link_type": "retracted_by"}, 422, "validation_error", None),
        ({"source": str(a["id"]), "target": "f" * 64, "link_type": "likes"}, 422, "validation_error", "$.link_type"),
        ({"source": str(a["id"]), "target": "f" * 64}, 422, "validation_error", None),
        (
            {"source": str(a["id"]), "target": "f" * 64, "link_type": "supports", "annotation": "x" * 1025},
            422,
            "validation_error",
            "$.annotation",
        ),
    ]
    for body, status, code, field in cases:
        problem(await link(client, alice, status, **body), status, code, field)
    assert await count(node) == before
    assert await count(node, "links") == 0


async def test_link_to_an_entry_not_yet_present_resolves_when_it_arrives(
    client: TestClient, make_agent: MakeAgent, node: Node
) -> None:
    alice = await make_agent("alice")
    bob = await self_signer(node, "bob")
    mine = await post(client, alice, content="depends on bob's future result")
    future = entry_record(bob.key, "bob's result, signed now, posted later", created_ms=node.now_ms())
    future_hash = hash_of(future)
    pending = await link(client, alice, source=mine["record_hash"], target=future_hash, link_type="depends_on")
    assert pending["resolved"] is False
    inline = await post(
        client, alice, content="also cites it", links=[{"target": future_hash, "link_type": "supports"}]
    )
    inline_links = await links_of(client, alice, inline["id"])
    assert [(x["target"], x["resolved"]) for x in inline_links] == [(future_hash, False)]
    # The target arrives (author-signed, with the pre-computed hash).
    resp = await client.post("/v1/entries", json={"record": future}, headers=bob.headers)
    arrived = await resp.json()
    assert resp.status == 201 and arrived["record_hash"] == future_hash
    found = await links_of(client, alice, future_hash)
    assert {(x["source"], x["link_type"], x["resolved"]) for x in found} == {
        (mine["record_hash"], "depends_on", True),
        (inline["record_hash"], "supports", True),
    }


async def test_author_signed_link(client: TestClient, make_agent: MakeAgent, node: Node) -> None:
    alice = await make_agent("alice")
    bob = await self_signer(node, "bob")
    theirs = await post(client, alice, content="alice's claim")
    rec = entry_record(bob.key, "bob's reply", created_ms=node.now_ms())
    assert (await client.post("/v1/entries", json={"record": rec}, headers=bob.headers)).status == 201
    signed = link_record(bob.key, hash_of(rec), theirs["record_hash"], "responds_to", created_ms=node.now_ms())
    resp = await client.post("/v1/links", json={"record": signed}, headers=bob.headers)
    made = await resp.json()
    assert resp.status == 201, made
    assert made["origin_hash"] == hash_of(signed) and made["resolved"] is True
    # alice may not submit bob's link record
    resp = await client.post("/v1/links", json={"record": signed}, headers=alice.headers)
    problem(await resp.json(), 403, "forbidden", "$.record.author_id")
    # a self-link is refused on the signed path too
    loop = link_record(bob.key, hash_of(rec), hash_of(rec), "supports", created_ms=node.now_ms())
    before = await count(node)
    resp = await client.post("/v1/links", json={"record": loop}, headers=bob.headers)
    problem(await resp.json(), 422, "self_link")
    assert await count(node) == before


async def test_retract_own_entry(client: TestClient, make_agent: MakeAgent, clock: FakeClock) -> None:
    alice = await make_agent("alice")
    old = await post(client, alice, content="a claim I will withdraw")
    clock.advance(1)
    retraction = await post(
        client,
        alice,
        entry_type="finding",
        performative="retract",
        content="withdrawn: the measurement was wrong",
        links=[{"target": str(old["id"]), "link_type": "supersedes"}],
    )
    body = await get_json(client, f"/v1/entries/{old['id']}", alice)
    assert body["entries"][0]["retracted"] is True
    assert body["entries"][0]["superseded"] is False  # a retraction is not a newer version
    derived = [x for x in body["links"] if x["link_type"] == "retracted_by"]
    assert len(derived) == 1
    assert derived[0]["source"] == old["record_hash"] and derived[0]["target"] == retraction["record_hash"]
    assert derived[0]["derived"] is True and derived[0]["author_id"] == alice.agent_id


async def test_supersede_marks_superseded(client: TestClient, make_agent: MakeAgent) -> None:
    alice = await make_agent("alice")
    old = await post(client, alice, content="version one")
    await post(client, alice, content="version two", links=[{"target": str(old["id"]), "link_type": "supersedes"}])
    entry = (await get_json(client, f"/v1/entries/{old['id']}", alice))["entries"][0]
    assert entry["superseded"] is True and entry["retracted"] is False


async def test_retract_errors(client: TestClient, make_agent: MakeAgent, node: Node) -> None:
    alice = await make_agent("alice")
    bob = await make_agent("bob")
    hers = await post(client, alice, content="alice's entry")
    before = await count(node)
    problem(
        await post(
            client,
            bob,
            403,
            performative="retract",
            content="bob tries to retract alice",
            links=[{"target": hers["record_hash"], "link_type": "supersedes"}],
        ),
        403,
        "retract_not_own",
        "$.links[0].target",
    )
    problem(
        await post(client, alice, 422, performative="retract", content="retract what?"),
        422,
        "retract_without_target",
        "$.links",
    )
    problem(
        await post(
            client,
            alice,
            422,
            performative="retract",
            content="wrong link type",
            links=[{"target": hers["record_hash"], "link_type": "contradicts"}],
        ),
        422,
        "retract_without_target",
    )
    problem(
        await post(
            client,
            alice,
            404,
            performative="retract",
            content="retract something absent",
            links=[{"target": "e" * 64, "link_type": "supersedes"}],
        ),
        404,
        "target_not_found",
    )
    assert await count(node) == before
    entry = (await get_json(client, f"/v1/entries/{hers['id']}", alice))["entries"][0]
    assert entry["retracted"] is False
