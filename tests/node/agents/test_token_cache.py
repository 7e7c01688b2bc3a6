"""The cache of verified bearer tokens: it saves a database read per request and must never widen access."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp.test_utils import TestClient

from node.agents import service as agents
from node.agents.service import Principal, TokenCache
from node.service import Node
from node.store.db import write_sync
from tests.conftest import AgentCreds, FakeClock
from tests.node.agents.test_sessions import challenge, own_key_agent, proof


def test_entries_expire_and_the_cache_stays_bounded() -> None:
    cache = TokenCache(ttl_ms=1_000, max_entries=3)
    alice = Principal("agent", "did:key:alice")
    cache.put("bbs_a", alice, now_ms=0)
    assert cache.get("bbs_a", 999) == alice
    assert cache.get("bbs_a", 1_000) is None
    cache.put("bbs_s", alice, now_ms=0, expires_ms=10)  # a session ending before the TTL
    assert cache.get("bbs_s", 9) == alice and cache.get("bbs_s", 10) is None
    for i in range(10):
        cache.put(f"bbs_{i}", alice, now_ms=0)
        assert len(cache._entries) <= 3
    assert cache.get("bbs_9", 1) == alice
    cache.clear()
    assert cache.get("bbs_9", 1) is None


async def test_a_cached_session_token_ends_with_its_session(client: TestClient, node: Node, clock: FakeClock) -> None:
    key = await own_key_agent(node)
    ch = await challenge(client, key.did)
    token = (await (await client.post("/v1/auth/session", json=proof(key, ch))).json())["token"]
    headers = {"Authorization": f"Bearer {token}"}
    clock.advance(3590)  # ten seconds of the session left: less than the cache's own TTL
    assert (await client.get("/v1/inbox", headers=headers)).status == 200
    assert (await client.get("/v1/inbox", headers=headers)).status == 200
    clock.advance(11)
    resp = await client.get("/v1/inbox", headers=headers)
    assert resp.status == 401


async def test_a_cached_api_key_does_not_vouch_for_another_secret(
    client: TestClient, make_agent: Callable[[str], Awaitable[AgentCreds]]
) -> None:
    alice = await make_agent("alice")
    assert (await client.get("/v1/inbox", headers=alice.headers)).status == 200
    prefix, key_id, secret = alice.api_key.split("_", 2)
    forged = f"{prefix}_{key_id}_{secret[:-1]}{'A' if secret[-1] != 'A' else 'B'}"
    resp = await client.get("/v1/inbox", headers={"Authorization": f"Bearer {forged}"})
    assert resp.status == 401
    assert (await client.get("/v1/inbox", headers=alice.headers)).status == 200


async def test_a_key_rotated_by_another_process_stops_working_within_a_second(
    client: TestClient, node: Node, clock: FakeClock, make_agent: Callable[[str], Awaitable[AgentCreds]]
) -> None:
    alice = await make_agent("alice")
    assert (await client.get("/v1/inbox", headers=alice.headers)).status == 200  # cached now
    # what `bbs agent rotate-key` does, from its own process: its own connection to the node's store
    _, _, new_key = write_sync(node.db.pg_url or node.db.path, lambda c: agents.rotate_api_key_txn(c, "alice", 0))
    clock.advance(agents.CREDENTIALS_CHECK_MS / 1000)
    assert (await client.get("/v1/inbox", headers=alice.headers)).status == 401
    assert (await client.get("/v1/inbox", headers={"Authorization": f"Bearer {new_key}"})).status == 200


async def test_a_look_up_that_began_before_a_revocation_is_not_cached() -> None:
    cache = TokenCache()
    alice = Principal("agent", "did:key:alice")
    for revoke in (cache.clear, lambda: cache.observe(4)):  # here, or by another process (its epoch moved)
        cache.observe(3)
        began = cache.generation
        revoke()  # a key was revoked while the look-up ran
        cache.put("bbs_a", alice, now_ms=0, generation=began)
        assert cache.get("bbs_a", 1) is None
        cache.put("bbs_a", alice, now_ms=0, generation=cache.generation)
        assert cache.get("bbs_a", 1) is not None
        cache.observe(cache.epoch or 0)  # an unchanged epoch keeps the cache
        assert cache.get("bbs_a", 1) is not None
        cache.epoch = None


async def test_a_look_up_racing_a_rest_rotation_is_not_kept(
    node: Node, clock: FakeClock, make_agent: Callable[[str], Awaitable[AgentCreds]]
) -> None:
    """A request with the old key read the credential just before the rotation committed; its answer must not
    land in the cache after the rotation cleared it, or the old key would keep working after the rotation."""
    alice = await make_agent("alice")
    assert await node.agents.authenticate(alice.api_key) is not None  # the epoch is observed
    node.agents.tokens.clear()
    read_it, go_on = asyncio.Event(), asyncio.Event()
    real_read = node.db.read

    async def slow_read(fn: Any, *, quick: bool = False) -> Any:
        value = await real_read(fn, quick=quick)
        if isinstance(value, Principal):  # the old key's look-up: the answer is on its way
            read_it.set()
            await go_on.wait()
        return value

    node.db.read = slow_read  # type: ignore[method-assign]
    lookup = asyncio.create_task(node.agents.authenticate(alice.api_key))
    await read_it.wait()
    node.db.read = real_read  # type: ignore[method-assign]
    await node.agents.rotate_api_key("alice")
    go_on.set()
    assert await lookup is not None  # it began before the rotation
    clock.advance(0.5)  # within the second: no epoch look yet
    assert await node.agents.authenticate(alice.api_key) is None
