"""The vouched-set rule on a node (issue 37; docs/spaces.md, "Removal with posts"): a removal that vouches for fewer
posts than the node holds voids the others, out of every read path and the sync feed, whatever order the records
came in, and a later record giving the member its writer role back shows them again. Real nodes, real signed
records, REST on a real aiohttp server on loopback and sync ingest as a peer's batch is taken."""

from __future__ import annotations

import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient

from identity import canonical, keys, records, vouching
from node.federation.store import add_peer_txn
from node.ops.datadir import initialise
from node.service import Node
from node.spaces.service import nonce
from node.store import db, projections, void
from node.store.conn import Conn
from sync.store import Verified
from sync.verify import verify_record
from tests.node.api_helpers import entry_record, self_signer
from tests.node.federation.v3_story import key_event, vouch_page
from tests.node.migrated import database_before
from tests.node.spaces.test_orders import owners_node, register
from tests.node.spaces.test_posts import MakeAgent, get, post
from tests.node.spaces.test_routes import call, record_count

NODE_B = keys.SigningKey.from_seed(b"\x0b" * 32).did  # a second host of the space: what the sync feed serves it
PEER = keys.SigningKey.from_seed(b"\x4e" * 32).did
OWNER, BOB = keys.SigningKey.from_seed(b"\x51" * 32), keys.SigningKey.from_seed(b"\x52" * 32)


def signed(key: keys.SigningKey, second: int = 0, **body: Any) -> dict[str, Any]:
    return records.sign({"schema_version": canonical.SCHEMA_VERSION, "author_id": key.did,
                         "created_at": f"2026-12-01T10:00:{second:02d}Z", **body}, key)  # fmt: skip


def membership(key: keys.SigningKey, space: str, member: str, role: str, prior: dict[str, Any] | None = None,
               vouched: list[str] | None = None) -> dict[str, Any]:  # fmt: skip
    """The next `space_member` record of `member` after `prior`; a lowering vouches for `vouched`."""
    extra: dict[str, Any] = {"seq": 1}
    if prior is not None:
        extra = {"seq": prior["seq"] + 1, "prior": records.compute_hash(prior)}
    if vouched is not None:
        extra["vouches"] = [vouching.vouch(member, vouched).as_json()]
    return signed(key, 5 + extra["seq"], kind="space_member", space=space, member=member, role=role, **extra)


def page_of(key: keys.SigningKey, removal: dict[str, Any], vouched: list[str]) -> dict[str, Any]:
    """Page 0 of the removal's vouch for its member (`vouched`: one page's worth)."""
    versions, proof = vouching.page(sorted(vouched), 0)
    return signed(key, 30, kind="vouch_page", event=records.compute_hash(removal), subject=removal["member"], page=0,
                  versions=versions, proof=proof, space=removal["space"])  # fmt: skip


async def version_of(node: Node, address: str) -> str:
    sql = "SELECT version FROM records WHERE hash = ?"
    return await node.db.read(lambda c: str(c.execute(sql, (address,)).fetchone()[0]))


async def served_to_host(node: Node) -> set[str]:
    """The addresses the sync feed serves a peer hosting the space."""
    return {address for _, address, _, _ in (await node.sync.changes(0, 1000, NODE_B)).items}


async def test_a_client_signed_removal_vouching_for_one_of_three_posts_hides_the_other_two(
    client: TestClient, node: Node, make_agent: MakeAgent
) -> None:
    owner, bob, carol = await self_signer(node, "owner"), await make_agent("bob"), await make_agent("carol")
    creation = signed(owner.key, kind="space", name="family", description="", nonce=nonce())
    space = (await call(client, "POST", "/v1/spaces", owner.creds, 201, {"record": creation}))["space_id"]
    members = f"/v1/spaces/{space}/members"
    added = membership(owner.key, space, bob.agent_id, "writer")
    await call(client, "POST", members, owner.creds, 201, {"record": added})
    reader = membership(owner.key, space, carol.agent_id, "reader")
    await call(client, "POST", members, owner.creds, 201, {"record": reader})
    host = signed(owner.key, 3, kind="space_host", space=space, node=NODE_B, role="host", seq=1)
    await call(client, "POST", f"/v1/spaces/{space}/hosts", owner.creds, 201, {"record": host})
    await call(client, "POST", "/v1/subscriptions", carol, 201, {"tags": ["attic"]})
    kept = await post(client, bob, "attic plans zeppelin", space=space, tags=["attic"])
    gone = [await post(client, bob, f"attic note {i} zeppelin", space=space, tags=["attic"],
                       links=[{"target": kept["record_hash"], "link_type": "supports"}]) for i in range(2)]  # fmt: skip
    every = {e["id"] for e in [kept, *gone]}
    readers = [owner.creds, carol]

    async def visible(who: Any) -> dict[str, set[int]]:
        ids = {i for i in every if (await client.get(f"/v1/entries/{i}", headers=who.headers)).status == 200}
        search = {e["id"] for e in (await get(client, f"/v1/search?space={space}", who))["entries"]}
        words = {e["id"] for e in (await get(client, "/v1/search?q=zeppelin&fresh=true", who))["entries"]}
        feed = {e["id"] for e in (await get(client, "/v1/feed?after=0", who))["entries"]} & every
        hops = await get(client, f"/v1/entries/{kept['id']}?hops=1", who)
        linked = {e["id"] for e in hops["entries"]} - {kept["id"]}
        sources = {link["source"] for link in hops["links"]}
        assert sources == {e["record_hash"] for e in gone if e["id"] in linked}  # a hidden post's links go too
        return {"ids": ids, "search": search, "words": words, "feed": feed, "hops": linked}

    async def inbox() -> set[int]:
        return {n["entry_id"] for n in (await get(client, "/v1/inbox?limit=50", carol))["notifications"]}

    for who in readers:
        assert await visible(who) == {"ids": every, "search": every, "words": every, "feed": every,
                                      "hops": every - {kept["id"]}}  # fmt: skip
    addresses = {e["record_hash"] for e in [kept, *gone]}
    assert addresses <= await served_to_host(node)

    removal = membership(owner.key, space, bob.agent_id, "none", added, [await version_of(node, kept["record_hash"])])
    page = page_of(owner.key, removal, [await version_of(node, kept["record_hash"])])
    await call(client, "POST", members, owner.creds, 201, {"record": removal, "pages": [page]})

    for who in readers:
        assert await visible(who) == {"ids": {kept["id"]}, "search": {kept["id"]}, "words": {kept["id"]},
                                      "feed": {kept["id"]}, "hops": set()}  # fmt: skip
    assert await inbox() == {kept["id"]}  # never polled before: the hidden posts' notifications went with them
    served = await served_to_host(node)
    assert kept["record_hash"] in served and not served & {e["record_hash"] for e in gone}
    flagged = await node.db.read(lambda c: void.listing(c, 0, 100))
    assert sorted((r.hash, r.reason) for r in flagged) == sorted((e["record_hash"], "space_unvouched") for e in gone)

    def rebuilt(conn: Conn) -> tuple[tuple[list[str], list[str]], tuple[list[str], list[str]]]:
        before = _shown(conn, space)
        projections.rebuild(conn)
        return before, _shown(conn, space)

    before, after = await node.db.write(rebuilt)
    assert before == after == ([kept["record_hash"]], [kept["record_hash"]])

    back = membership(owner.key, space, bob.agent_id, "writer", removal)  # the owner gives bob the role back
    await call(client, "POST", members, owner.creds, 201, {"record": back})
    for who in readers:
        assert (await visible(who))["search"] == every
    assert addresses <= await served_to_host(node)
    assert await node.db.read(lambda c: void.count(c)) == 0


async def test_pages_that_do_not_belong_to_the_removal_are_refused_and_nothing_is_stored(
    client: TestClient, node: Node, make_agent: MakeAgent
) -> None:
    owner, bob = await self_signer(node, "owner"), await make_agent("bob")
    creation = signed(owner.key, kind="space", name="family", description="", nonce=nonce())
    space = (await call(client, "POST", "/v1/spaces", owner.creds, 201, {"record": creation}))["space_id"]
    members = f"/v1/spaces/{space}/members"
    added = membership(owner.key, space, bob.agent_id, "writer")
    await call(client, "POST", members, owner.creds, 201, {"record": added})
    kept = await post(client, bob, "kept", space=space)
    version = await version_of(node, kept["record_hash"])
    removal = membership(owner.key, space, bob.agent_id, "none", added, [version])
    other = membership(owner.key, space, bob.agent_id, "reader", added, [version])
    before = await record_count(node)
    cases = [
        ({"record": removal, "pages": [page_of(owner.key, other, [version])]}, "page_not_of_event", "$.pages[0].event"),
        ({"record": removal, "pages": [page_of(owner.key, removal, ["0" * 64])]}, "bad_vouch_page", "$.pages[0]"),
        ({"record": removal, "pages": [{**page_of(owner.key, removal, [version]), "kind": "entry"}]},
         "record_malformed", "$.pages[0].kind"),
        ({"agent_id": bob.agent_id, "role": "none", "pages": [page_of(owner.key, removal, [version])]},
         "validation_error", "$.pages"),
    ]  # fmt: skip
    for body, code, field in cases:
        problem = await call(client, "POST", members, owner.creds, 422, body)
        assert (problem["code"], problem["field"]) == (code, field)
    assert await record_count(node) == before


def _records(space: str) -> dict[str, dict[str, Any]]:
    """Bob's membership, its removal vouching for the first of his three posts, its page, and the posts."""
    posts = [entry_record(BOB, f"note {i}", created_ms=1_700_000_000_000 + i, schema_version="v2", space=space)
             for i in range(3)]  # fmt: skip
    added = membership(OWNER, space, BOB.did, "writer")
    kept = _verified(posts[0]).version  # an entry's version: the SHA-256 of its signed bytes
    removal = membership(OWNER, space, BOB.did, "none", added, [kept])
    return {"added": added, "removal": removal, "page": page_of(OWNER, removal, [kept]),
            **{f"post{i}": p for i, p in enumerate(posts)}}  # fmt: skip


def _verified(record: dict[str, Any]) -> Verified:
    checked = verify_record(canonical.canonical_bytes(record), records.compute_hash(record))
    assert isinstance(checked, Verified), checked
    return checked


async def _arrive(node: Node, batches: list[list[dict[str, Any]]]) -> None:
    """Ingest each batch from a peer; what is refused (waiting for what it depends on) is offered again, as
    reconciliation does, until nothing more is taken."""
    await node.db.write(lambda c: add_peer_txn(c, "http://127.0.0.1:9", PEER, node.now_ms()))
    refused: list[dict[str, Any]] = []
    for batch in batches:
        outcomes = await node.sync.ingest(PEER, [_verified(r) for r in [*refused, *batch]], [], None)
        taken = {o.hash for o in outcomes if o.outcome == "saved"}
        refused = [r for r in [*refused, *batch] if records.compute_hash(r) not in taken]
    while refused:
        outcomes = await node.sync.ingest(PEER, [_verified(r) for r in refused], [], None)
        taken = {o.hash for o in outcomes if o.outcome == "saved"}
        if not taken:
            break
        refused = [r for r in refused if records.compute_hash(r) not in taken]


def _shown(conn: Conn, space: str) -> tuple[list[str], list[str]]:
    """The space's entries every reader may see, and the ones the sync feed may serve (held, not flagged)."""
    shown = conn.execute("SELECT record_hash FROM entries WHERE space = ? ORDER BY 1", (space,)).fetchall()
    served = conn.execute(
        "SELECT hash FROM records WHERE space = ? AND kind = 'entry' AND seq NOT IN (SELECT seq FROM void_records)"
        " ORDER BY 1",
        (space,),
    ).fetchall()
    return [str(r[0]) for r in shown], [str(r[0]) for r in served]


async def test_every_arrival_order_gives_the_same_visibility(
    tmp_path: Path, node_store: Callable[[], str | None]
) -> None:
    creation = signed(OWNER, kind="space", name="family", description="", nonce=nonce())
    space = records.compute_hash(creation)
    r = _records(space)
    posts = [r["post0"], r["post1"], r["post2"]]
    orders: dict[str, list[list[dict[str, Any]]]] = {
        "posts, then the removal": [[r["added"]], posts, [r["removal"], r["page"]]],
        "the removal, then the posts": [[r["added"], r["removal"], r["page"]], posts],
        "posts before the page": [[r["added"], r["removal"]], posts, [r["page"]]],
        "one batch": [[r["page"], *posts, r["removal"], r["added"]]],
    }
    rnd = random.Random(37)
    for n in range(4):
        every = [r["added"], r["removal"], r["page"], *posts]
        rnd.shuffle(every)
        orders[f"shuffled {n}"] = [[record] for record in every]
    expected = [records.compute_hash(r["post0"])]
    for n, (name, batches) in enumerate(orders.items()):
        async with owners_node(tmp_path / f"node-{n}", OWNER, node_store()) as node:
            await node.spaces.submit(OWNER.did, creation)  # created here: this node hosts the space
            await _arrive(node, batches)
            assert await node.db.read(lambda c: _shown(c, space)) == (expected, expected), name

            def rebuilt(conn: Conn) -> tuple[list[str], list[str]]:
                projections.rebuild(conn)
                return _shown(conn, space)

            assert await node.db.write(rebuilt) == (expected, expected), name


@pytest.mark.sqlite_only(reason="migration 0040 is a SQLite migration; PostgreSQL starts from the baseline")
def test_the_migration_lists_the_vouch_pages_of_a_space(tmp_path: Path) -> None:
    """0040 on a database of before it: a space's vouch pages (their `space` set) are listed in `space_records`; a
    key event's page, and a space's page flagged void, are not."""
    conn = database_before(tmp_path / "node.sqlite", 40)
    space = "c" * 64
    rows = [  # (hash, kind, space)
        ("01", "vouch_page", space),
        ("02", "vouch_page", None),  # a key event's page
        ("03", "vouch_page", space),  # flagged void below
        ("04", "entry", space),
    ]
    with db.transaction(conn, immediate=True):
        for record_hash, kind, in_space in rows:
            conn.execute(
                "INSERT INTO records (hash, version, kind, author_id, created_at, created_ms, scope, origin,"
                " received_ms, body, space) VALUES (?, ?, ?, 'did:key:zowner', '2026-01-01T00:00:00Z', 0,"
                " 'federation', 'local', 0, x'7b7d', ?)",
                (record_hash, record_hash, kind, in_space),
            )
        conn.execute(
            "INSERT INTO void_records (seq, version, hash, kind, author_id, reason, flagged_ms)"
            " VALUES (3, '03', '03', 'vouch_page', 'did:key:zowner', 'revoked_key', 0)"
        )
    assert db.migrate(conn) >= 40
    listed = [tuple(r) for r in conn.execute("SELECT seq, space_id, kind FROM space_records ORDER BY seq")]
    assert listed == [(1, space, "vouch_page")]
    conn.close()


async def test_a_key_event_vouching_for_posts_their_space_voids_does_not_show_them(
    tmp_path: Path, node_store: Callable[[], str | None]
) -> None:
    """The author's rotation vouches for every post of its old key (node/store/void.py decides them valid by key);
    the two its space voids stay hidden: only the space's judgement unflags them."""
    creation = signed(OWNER, kind="space", name="family", description="", nonce=nonce())
    space = records.compute_hash(creation)
    r = _records(space)
    posts = [r["post0"], r["post1"], r["post2"]]
    initialise(tmp_path / "node", node_store())
    node = Node(tmp_path / "node")
    node.open()
    try:
        await register(node, OWNER)
        await node.spaces.submit(OWNER.did, creation)
        await _arrive(node, [[r["added"], *posts], [r["removal"], r["page"]]])
        kept = [records.compute_hash(r["post0"])]
        assert await node.db.read(lambda c: _shown(c, space)) == (kept, kept)
        versions = [_verified(p).version for p in posts]
        rotation = key_event(BOB, "rotate", 1, installs=keys.SigningKey.from_seed(b"\x53" * 32),
                             vouches=[vouching.vouch(BOB.did, versions)], author=BOB.did)  # fmt: skip
        await _arrive(node, [[rotation, vouch_page(BOB, rotation, BOB, versions, author=BOB.did)]])
        assert await node.db.read(lambda c: _shown(c, space)) == (kept, kept)
        reasons = {row.reason for row in await node.db.read(lambda c: void.listing(c, 0, 100))}
        assert reasons == {"space_unvouched"}
    finally:
        node.close()
