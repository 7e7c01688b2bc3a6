"""Reconciliation runs per set (issue 38; docs/sync.md, "Reconciliation round"): the public federation and each
space both nodes host, one negentropy session each, on real nodes on loopback. The responder keeps one snapshot per
set, not one per peer; a peer naming a space it does not host is answered as if the space did not exist; a peer of
the previous release (no `set`) is still answered over the whole set served to it."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from identity import keys
from node.federation import routes
from sync import messages as m
from sync.client import SyncError
from sync.memory import MemoryStore
from sync.negentropy import Negentropy, VectorStorage
from sync.server import SyncServer
from sync.store import PeerConfig, Verified
from tests.sync.conftest import PeerNode, body_of, hash_of, signed_entry
from tests.sync.test_compat import signed
from tests.sync.test_space_hosting import post_in, space_versions

OTHER_SPACE = "ab" * 32  # a well-formed space id no node holds


async def spaces_on_a(make_peer: Any) -> tuple[PeerNode, PeerNode, PeerNode, list[str], str]:
    """A, B and C peered with A (each way); on A two spaces hosted by A and B, a third hosted by A and C, each
    with posts, and public posts. B and C have pulled nothing yet."""
    a, b, c = await make_peer("a"), await make_peer("b"), await make_peer("c")
    for one, other in ((a, b), (b, a), (a, c), (c, a)):
        await one.add_peer(other)
    owner = await a.agent("owner")
    spaces = []
    for name, host in (("family", b), ("work", b), ("club", c)):
        space = (await a.node.spaces.create(owner, name, "")).space_id
        await a.node.spaces.set_host(owner, space, host.node_id, "host")
        for n in range(2):
            await post_in(a, owner, f"{name} note {n}", space)
        spaces.append(space)
    await a.post(owner, "public news")
    return a, b, c, spaces, owner


async def ask(
    asker: PeerNode, server: PeerNode, set_: str | None, held: list[tuple[int, bytes]]
) -> tuple[list[Any], set[str], set[str]]:
    """The responder's replies to an initiator holding `held`, rounds over `set_` (None: no `set`, as the previous
    release asks), and the versions the initiator learns it has and needs."""
    neg = Negentropy(VectorStorage(held))
    message: bytes | None = neg.initiate()
    replies: list[Any] = []
    have: list[bytes] = []
    need: list[bytes] = []
    while message is not None:
        body: dict[str, Any] = {"type": "reconcile", "v": m.PROTOCOL_VERSION, "message": message.hex()}
        if set_ is not None:
            body["set"] = set_
        status, reply = await signed(asker, server, "POST", "/v1/sync/reconcile", body)
        assert status == 200, reply
        replies.append(reply)
        if reply["message"] is None:
            break
        message = neg.reconcile(bytes.fromhex(reply["message"]), have, need)
    return replies, {h.hex() for h in have}, {h.hex() for h in need}


async def test_two_nodes_reconcile_the_public_federation_and_each_shared_space_as_its_own_set(make_peer: Any) -> None:
    a, b, c, (family, work, club), owner = await spaces_on_a(make_peer)
    # B holds nothing of the spaces yet: A's reply to the public round offers the two it serves B, so B takes their
    # whole backlog in one reconciliation of three sets; nothing of the third space
    report = await b.puller().reconcile(a.config)
    assert report.sets == 3 and report.rounds >= 3
    for space in (family, work):
        assert await space_versions(b, space) == await space_versions(a, space)
    assert await space_versions(b, club) == set()
    assert await a.digest() == await b.digest()  # the public federation's, unchanged by spaces
    # now B hosts both by its own view too: again three sets, nothing needed either way
    again = await b.puller().reconcile(a.config)
    assert (again.sets, again.need, again.have) == (3, 0, 0)
    # C: the public federation and its one space
    report = await c.puller().reconcile(a.config)
    assert report.sets == 2
    assert await space_versions(c, club) == await space_versions(a, club) and not await space_versions(c, family)
    # A's responder keeps one vector per set, whichever peers asked: not one per peer's whole filter
    v = m.PROTOCOL_VERSION
    assert a.sync.server.snapshots() == sorted(f"v{v} {s}" for s in (m.PUBLIC_SET, family, work, club))
    # the store moves: the next round rebuilds what it reads and drops the vectors gone stale (kept for no one)
    await a.post(owner, "news after the rounds")
    await c.puller().reconcile(a.config)
    assert a.sync.server.snapshots() == sorted(f"v{v} {s}" for s in (m.PUBLIC_SET, club))


async def test_a_space_not_served_to_the_asker_is_answered_as_one_that_does_not_exist(make_peer: Any) -> None:
    a, b, c, (family, _work, club), _owner = await spaces_on_a(make_peer)
    await b.puller().reconcile(a.config)
    _epoch, _head, held = await b.sync.store.set_items(space=family)
    assert held  # B holds the space: it names its records' fingerprints, as a host asking would
    # C asks for a space it does not host, holding nothing, or holding what B holds: the replies are those to a
    # space id no node holds (no fingerprint, count or id of it), and no reply lists the space
    for items in ([], held):
        asked, _have, need = await ask(c, a, family, items)
        unknown, _have, _need = await ask(c, a, OTHER_SPACE, items)
        assert [r["message"] for r in asked] == [r["message"] for r in unknown] and need == set()
    # the public round tells each asker only the spaces both host
    (public_c, *_), _have, _need = await ask(c, a, m.PUBLIC_SET, [])
    (public_b, *_), _have, _need = await ask(b, a, m.PUBLIC_SET, [])
    assert public_c["spaces"] == [club] and family in public_b["spaces"] and club not in public_b["spaces"]
    # a round over a space carries no list; a malformed set is a 422 naming the field, nothing answered
    replies, have, need = await ask(b, a, family, held)
    assert not any("spaces" in r for r in replies) and (have, need) == (set(), set())  # B and A are in sync
    body = {"type": "reconcile", "message": Negentropy(VectorStorage([])).initiate().hex(), "set": "family"}
    status, problem = await signed(c, a, "POST", "/v1/sync/reconcile", body)
    assert status == 422 and (problem["code"], problem["field"]) == ("validation_error", "$.set")


async def test_a_peer_of_the_previous_release_is_answered_over_the_whole_set_served_to_it(make_peer: Any) -> None:
    a, b, _c, (family, work, club), _owner = await spaces_on_a(make_peer)
    # an initiator holding nothing, naming no set: it learns the public federation and both spaces it hosts with A
    replies, _have, need = await ask(b, a, None, [])
    assert not any("spaces" in r for r in replies)  # only the reply it knows
    public = {h.hex() for _, h in (await a.sync.store.set_items())[2]}
    spaces: set[str] = set().union(*[await space_versions(a, s) for s in (family, work)])
    assert need == public | spaces and not need & await space_versions(a, club)
    assert f"v{m.PROTOCOL_VERSION} whole {b.node_id}" in a.sync.server.snapshots()


async def test_the_memory_store_answers_rounds_per_set_by_the_same_rule() -> None:
    me, peer, stranger, author = (keys.SigningKey.generate() for _ in range(4))
    store = MemoryStore(node_id=me.did)
    space = "cd" * 32
    store.hosts[space] = frozenset({me.did, peer.did})
    public = signed_entry(author, "public")
    store.add(Verified(hash_of(public), body_of(public), public, None))
    inside = {**signed_entry(author, "in the space"), "space": space}
    in_space = Verified(hash_of(inside), body_of(inside), inside, None)
    store.add(in_space)
    server = SyncServer(store)
    start = Negentropy(VectorStorage([])).initiate().hex()

    async def round_(asker: str, set_: str) -> m.ReconcileReply:
        return await server.reconcile(m.ReconcileRequest(message=start, set=set_), asker)

    assert (await round_(peer.did, m.PUBLIC_SET)).spaces == [space]
    assert (await round_(stranger.did, m.PUBLIC_SET)).spaces == []
    assert (await round_(peer.did, space)).message != (await round_(peer.did, OTHER_SPACE)).message
    assert (await round_(stranger.did, space)).message == (await round_(stranger.did, OTHER_SPACE)).message
    assert (await round_(stranger.did, space)).spaces is msgspec.UNSET
    _e, _h, items = await store.set_items(space=space)
    _e, _h, public_items = await store.set_items()
    assert [i.hex() for _, i in items] == [in_space.version]
    assert in_space.version not in [i.hex() for _, i in public_items]
    assert server.snapshots() == sorted(f"v{m.PROTOCOL_VERSION} {s}" for s in (m.PUBLIC_SET, space))


class PreviousReconcileRequest(
    msgspec.Struct, tag_field="type", tag="reconcile", forbid_unknown_fields=True, kw_only=True
):
    """The reconciliation request as the release before per-space rounds decodes it: no `set`."""

    v: int = m.PROTOCOL_VERSION
    message: str


async def test_a_responder_of_the_previous_release_is_reconciled_in_one_whole_set(
    make_peer: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A stands for the previous release: its reconciliation route decodes requests as that release did, so a
    request naming a set is refused 422 (unknown member `set`). B falls back to one session over the whole set
    served to it and still gets the public federation and the backlog of both spaces it hosts with A."""
    a, b, _c, (family, work, club), _owner = await spaces_on_a(make_peer)
    decode = routes._decode

    def previous(body: bytes, typ: type[msgspec.Struct]) -> msgspec.Struct:
        if typ is not m.ReconcileRequest:
            return decode(body, typ)
        old = decode(body, PreviousReconcileRequest)
        assert isinstance(old, PreviousReconcileRequest)
        return m.ReconcileRequest(v=old.v, message=old.message)

    monkeypatch.setattr(routes, "_decode", previous)
    report = await b.puller().reconcile(a.config)
    assert report.sets == 1 and report.outcomes
    for space in (family, work):
        assert await space_versions(b, space) == await space_versions(a, space)
    assert await space_versions(b, club) == set() and await a.digest() == await b.digest()


async def test_a_hostile_responders_list_of_spaces_is_a_malformed_batch(make_peer: Any) -> None:
    """A responder (a small aiohttp server speaking the wire format) that lists spaces in reply to a space's round,
    or offers more than `MAX_OFFERED_SPACES`, fails the reconciliation as a malformed batch; the real puller asks."""
    hostile = keys.SigningKey.generate()
    offered: list[list[str]] = []
    asked: list[str] = []

    async def reconcile(request: web.Request) -> web.Response:
        asked.append((await request.json())["set"])
        reply = {"type": "reconcile_reply", "v": 3, "node_id": hostile.did, "epoch": "e" * 32, "head": 0}
        return web.json_response({**reply, "message": None, "spaces": offered[0]})

    app = web.Application()
    app.router.add_post("/v1/sync/reconcile", reconcile)
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    try:
        b = await make_peer("b")
        config = PeerConfig(hostile.did, str(server.make_url("")).rstrip("/"))
        status = await b.sync.store.add_peer(m.PeerIn(url=config.url, node_id=config.node_id))
        assert status.node_id == hostile.did
        offered.append([OTHER_SPACE])
        with pytest.raises(SyncError, match="a list of spaces in reply to a round not over the public federation"):
            await b.puller().reconcile(config)
        assert asked == [m.PUBLIC_SET, OTHER_SPACE]  # the offered space was asked for as its own set
        offered[0] = [f"{n:064x}" for n in range(m.MAX_OFFERED_SPACES + 1)]
        with pytest.raises(SyncError, match="malformed batch"):
            await b.puller().reconcile(config)
        assert asked[2:] == [m.PUBLIC_SET]  # no session over any of them
    finally:
        await server.close()
