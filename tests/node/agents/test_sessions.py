"""Key-proof authentication: challenge, signed proof, session token; replay, expiry, wrong key, bad input."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from aiohttp.test_utils import TestClient

from identity import keys
from node.agents import sessions as agent_auth
from node.agents.portable import import_identity
from node.service import Node
from tests.conftest import AgentCreds, FakeClock


async def own_key_agent(node: Node) -> keys.SigningKey:
    """An agent whose identity this node knows but whose key it does not keep."""
    from node.agents import service as agents

    key = keys.SigningKey.generate()
    record = agents.identity_record(key, "Roamer", "", node.node_id)
    await import_identity(node, "roamer", key, record)
    return key


async def challenge(client: TestClient, did: str) -> dict[str, Any]:
    resp = await client.post("/v1/auth/challenge", json={"agent_id": did})
    assert resp.status == 201, await resp.text()
    return await resp.json()


def proof(key: keys.SigningKey, ch: dict[str, Any], signer: keys.SigningKey | None = None) -> dict[str, str]:
    message = agent_auth.challenge_message(ch["node_id"], key.did, ch["challenge"])
    return {"agent_id": key.did, "challenge": ch["challenge"], "signature": (signer or key).sign(message)}


async def test_signed_challenge_buys_a_token_that_acts_as_the_agent(client: TestClient, node: Node) -> None:
    key = await own_key_agent(node)
    ch = await challenge(client, key.did)
    assert ch["node_id"] == node.node_id and ch["purpose"] == "agent-bbs-session"
    resp = await client.post("/v1/auth/session", json=proof(key, ch))
    assert resp.status == 201
    session = await resp.json()
    assert session["agent_id"] == key.did and session["expires_in"] == 3600
    headers = {"Authorization": f"Bearer {session['token']}"}
    resp = await client.post("/v1/subscriptions", json={"tags": ["x"]}, headers=headers)
    assert resp.status == 201
    assert (await resp.json())["agent_id"] == key.did


async def test_a_challenge_is_used_once(client: TestClient, node: Node) -> None:
    key = await own_key_agent(node)
    ch = await challenge(client, key.did)
    assert (await client.post("/v1/auth/session", json=proof(key, ch))).status == 201
    replay = await client.post("/v1/auth/session", json=proof(key, ch))
    assert replay.status == 401
    assert (await replay.json())["code"] == "challenge_invalid"


async def test_a_failed_proof_still_consumes_the_challenge(client: TestClient, node: Node) -> None:
    key = await own_key_agent(node)
    ch = await challenge(client, key.did)
    wrong = await client.post("/v1/auth/session", json=proof(key, ch, signer=keys.SigningKey.generate()))
    assert wrong.status == 401
    body = await wrong.json()
    assert body["code"] == "bad_signature" and body["field"] == "$.signature"
    retry = await client.post("/v1/auth/session", json=proof(key, ch))
    assert (await retry.json())["code"] == "challenge_invalid"


async def test_expired_challenge_and_session(client: TestClient, node: Node, clock: FakeClock) -> None:
    key = await own_key_agent(node)
    ch = await challenge(client, key.did)
    clock.advance(61)
    late = await client.post("/v1/auth/session", json=proof(key, ch))
    assert late.status == 401 and (await late.json())["code"] == "challenge_expired"

    ch = await challenge(client, key.did)
    token = (await (await client.post("/v1/auth/session", json=proof(key, ch))).json())["token"]
    headers = {"Authorization": f"Bearer {token}"}
    assert (await client.get("/v1/inbox", headers=headers)).status == 200
    clock.advance(3601)
    assert (await client.get("/v1/inbox", headers=headers)).status == 401


async def test_a_proof_for_another_node_or_agent_fails(client: TestClient, node: Node) -> None:
    key = await own_key_agent(node)
    ch = await challenge(client, key.did)
    message = agent_auth.challenge_message(keys.SigningKey.generate().did, key.did, ch["challenge"])
    body = {"agent_id": key.did, "challenge": ch["challenge"], "signature": key.sign(message)}
    resp = await client.post("/v1/auth/session", json=body)
    assert (await resp.json())["code"] == "bad_signature"

    other = await own_key_agent_named(node, "other")
    ch = await challenge(client, key.did)
    resp = await client.post("/v1/auth/session", json=proof(other, ch))  # challenge issued to `key`
    assert (await resp.json())["code"] == "challenge_invalid"


async def own_key_agent_named(node: Node, name: str) -> keys.SigningKey:
    from node.agents import service as agents

    key = keys.SigningKey.generate()
    await import_identity(node, name, key, agents.identity_record(key, name, "", node.node_id))
    return key


async def test_unknown_agent_and_bad_input(client: TestClient) -> None:
    stranger = keys.SigningKey.generate()
    resp = await client.post("/v1/auth/challenge", json={"agent_id": stranger.did})
    assert resp.status == 404 and (await resp.json())["code"] == "agent_not_found"
    for body, field in [
        ({"agent_id": "did:web:example.com"}, "$.agent_id"),
        ({}, "$"),
        ({"agent_id": stranger.did, "extra": 1}, "$"),
    ]:
        resp = await client.post("/v1/auth/challenge", json=body)
        assert resp.status == 422, body
        assert (await resp.json())["field"].startswith(field)
    resp = await client.post("/v1/auth/session", json={"agent_id": stranger.did, "challenge": "", "signature": "x"})
    assert resp.status == 422 and (await resp.json())["field"] == "$.challenge"
    resp = await client.post("/v1/auth/session", data=b"not json", headers={"Content-Type": "application/json"})
    assert resp.status == 400
    forged = {"Authorization": "Bearer bbss_0123456789abcdef_forged"}
    assert (await client.get("/v1/inbox", headers=forged)).status == 401


async def test_open_challenges_are_bounded_without_locking_the_agent_out(
    client: TestClient, node: Node, clock: FakeClock
) -> None:
    key = await own_key_agent(node)
    issued = []
    for _ in range(agent_auth.MAX_OPEN_CHALLENGES + 4):
        issued.append(await challenge(client, key.did))
        clock.advance(0.01)
    assert await node.challenges.pending() == agent_auth.MAX_OPEN_CHALLENGES
    oldest = await client.post("/v1/auth/session", json=proof(key, issued[0]))
    assert (await oldest.json())["code"] == "challenge_invalid"
    newest = await client.post("/v1/auth/session", json=proof(key, issued[-1]))
    assert newest.status == 201


async def test_api_keys_still_work(client: TestClient, make_agent: Callable[[str], Awaitable[AgentCreds]]) -> None:
    alice = await make_agent("alice")
    assert (await client.get("/v1/inbox", headers=alice.headers)).status == 200


async def test_challenges_and_failed_proofs_never_reach_the_writer(client: TestClient, node: Node) -> None:
    """Anyone may ask: pending challenges are held in memory (node/agents/challenges.py), so a flood of asks, or of
    proofs that fail, commits nothing; only a proof that verifies writes (its session)."""
    key = await own_key_agent(node)
    jobs = node.db.stats.jobs
    asked = [await challenge(client, key.did) for _ in range(50)]
    stranger = keys.SigningKey.generate()
    bad = await client.post("/v1/auth/session", json=proof(key, asked[-1], signer=stranger))
    assert (await bad.json())["code"] == "bad_signature"
    # the node's background work (trust, notifications) may write meanwhile: a few jobs, not one per ask
    assert node.db.stats.jobs - jobs <= 3
    assert (await client.post("/v1/auth/session", json=proof(key, asked[-2]))).status == 201
    assert await node.db.read(lambda c: c.execute("SELECT count(*) FROM auth_sessions").fetchone()[0]) == 1


@pytest.mark.sqlite_only(
    reason="on PostgreSQL pending challenges are the node's, in its database: another process answers them"
    " (tests/node/multiproc/test_challenges.py)"
)
async def test_a_restart_forgets_pending_challenges(client: TestClient, node: Node) -> None:
    key = await own_key_agent(node)
    ch = await challenge(client, key.did)
    restarted = Node(node.data.root)  # a new process: its memory holds no challenge
    assert await restarted.challenges.consume(ch["challenge"], key.did) is None
    assert await node.challenges.consume(ch["challenge"], key.did) is not None


async def test_a_session_ends_when_a_key_event_takes_authority_from_the_key_that_proved_it(
    client: TestClient, node: Node, clock: FakeClock
) -> None:
    """A thief's session opened with a stolen key before the rotation (or revocation) stops at once (issue 36):
    a session remembers its key (migration 0025), and a stored key event makes every cached session be checked
    again; a session proved by the new key works."""
    from tests.node.agents.test_key_events import identity_document, rotation, submit, version_of
    from tests.node.api_helpers import self_signer

    who = await self_signer(node, "rover")
    ch = await challenge(client, who.agent_id)
    message = agent_auth.challenge_message(ch["node_id"], who.agent_id, ch["challenge"])
    resp = await client.post(
        "/v1/auth/session",
        json={"agent_id": who.agent_id, "challenge": ch["challenge"], "signature": who.key.sign(message)},
    )
    assert resp.status == 201
    old_session = {"Authorization": f"Bearer {(await resp.json())['token']}"}
    resp = await client.get("/v1/inbox", headers=old_session)
    assert resp.status == 200  # cached now
    new = keys.SigningKey.generate()
    vouched = [version_of(await identity_document(node, who.agent_id))]
    event = rotation(who.agent_id, who.key, new, vouched, created_ms=int(clock() * 1000))
    await submit(client, who, event, [], 201)
    resp = await client.get("/v1/inbox", headers=old_session)
    assert resp.status == 401, await resp.text()
    ch = await challenge(client, who.agent_id)
    message = agent_auth.challenge_message(ch["node_id"], who.agent_id, ch["challenge"])
    body = {"agent_id": who.agent_id, "challenge": ch["challenge"], "signature": new.sign(message)}
    resp = await client.post("/v1/auth/session", json=body | {"signing_key": new.did})
    assert resp.status == 201, await resp.text()
    resp = await client.get("/v1/inbox", headers={"Authorization": f"Bearer {(await resp.json())['token']}"})
    assert resp.status == 200
