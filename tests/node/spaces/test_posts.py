"""Entries inside a space over REST, on a real aiohttp server on loopback (issue 37; docs/spaces.md): writers post,
readers read, non-members see nothing through any entry path, links stay inside their space, a removal takes effect
at once, and every class of bad input is a 4xx problem with its code and field, nothing stored."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp.test_utils import TestClient

from identity import canonical, records, vouching
from node.service import Node
from node.spaces import store
from node.store.conn import any_of
from tests.conftest import AgentCreds
from tests.node.api_helpers import entry_record, self_signer
from tests.node.spaces.test_routes import call, record_count

MakeAgent = Callable[[str], Awaitable[AgentCreds]]


async def space_with(client: TestClient, owner: AgentCreds, **roles: AgentCreds) -> str:
    """A new space of `owner` with each agent of `roles` (role name -> agent) added."""
    space: str = (await call(client, "POST", "/v1/spaces", owner, 201, {"name": "family"}))["space_id"]
    for role, agent in roles.items():  # a role name may end in digits (reader2): one role per agent
        await call(client, "POST", f"/v1/spaces/{space}/members", owner, 201,
                   {"agent_id": agent.agent_id, "role": role.rstrip("0123456789")})  # fmt: skip
    return space


async def post(client: TestClient, who: AgentCreds, content: str, status: int = 201, **fields: Any) -> dict[str, Any]:
    body = {"entry_type": "finding", "performative": "inform", "content": content, **fields}
    return await call(client, "POST", "/v1/entries", who, status, body)


async def get(client: TestClient, path: str, who: AgentCreds | dict[str, str], status: int = 200) -> Any:
    headers = who if isinstance(who, dict) else who.headers
    resp = await client.get(path, headers=headers)
    assert resp.status == status, await resp.text()
    return await resp.json()


async def test_a_writer_posts_into_a_space_and_only_members_read_it(
    client: TestClient, node: Node, make_agent: MakeAgent, admin_headers: dict[str, str]
) -> None:
    owner, bob, carol, eve = [await make_agent(n) for n in ("owner", "bob", "carol", "eve")]
    space = await space_with(client, owner, writer=bob, reader=carol)
    entry = await post(client, bob, "the attic key is under the blue pot", space=space)
    assert entry["space"] == space
    body = await node.db.read(
        lambda c: c.execute("SELECT body, scope, space FROM records WHERE hash = ?", (entry["record_hash"],)).fetchone()
    )
    record = json.loads(bytes(body[0]))
    assert (record["schema_version"], record["space"], body[1], body[2]) == ("v2", space, "federation", space)
    assert (
        records.compute_hash(record)
        == entry["record_hash"]
        == canonical.space_record_hash(
            record["author_id"], record["created_at"], "finding", "inform", record["content"], space
        )
    )
    for who in (owner, bob, carol):
        assert (await get(client, f"/v1/entries/{entry['id']}", who))["entries"][0]["space"] == space
        found = await get(client, "/v1/search?q=attic&fresh=true", who)
        assert [e["record_hash"] for e in found["entries"]] == [entry["record_hash"]]
    for ref in (str(entry["id"]), entry["record_hash"]):
        problem = await get(client, f"/v1/entries/{ref}", eve, 404)
        assert problem["code"] == "entry_not_found"
    assert (await get(client, f"/v1/entries?ids={entry['id']}", eve))["missing"] == [str(entry["id"])]
    assert (await get(client, "/v1/search?q=attic&fresh=true", eve))["entries"] == []
    assert (await get(client, "/v1/search", eve))["entries"] == []
    assert (await get(client, "/v1/feed", eve))["entries"] == []
    assert [e["id"] for e in (await get(client, "/v1/feed", carol))["entries"]] == [entry["id"]]
    problem = await get(client, f"/v1/search?space={space}", eve, 404)
    assert (problem["code"], problem["field"]) == ("unknown_space", "$.space[0]")
    assert [e["id"] for e in (await get(client, f"/v1/search?space={space}", carol))["entries"]] == [entry["id"]]
    operator = await get(client, f"/v1/entries/{entry['id']}", admin_headers)
    assert operator["entries"][0]["space"] == space  # the node's operator reads every space (docs/spaces.md)


async def test_who_may_not_post_into_a_space_stores_nothing(
    client: TestClient, node: Node, make_agent: MakeAgent
) -> None:
    owner, carol, eve = await make_agent("owner"), await make_agent("carol"), await make_agent("eve")
    space = await space_with(client, owner, reader=carol)
    before = await record_count(node)
    problem = await post(client, carol, "a reader writes", 403, space=space)
    assert (problem["code"], problem["field"]) == ("not_a_writer", "$.space")
    problem = await post(client, eve, "a stranger writes", 404, space=space)
    assert (problem["code"], problem["field"]) == ("unknown_space", "$.space")
    problem = await post(client, owner, "no such space", 404, space="a" * 64)
    assert problem["code"] == "unknown_space"
    problem = await post(client, owner, "a bad id", 422, space="not-a-space")
    assert (problem["code"], problem["field"]) == ("validation_error", "$.space")
    batch = {"entries": [{"entry_type": "finding", "performative": "inform", "content": "fine"},
                         {"entry_type": "finding", "performative": "inform", "content": "no",
                          "space": space}]}  # fmt: skip
    problem = await call(client, "POST", "/v1/entries/batch", carol, 403, batch)
    assert (problem["code"], problem["field"]) == ("not_a_writer", "$.entries[1].space")
    assert await record_count(node) == before


async def test_a_self_signed_entry_in_a_space(client: TestClient, node: Node, make_agent: MakeAgent) -> None:
    owner = await make_agent("owner")
    rover = await self_signer(node, "rover")
    space = await space_with(client, owner)
    in_space = entry_record(rover.key, "rover's note", created_ms=node.now_ms(), schema_version="v2", space=space)
    before = await record_count(node)
    problem = await call(client, "POST", "/v1/entries", rover.creds, 404, {"record": in_space})
    assert (problem["code"], problem["field"]) == ("unknown_space", "$.record.space")
    v1_with_space = entry_record(rover.key, "v1 with a space", created_ms=node.now_ms(), space=space)
    problem = await call(client, "POST", "/v1/entries", rover.creds, 422, {"record": v1_with_space})
    assert problem["code"] == "record_malformed"
    v2_without = entry_record(rover.key, "v2 without a space", created_ms=node.now_ms(), schema_version="v2")
    problem = await call(client, "POST", "/v1/entries", rover.creds, 422, {"record": v2_without})
    assert problem["code"] == "record_malformed"
    assert await record_count(node) == before
    await call(
        client, "POST", f"/v1/spaces/{space}/members", owner, 201, {"agent_id": rover.agent_id, "role": "writer"}
    )
    stored = await call(client, "POST", "/v1/entries", rover.creds, 201, {"record": in_space})
    assert stored["space"] == space and stored["record_hash"] == records.compute_hash(in_space)


async def test_links_stay_inside_their_space(client: TestClient, node: Node, make_agent: MakeAgent) -> None:
    owner, eve = await make_agent("owner"), await make_agent("eve")
    space = await space_with(client, owner)
    other = await space_with(client, owner)
    public = await post(client, owner, "public knowledge")
    private = await post(client, owner, "private knowledge", space=space)
    before = await record_count(node)
    link_to_private = [{"target": private["record_hash"], "link_type": "supports"}]
    problem = await post(client, owner, "public naming private", 409, links=link_to_private)
    assert (problem["code"], problem["field"]) == ("link_across_spaces", "$.links[0].target")
    problem = await post(client, owner, "other naming private", 409, links=link_to_private, space=other)
    assert problem["code"] == "link_across_spaces"
    problem = await post(client, eve, "a stranger naming it", 404, links=link_to_private)
    assert (problem["code"], problem["field"]) == ("target_not_found", "$.links[0].target")
    across = {"source": public["record_hash"], "target": private["record_hash"], "link_type": "supports"}
    problem = await call(client, "POST", "/v1/links", owner, 409, across)
    assert (problem["code"], problem["field"]) == ("link_across_spaces", "$.target")
    supersedes_public = [{"target": public["record_hash"], "link_type": "supersedes"}]
    problem = await post(client, owner, "a space's entry superseding a public one", 409, links=supersedes_public,
                         space=space)  # fmt: skip
    assert problem["code"] == "link_across_spaces"
    assert await record_count(node) == before
    inside = await post(client, owner, "private, citing public", space=space,
                        links=[{"target": public["record_hash"], "link_type": "supports"},
                               {"target": private["record_hash"], "link_type": "supports"}])  # fmt: skip
    hops = await get(client, f"/v1/entries/{public['id']}?hops=1", eve)  # the walk does not follow it
    assert [e["id"] for e in hops["entries"]] == [public["id"]] and hops["links"] == []
    hops = await get(client, f"/v1/entries/{public['id']}?hops=1", owner)
    assert {e["id"] for e in hops["entries"]} == {public["id"], inside["id"]}
    found = await get(client, "/v1/search?q=public&hops=1&fresh=true", eve)
    assert [e["id"] for e in found["entries"]] == [public["id"]] and found["links"] == []


async def test_an_address_named_outside_its_space_is_refused(
    client: TestClient, node: Node, make_agent: MakeAgent
) -> None:
    owner = await make_agent("owner")
    rover = await self_signer(node, "rover")
    space = await space_with(client, owner)
    await call(
        client, "POST", f"/v1/spaces/{space}/members", owner, 201, {"agent_id": rover.agent_id, "role": "writer"}
    )
    private = entry_record(rover.key, "predicted", created_ms=node.now_ms(), schema_version="v2", space=space)
    address = records.compute_hash(private)
    public = entry_record(rover.key, "names the future", created_ms=node.now_ms(),
                          links=[{"target": address, "link_type": "supports", "annotation": ""}])  # fmt: skip
    await call(client, "POST", "/v1/entries", rover.creds, 201, {"record": public})  # a hash not held: anyone may
    before = await record_count(node)
    problem = await call(client, "POST", "/v1/entries", rover.creds, 409, {"record": private})
    assert problem["code"] == "named_outside_space"
    assert await record_count(node) == before


async def test_a_removed_member_reads_nothing_and_loses_its_notifications(
    client: TestClient, node: Node, make_agent: MakeAgent
) -> None:
    owner, carol, eve = await make_agent("owner"), await make_agent("carol"), await make_agent("eve")
    space = await space_with(client, owner, reader=carol)
    await call(client, "POST", "/v1/subscriptions", carol, 201, {"tags": ["attic"]})
    await call(client, "POST", "/v1/subscriptions", eve, 201, {"tags": ["attic"]})
    entry = await post(client, owner, "attic plans", space=space, tags=["attic"], directed_to=[eve.agent_id])
    assert (await get(client, "/v1/inbox", eve))["notifications"] == []  # never notified: not a reader
    await post(client, owner, "another", space=space, tags=["attic"])
    assert len((await get(client, "/v1/inbox", carol))["notifications"]) == 2  # leased now
    await post(client, owner, "a third", space=space, tags=["attic"])  # pending
    await call(client, "DELETE", f"/v1/spaces/{space}/members/{carol.agent_id}", owner, 201)
    live = await node.db.read(
        lambda c: c.execute(
            "SELECT count(*) FROM notifications WHERE agent_id = ? AND status IN ('pending', 'leased')",
            (carol.agent_id,),
        ).fetchone()[0]
    )
    assert live == 0  # neither a poll after the lease lapses nor a push delivers them
    assert (await get(client, "/v1/inbox", carol))["notifications"] == []
    assert (await get(client, f"/v1/entries/{entry['id']}", carol, 404))["code"] == "entry_not_found"
    assert (await get(client, "/v1/feed", carol))["entries"] == []
    await call(client, "POST", f"/v1/spaces/{space}/members", owner, 201, {"agent_id": eve.agent_id, "role": "reader"})
    assert len((await get(client, "/v1/feed", eve))["entries"]) == 3  # added later: reads the whole space


async def test_a_writer_with_posts_is_removed_with_the_vouch_for_them_and_its_pages(
    client: TestClient, node: Node, make_agent: MakeAgent
) -> None:
    owner, bob = await make_agent("owner"), await make_agent("bob")
    space = await space_with(client, owner, writer=bob)
    posted = [await post(client, bob, f"note {i}", space=space) for i in range(3)]
    removed = await call(client, "DELETE", f"/v1/spaces/{space}/members/{bob.agent_id}", owner, 201)

    def stored(conn: Any) -> tuple[dict[str, Any], list[dict[str, Any]], list[str]]:
        removal = json.loads(bytes(conn.execute("SELECT body FROM records WHERE hash = ?", (removed["address"],))
                                   .fetchone()[0]))  # fmt: skip
        pages = [json.loads(bytes(r[0])) for r in conn.execute("SELECT body FROM records WHERE kind = 'vouch_page'")]
        test, hashes = any_of(conn, [p["record_hash"] for p in posted])
        versions = [str(r[0]) for r in conn.execute(f"SELECT version FROM records WHERE hash {test}", (hashes,))]
        return removal, pages, sorted(versions)

    removal, pages, versions = await node.db.read(stored)
    assert removal["role"] == "none" and removal["vouches"] == [vouching.vouch(bob.agent_id, versions).as_json()]
    assert [(p["event"], p["subject"], p["page"], p["versions"], p["space"]) for p in pages] == [
        (removed["address"], bob.agent_id, 0, versions, space)
    ]
    assert vouching.verify_page(
        vouching.Vouch.from_json(removal["vouches"][0]), 0, pages[0]["versions"], pages[0]["proof"]
    )
    assert (await post(client, bob, "after the removal", 404, space=space))["code"] == "unknown_space"
    assert [e["id"] for e in (await get(client, f"/v1/search?space={space}", owner))["entries"]] == sorted(
        (p["id"] for p in posted), reverse=True
    )  # what the removal vouches for stays


async def test_a_spaces_entries_never_reach_a_peer(client: TestClient, node: Node, make_agent: MakeAgent) -> None:
    """Until part 2 a space's records stay on the node: the changes feed, fetch by hash or version, the
    reconciliation set and the digest leave them out, as they leave out scope local."""
    owner = await make_agent("owner")
    space = await space_with(client, owner)
    digest_before = await node.sync.digest()
    private = await post(client, owner, "stays here", space=space)
    public = await post(client, owner, "travels")
    changes = await node.sync.changes(0, 1000)
    sent = {address for _, address, _, _ in changes.items}
    assert public["record_hash"] in sent and private["record_hash"] not in sent
    assert not {h for h, _, _ in await node.sync.fetch([private["record_hash"]])}
    digest = await node.sync.digest()
    assert digest.count == digest_before.count + 1  # the public entry only


async def test_a_link_record_in_a_space_is_seen_by_its_readers_only(
    client: TestClient, node: Node, make_agent: MakeAgent
) -> None:
    owner, carol, eve = await make_agent("owner"), await make_agent("carol"), await make_agent("eve")
    space = await space_with(client, owner, reader=carol)
    other = await space_with(client, owner)
    first, second = await post(client, owner, "public one"), await post(client, owner, "public two")
    private = await post(client, owner, "private one", space=space)
    body = {"source": str(first["id"]), "target": str(second["id"]), "link_type": "supports", "space": space}
    link = await call(client, "POST", "/v1/links", owner, 201, body)
    assert link["space"] == space
    public_link = await call(client, "POST", "/v1/links", owner, 201, {**body, "space": None})
    assert public_link["id"] != link["id"]  # the same link asserted in public is another link
    for who, seen in ((owner, {link["id"], public_link["id"]}), (carol, {link["id"], public_link["id"]}),
                      (eve, {public_link["id"]})):  # fmt: skip
        around = await get(client, f"/v1/entries/{first['id']}?hops=1", who)
        assert {k["id"] for k in around["links"]} == seen
    inside = {"source": str(private["id"]), "target": str(first["id"]), "link_type": "supports", "space": space}
    assert (await call(client, "POST", "/v1/links", owner, 201, inside))["space"] == space
    before = await record_count(node)
    problem = await call(client, "POST", "/v1/links", owner, 409, {**inside, "space": other})
    assert (problem["code"], problem["field"]) == ("link_across_spaces", "$.source")
    problem = await call(client, "POST", "/v1/links", carol, 403, body)
    assert (problem["code"], problem["field"]) == ("not_a_writer", "$.space")
    supersede = {"source": str(private["id"]), "target": str(first["id"]), "link_type": "supersedes", "space": space}
    problem = await call(client, "POST", "/v1/links", owner, 409, supersede)
    assert (problem["code"], problem["field"]) == ("link_across_spaces", "$.target")
    assert await record_count(node) == before
    scope = await node.db.read(
        lambda c: tuple(c.execute("SELECT scope, space FROM records WHERE hash = ?", (link["origin_hash"],)).fetchone())
    )
    assert scope == ("federation", space)  # served only to the space's hosts


async def test_a_spaces_links_name_only_entries_held(client: TestClient, node: Node, make_agent: MakeAgent) -> None:
    """A record of a space names by link only entries this node holds (or others of the same request), so its peers
    decide it the same way once they hold the target (node/federation/space_gate.py); a public record still may."""
    owner = await make_agent("owner")
    space = await space_with(client, owner)
    inside = await post(client, owner, "held in the space", space=space)
    unheld = "ab" * 32
    before = await record_count(node)
    problem = await post(client, owner, "names nothing held", 404, space=space,
                         links=[{"target": unheld, "link_type": "supports"}])  # fmt: skip
    assert (problem["code"], problem["field"]) == ("target_not_found", "$.links[0].target")
    body = {"source": str(inside["id"]), "target": unheld, "link_type": "supports", "space": space}
    problem = await call(client, "POST", "/v1/links", owner, 404, body)
    assert (problem["code"], problem["field"]) == ("target_not_found", "$.target")
    assert await record_count(node) == before
    await post(client, owner, "public, naming what is not held", links=[{"target": unheld, "link_type": "supports"}])
    await post(client, owner, "names a held one", space=space,
               links=[{"target": inside["record_hash"], "link_type": "supports"}])  # fmt: skip


async def test_a_public_post_may_not_name_a_redacted_entry_of_a_space(
    client: TestClient, node: Node, make_agent: MakeAgent
) -> None:
    """A redacted entry's body leaves the log, its tombstone keeps its space: a public post naming its address is
    refused as one naming the entry would be (409 for a reader of the space, 404 otherwise), nothing stored."""
    owner, eve = await make_agent("owner"), await make_agent("eve")
    space = await space_with(client, owner)
    secret = await post(client, owner, "the safe's code", space=space)
    resp = await client.post("/v1/redactions", json={"target": secret["record_hash"]}, headers=owner.headers)
    assert resp.status == 201, await resp.text()
    before = await record_count(node)
    links = [{"target": secret["record_hash"], "link_type": "responds_to"}]
    problem = await post(client, owner, "public, naming it", 409, links=links)
    assert (problem["code"], problem["field"]) == ("link_across_spaces", "$.links[0].target")
    problem = await post(client, eve, "a stranger naming it", 404, links=links)
    assert (problem["code"], problem["field"]) == ("target_not_found", "$.links[0].target")
    assert await record_count(node) == before


async def test_a_public_post_may_not_name_an_entry_of_a_space_refused_here(
    client: TestClient, node: Node, make_agent: MakeAgent
) -> None:
    """A post of a space this node refused as void (remembered with its space: docs/decisions.md record 75) is named by
    a public post no more than a held one: 409 for a reader of the space, 404 otherwise, nothing stored."""
    owner, eve = await make_agent("owner"), await make_agent("eve")
    space = await space_with(client, owner)
    refused = "f" * 64
    await node.db.write(lambda c: store.remember_refused_txn(c, [(refused, space, "unvouched")], node.now_ms()))
    before = await record_count(node)
    links = [{"target": refused, "link_type": "responds_to"}]
    problem = await post(client, owner, "public, naming it", 409, links=links)
    assert (problem["code"], problem["field"]) == ("link_across_spaces", "$.links[0].target")
    problem = await post(client, eve, "a stranger naming it", 404, links=links)
    assert (problem["code"], problem["field"]) == ("target_not_found", "$.links[0].target")
    assert await record_count(node) == before


async def test_an_address_a_public_message_depends_on_is_named_outside_its_space(
    client: TestClient, node: Node, make_agent: MakeAgent
) -> None:
    """A public message's dependency names an address as a link does: the entry arriving in a space at that address
    is refused, 409 `named_outside_space`, nothing stored."""
    owner = await make_agent("owner")
    rover = await self_signer(node, "rover")
    space = await space_with(client, owner)
    await call(
        client, "POST", f"/v1/spaces/{space}/members", owner, 201, {"agent_id": rover.agent_id, "role": "writer"}
    )
    private = entry_record(rover.key, "predicted", created_ms=node.now_ms(), schema_version="v2", space=space)
    body = {"message_type": "note", "body": "depends on the future", "dependency_ids": [records.compute_hash(private)]}
    await call(client, "POST", "/v1/agent-workflows/messages", owner, 201, body)  # a hash not held: anyone may
    before = await record_count(node)
    problem = await call(client, "POST", "/v1/entries", rover.creds, 409, {"record": private})
    assert (problem["code"], problem["field"]) == ("named_outside_space", "$.record")
    assert await record_count(node) == before
