"""node.federation.node_replay: the node-wide boot generation and nonce memory, as two processes of a node see it."""

from __future__ import annotations

import secrets
import time
from collections.abc import AsyncIterator

import pytest

from node.federation.node_replay import NodeReplay
from node.store.side import SideConnection
from sync import auth
from sync.auth import PeerAuthError, Signed


@pytest.fixture
async def two(pg_migrated_url: str) -> AsyncIterator[tuple[NodeReplay, NodeReplay]]:
    """The replay memory of two processes of one node (one database)."""
    sides = [SideConnection(pg_migrated_url) for _ in range(2)]
    yield NodeReplay(sides[0]), NodeReplay(sides[1])
    for side in sides:
        await side.close()


def signed(boot: str | None, created: float | None = None, nonce: str | None = None) -> Signed:
    now = int(time.time() if created is None else created)
    return Signed("did:key:peer", "did:key:peer", nonce or secrets.token_urlsafe(16), now, boot)


async def refused(replay: NodeReplay, request: Signed, code: str) -> None:
    with pytest.raises(PeerAuthError) as info:
        await replay.admit(request)
    assert (info.value.status, info.value.code) == (401, code)


async def test_the_first_generation_is_drawn_once_and_refuses_nothing_by_date(
    two: tuple[NodeReplay, NodeReplay],
) -> None:
    a, b = two
    boot, since = await a.current()
    assert await b.current() == (boot, since) and since == 0
    assert (a.drawn, b.drawn) == (1, 0)
    await a.admit(signed(None, time.time() - 30))  # a peer of the previous release: nothing was accepted before


async def test_a_nonce_is_accepted_once_by_the_node(two: tuple[NodeReplay, NodeReplay]) -> None:
    a, b = two
    boot, _ = await a.current()
    request = signed(boot)
    await b.admit(request)
    await refused(a, request, "replayed_request")
    await refused(b, request, "replayed_request")
    await refused(a, signed("another boot"), "stale_boot")
    assert a.boot_id == b.boot_id == boot


async def test_a_lost_nonce_memory_takes_the_generation_with_it(two: tuple[NodeReplay, NodeReplay]) -> None:
    """What a crash of the server does to the UNLOGGED tables (emptied), done by hand: the old generation is gone, the
    first process to notice draws one, the other reads it; a signature without a boot id dated up to MAX_SKEW_S past
    the drawing is refused, a later one accepted."""
    a, b = two
    old, _ = await a.current()
    before = signed(old)
    await a.admit(before)
    await a.side.fetch("TRUNCATE peer_boot, peer_nonces")
    await refused(b, before, "stale_boot")
    new, since = await a.current()
    assert new != old and b.boot_id == new and (a.drawn, b.drawn) == (1, 1)
    assert int(time.time()) < since <= int(time.time()) + auth.MAX_SKEW_S
    await refused(a, signed(None, since), "stale_request")
    await a.admit(signed(None, since + 1))
    await b.admit(signed(new))


async def test_an_unreachable_database_refuses_with_503(pg_migrated_url: str) -> None:
    replay = NodeReplay(SideConnection(pg_migrated_url.replace("dbname=", "dbname=no_such_database_", 1)))
    with pytest.raises(PeerAuthError) as info:
        await replay.admit(signed("any"))
    assert (info.value.status, info.value.code) == (503, "replay_memory_unavailable")


async def test_expired_nonces_are_swept_past_the_margin_only(two: tuple[NodeReplay, NodeReplay]) -> None:
    from node.federation import node_replay

    a, _ = two
    boot, _ = await a.current()
    now = int(time.time())
    for nonce, expires in (("old" * 6, now - node_replay.SWEEP_MARGIN_S - 1), ("recent" * 3, now - 1)):
        await a.side.fetch("INSERT INTO peer_nonces (peer, nonce, expires_s) VALUES ('p', %s, %s)", (nonce, expires))
    await a.admit(signed(boot))  # the process's first admit sweeps
    assert await a.side.fetch("SELECT nonce FROM peer_nonces WHERE peer = 'p'") == [("recent" * 3,)]
