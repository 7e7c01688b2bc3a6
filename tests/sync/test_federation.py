"""Federations of real nodes: epochs and reconciliation, mesh gossip, notifications, the running scheduler."""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import Awaitable, Callable
from typing import Any

from tests.sync.conftest import PeerNode, stop
from wire.api import InboxQuery, LinkSpec, ReadQuery, SubscriptionIn


async def eventually(check: Callable[[], Awaitable[bool]], timeout: float = 20.0) -> None:
    """Wait until `check()` holds (a bound for a broken build, not a latency assertion)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not await check():
        assert loop.time() < deadline, "did not converge"
        await asyncio.sleep(0.05)


async def link(x: PeerNode, y: PeerNode) -> None:
    await x.add_peer(y)
    await y.add_peer(x)


async def test_recreated_peer_store_triggers_reconciliation_not_replay(make_peer: Any, tmp_path: Any) -> None:
    a, b = await make_peer("a"), await make_peer("b")
    await link(a, b)
    writer = await a.agent()
    first = [await a.post(writer, f"before {i}") for i in range(3)]
    await b.puller().pull_once(a.config)
    old_cursor = await b.sync.store.cursor(a.node_id)
    # A's store is recreated (same node key, fresh database, new epoch) and written to again.
    await stop(a)
    fresh = tmp_path / "a2"
    fresh.mkdir()
    shutil.copy(tmp_path / "a" / "node.key", fresh / "node.key")
    a2 = await make_peer("a2", data=fresh)
    assert a2.node_id == a.node_id
    await a2.add_peer(b)
    await b.add_peer(a2)  # same node id, new address
    writer2 = await a2.agent("second")
    after = await a2.post(writer2, "after the restore")
    report = await b.puller().pull_once(a2.config)
    assert report.reset
    cursor = await b.sync.store.cursor(a.node_id)
    epoch, head = await a2.sync.store.position()
    assert cursor is not None and old_cursor is not None
    assert cursor.epoch == epoch != old_cursor.epoch and cursor.seq == head
    got = await b.hashes()
    assert after in got and set(first) <= got
    (status,) = await b.sync.store.statuses()
    assert status.reconciliations == 1
    # B kept what A lost; A gets it back by pulling from B, through its own reconciliation.
    await a2.puller().pull_once(b.config)
    await a2.puller().reconcile(b.config)
    assert await a2.digest() == await b.digest()


async def test_cursor_ahead_of_head_triggers_reconciliation(make_peer: Any) -> None:
    a, b = await make_peer("a"), await make_peer("b")
    await link(a, b)
    writer = await a.agent()
    await a.post(writer, "one")
    await b.puller().pull_once(a.config)
    epoch, head = await a.sync.store.position()
    await b.node.db.write(lambda c: c.execute("UPDATE peers SET cursor_seq = 999"))
    await a.post(writer, "two")
    report = await b.puller().pull_once(a.config)
    assert report.reset
    assert await b.sync.store.cursor(a.node_id) == (epoch, head + 1)
    assert await a.digest() == await b.digest()


async def test_reconciliation_repairs_a_dropped_record(make_peer: Any) -> None:
    a, b = await make_peer("a"), await make_peer("b")
    await link(a, b)
    writer = await a.agent()
    hashes = [await a.post(writer, f"r{i}") for i in range(40)]
    await b.puller().pull_once(a.config)

    # Simulate a record lost by a bug: remove it from B's log behind the cursor's back.
    def drop(conn: Any) -> None:
        conn.execute("DELETE FROM entries WHERE record_hash = ?", (hashes[7],))
        conn.execute("DELETE FROM records WHERE hash = ?", (hashes[7],))

    await b.node.db.write(drop)
    assert hashes[7] not in await b.hashes()
    report = await b.puller().reconcile(a.config)
    assert report.need == 1 and hashes[7] in await b.hashes()


async def test_mesh_converges_and_stores_each_record_once(make_peer: Any) -> None:
    a, b, c = [await make_peer(n, scheduler=True) for n in "abc"]
    await link(a, b)
    await link(b, c)
    await link(c, a)  # a triangle: every record reaches each node twice
    writers = [await n.agent(f"w{n.name}") for n in (a, b, c)]
    listener = await c.node.agents.create("listener", "Listener")
    await c.node.inbox.subscribe(listener.agent_id, SubscriptionIn(tags=["news"]))
    posted = []
    for node, writer in zip((a, b, c), writers, strict=True):
        for i in range(5):
            posted.append(await node.post(writer, f"{node.name} says {i}", tags=["news"] if i == 0 else []))

    async def converged() -> bool:
        digests = {await n.digest() for n in (a, b, c)}
        return len(digests) == 1 and set(posted) <= await a.hashes()

    await eventually(converged)
    for n in (a, b, c):
        dupes = await n.node.db.read(
            lambda conn: conn.execute("SELECT count(*) - count(DISTINCT hash) FROM records").fetchone()[0]
        )
        assert dupes == 0
    # Agent identity documents arrived too, and notifications fire for synced entries as for local posts.
    agents = await c.node.db.read(lambda conn: {r[0] for r in conn.execute("SELECT id FROM agents")})
    assert set(writers) <= agents
    inbox = await c.node.inbox.poll(listener.agent_id, InboxQuery())
    senders = {e.author for e in inbox.notifications}
    assert senders == set(writers)


async def test_line_relays_records_onward(make_peer: Any) -> None:
    a, b, c = [await make_peer(n, scheduler=True) for n in "abc"]
    await link(a, b)
    await link(b, c)
    w = await a.agent()
    target = await a.post(w, "the target at one end")
    wc = await c.agent("far")

    async def has_target() -> bool:
        return target in await c.hashes()

    await eventually(has_target)
    linked = await c.post(wc, "supports it from the other end", links=[LinkSpec(target=target, link_type="supports")])

    async def back_at_a() -> bool:
        return linked in await a.hashes()

    await eventually(back_at_a)
    out = await a.node.reads.read([linked], ReadQuery(hops=1), None)
    assert target in {e.record_hash for e in out.entries}


async def test_peer_added_by_cli_takes_effect_on_a_running_node(make_peer: Any) -> None:
    from node import cli

    a, b = await make_peer("a", scheduler=True), await make_peer("b", scheduler=True)
    await a.add_peer(b)  # a accepts b's requests
    w = await a.agent()
    h = await a.post(w, "hello b")
    code = await asyncio.to_thread(
        cli.main, ["peer", "add", a.url, "--key", a.node_id, "--data", str(b.node.data.root)]
    )
    assert code == 0

    async def arrived() -> bool:
        return h in await b.hashes()

    await eventually(arrived)
    assert await asyncio.to_thread(cli.main, ["peers", "--data", str(b.node.data.root)]) == 0
    assert await asyncio.to_thread(cli.main, ["digest", "--data", str(b.node.data.root)]) == 0


async def test_a_third_node_receives_what_was_written_before_it_existed(make_peer: Any) -> None:
    a, b = await make_peer("a"), await make_peer("b")
    await link(a, b)
    wa, wb = await a.agent("wa"), await b.agent("wb")
    early = [await a.post(wa, "a, early"), await b.post(wb, "b, early")]
    await b.puller().pull_once(a.config)
    c = await make_peer("c")
    await link(b, c)
    await c.puller().pull_once(b.config)
    assert set(early) <= await c.hashes()
    assert await c.digest() == await b.digest()


async def test_cli_peer_add_refuses_bad_input(make_peer: Any, capsys: Any) -> None:
    from node import cli

    a = await make_peer("a")
    data = str(a.node.data.root)
    for args in (
        ["ftp://x", "--key", a.node_id],
        ["http://x:1", "--key", "did:key:bad"],
        ["http://x:1", "--key", a.node_id],
    ):
        code = await asyncio.to_thread(cli.main, ["peer", "add", *args, "--data", data])
        assert code == 1
        assert "bbs: " in capsys.readouterr().err
    assert await a.sync.store.statuses() == []
