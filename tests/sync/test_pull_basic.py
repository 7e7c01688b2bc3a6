"""Two real nodes: pull, cursors, scope, outcomes, operator surface."""

from __future__ import annotations

from tests.sync.conftest import PeerNode


async def pair(make_peer) -> tuple[PeerNode, PeerNode]:  # type: ignore[no-untyped-def]
    a, b = await make_peer("a"), await make_peer("b")
    await a.add_peer(b)
    await b.add_peer(a)
    return a, b


async def test_pull_copies_records_and_saves_cursor(make_peer) -> None:  # type: ignore[no-untyped-def]
    a, b = await pair(make_peer)
    writer = await a.agent()
    posted = [await a.post(writer, f"finding {i}") for i in range(5)]
    report = await b.puller().pull_once(a.config)
    words = [o.outcome for o in report.outcomes]
    assert words.count("saved") == 6  # the agent identity document and five entries
    assert set(posted) <= await b.hashes()
    assert await a.digest() == await b.digest()
    cursor = await b.sync.store.cursor(a.node_id)
    epoch, head = await a.sync.store.position()
    assert cursor is not None and cursor.epoch == epoch and cursor.seq == head
    again = await b.puller().pull_once(a.config)
    assert again.outcomes == []  # nothing new: an idle pull stores nothing


async def test_local_scope_never_leaves(make_peer) -> None:  # type: ignore[no-untyped-def]
    a, b = await pair(make_peer)
    writer = await a.agent()
    private = await a.post(writer, "only here", scope="local")
    shared = await a.post(writer, "everywhere")
    await b.puller().pull_once(a.config)
    got = await b.hashes()
    assert shared in got and private not in got
    fetched = await b.puller().fetch_into_store(a.config, [private])
    assert fetched == ([], [private])
    count, _ = await a.digest()
    assert count == 2  # the digest covers federated records only


async def test_records_stored_byte_for_byte_with_origin(make_peer) -> None:  # type: ignore[no-untyped-def]
    a, b = await pair(make_peer)
    writer = await a.agent()
    h = await a.post(writer, "Ünïcödé — «quoted»", tags=["x", "a"], confidence=0.1235)
    await b.puller().pull_once(a.config)
    q = "SELECT body, origin FROM records WHERE hash = ?"
    body_a, origin_a = await a.node.db.read(lambda c: tuple(c.execute(q, (h,)).fetchone()))
    body_b, origin_b = await b.node.db.read(lambda c: tuple(c.execute(q, (h,)).fetchone()))
    assert bytes(body_a) == bytes(body_b)
    assert origin_a == "local" and origin_b == a.node_id


async def test_peers_api_shows_cursor_lag_and_counters(make_peer) -> None:  # type: ignore[no-untyped-def]
    a, b = await pair(make_peer)
    writer = await a.agent()
    await a.post(writer, "one")
    await b.puller().pull_once(a.config)
    async with b.session.get(b.url + "/v1/peers", headers=b.admin) as resp:
        assert resp.status == 200
        peers = (await resp.json())["peers"]
    (p,) = peers
    assert p["node_id"] == a.node_id and p["lag_records"] == 0 and p["counters"]["saved"] == 2
    assert p["cursor_seq"] == p["remote_head"]
    async with b.session.get(b.url + "/v1/sync/digest", headers=b.admin) as resp:
        assert resp.status == 200
        digest = await resp.json()
    assert (digest["count"], digest["sha256"]) == await a.digest()


async def test_peer_admin_validation(make_peer) -> None:  # type: ignore[no-untyped-def]
    a = await make_peer("a")
    cases = [
        ({"url": "ftp://x", "node_id": a.node_id}, "$.url"),
        ({"url": "http://127.0.0.1:1", "node_id": "did:key:nope"}, "$.node_id"),
        ({"url": "http://127.0.0.1:1"}, "$.node_id"),
        ({"url": "http://127.0.0.1:1", "node_id": a.node_id}, "$.node_id"),  # itself
    ]
    for body, field in cases:
        async with a.session.post(a.url + "/v1/peers", json=body, headers=a.admin) as resp:
            assert resp.status == 422, (body, await resp.text())
            problem = await resp.json()
            assert problem["field"] == field
    writer = await a.agent()
    key = (await a.node.agents.create("other", "Other")).api_key
    async with a.session.post(
        a.url + "/v1/peers", json={"url": "http://x:1", "node_id": writer}, headers={"Authorization": f"Bearer {key}"}
    ) as resp:
        assert resp.status == 403
    async with a.session.get(a.url + "/v1/peers") as resp:
        assert resp.status == 401
    assert (await a.sync.store.statuses()) == []


async def test_records_are_not_echoed_back_to_their_sender(make_peer) -> None:  # type: ignore[no-untyped-def]
    a, b = await pair(make_peer)
    writer = await a.agent()
    for i in range(3):
        await a.post(writer, f"from a {i}")
    await b.puller().pull_once(a.config)
    back = await a.puller().pull_once(b.config)
    assert back.outcomes == []  # B's feed skips what came from A, and A's cursor still reaches B's head
    cursor = await a.sync.store.cursor(b.node_id)
    assert cursor is not None and cursor.seq == (await b.sync.store.position())[1]
