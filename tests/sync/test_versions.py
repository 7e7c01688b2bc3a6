"""Sync protocol v2 between real nodes: versions of one address travel, every node keeps the same two and shows the
same winner, a refused version is not fetched again, and a v1 peer is answered 422 naming v2."""

from __future__ import annotations

import hashlib
from typing import Any

import msgspec

from identity import canonical, keys, records
from node.store import projections
from sync import messages as m
from sync.auth import sign_headers
from tests.node.api_helpers import entry_record
from tests.sync.conftest import PeerNode

AUTHOR = keys.SigningKey.generate()
T0 = 1_767_323_045_000


def versions(n: int) -> list[dict[str, Any]]:
    """n versions of one address, ordered by version (the first wins)."""
    out = [entry_record(AUTHOR, "one address, many bodies", created_ms=T0, tags=[f"v{i}"]) for i in range(n)]
    return sorted(out, key=lambda r: hashlib.sha256(canonical.canonical_bytes(r)).hexdigest())


async def store(peer: PeerNode, record: dict[str, Any], scope: str = "federation") -> None:
    """The author's version stored on one node (as its own post would be)."""
    record_hash, decoded = records.check(record)
    item = projections.Incoming(record, record_hash, decoded, scope)
    now = peer.node.now_ms()
    await peer.node.db.write(lambda c: projections.append_many(c, [item], origin="local", now_ms=now))


async def shown(peer: PeerNode, address: str) -> tuple[list[str], bool]:
    def run(conn: Any) -> tuple[list[str], bool]:
        row = conn.execute(
            "SELECT e.tags, EXISTS (SELECT 1 FROM equivocations q WHERE q.hash = e.record_hash)"
            " FROM entries e WHERE e.record_hash = ?",
            (address,),
        ).fetchone()
        return msgspec.json.decode(row[0]), bool(row[1])

    return await peer.node.db.read(run)


async def link(x: PeerNode, y: PeerNode) -> None:
    await x.add_peer(y)
    await y.add_peer(x)


async def test_three_nodes_converge_on_the_same_two_versions_and_winner(make_peer: Any) -> None:
    a, b, c = await make_peer("a"), await make_peer("b"), await make_peer("c")
    await link(a, b)
    await link(b, c)
    v = versions(3)
    address = records.compute_hash(v[0])
    await store(a, v[2])
    await store(b, v[1])
    await store(c, v[0])
    for _ in range(2):
        for x, y in ((a, b), (b, a), (b, c), (c, b)):
            await x.puller().pull_once(y.config)
            await x.puller().reconcile(y.config)
    assert await a.digest() == await b.digest() == await c.digest()
    for peer in (a, b, c):
        assert await shown(peer, address) == (v[0]["tags"], True)
        held = await peer.node.db.read(lambda conn: conn.execute("SELECT count(*) FROM records").fetchone()[0])
        assert held >= 2
    # nothing is fetched again once they agree
    for x, y in ((a, b), (b, a), (b, c), (c, b)):
        report = await x.puller().reconcile(y.config)
        assert (report.need, report.outcomes) == (0, [])


async def test_a_refused_version_is_not_fetched_again(make_peer: Any) -> None:
    """A peer that keeps a version this node refuses (it never pulls back) is offered it on every reconciliation:
    the node refuses it once (`overflow`), then never asks for it again."""
    a, b = await make_peer("a"), await make_peer("b")
    await link(a, b)
    v = versions(3)
    await store(a, v[0])
    await store(a, v[1])
    await store(b, v[2])
    first = await a.puller().reconcile(b.config)
    assert [o.outcome for o in first.outcomes] == ["overflow"]
    again = await a.puller().reconcile(b.config)
    assert again.need == 1 and again.outcomes == []  # offered, not fetched
    (status,) = await a.sync.store.statuses()
    assert status.counters.overflow == 1


async def test_a_local_version_does_not_block_the_federation_one(make_peer: Any) -> None:
    """No black hole: b holds the `local` version; a's federation version reaches b and, through b, c."""
    a, b, c = await make_peer("a"), await make_peer("b"), await make_peer("c")
    await link(a, b)
    await link(b, c)
    local = entry_record(AUTHOR, "scoped twice", created_ms=T0, scope="local")
    shared = entry_record(AUTHOR, "scoped twice", created_ms=T0, scope="federation")
    address = records.compute_hash(shared)
    await store(b, local, "local")
    await store(a, shared)
    await b.puller().pull_once(a.config)
    await c.puller().pull_once(b.config)
    assert await a.digest() == await b.digest() == await c.digest()
    assert (await shown(b, address))[1] is True  # flagged on the node that holds the local twin only
    assert (await shown(c, address))[1] is False and (await shown(a, address))[1] is False


async def test_a_v1_peer_is_answered_422_naming_v2(make_peer: Any) -> None:
    a, b = await make_peer("a"), await make_peer("b")
    await link(a, b)
    for method, path, body in (
        ("GET", "/v1/sync/changes?since=0", None),
        ("POST", "/v1/sync/fetch", b'{"type":"fetch","v":1,"hashes":["' + b"ab" * 32 + b'"]}'),
        ("POST", "/v1/sync/reconcile", b'{"type":"reconcile","v":1,"message":"61"}'),
    ):
        url = a.url + path
        headers = sign_headers(b.node.key, method, url, body)
        if body is not None:
            headers["Content-Type"] = "application/json"
        async with b.session.request(method, url, data=body, headers=headers) as resp:
            problem = await resp.json(content_type=None)
            assert resp.status == 422 and resp.content_type == "application/problem+json", problem
            assert (problem["code"], problem["field"]) == ("unsupported_sync_version", "$.v")
            assert f"v{m.PROTOCOL_VERSION}" in problem["detail"]
