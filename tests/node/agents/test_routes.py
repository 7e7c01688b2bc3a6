"""node.agents.routes: the REST edge of key-proof authentication (POST /v1/auth/challenge and /v1/auth/session),
on a real aiohttp server; the sessions' rules themselves are tests/node/agents/test_sessions.py's."""

from __future__ import annotations

from aiohttp.test_utils import TestClient

from identity import keys
from node.agents import routes, sessions
from node.agents import service as agents
from node.agents.portable import import_identity
from node.features import all_routes
from node.service import Node
from wire.api import ChallengeIn, ChallengeOut, SessionIn, SessionOut


def test_the_routes_are_declared_in_order_and_listed_once() -> None:
    assert [(r.method, r.path, r.handler.__name__) for r in routes.ROUTES] == [
        ("POST", "/v1/auth/challenge", "post_challenge"),
        ("POST", "/v1/auth/session", "post_session"),
    ]
    assert [(r.auth, r.tag, r.body) for r in routes.ROUTES] == [
        ("none", "auth", ChallengeIn),
        ("none", "auth", SessionIn),
    ]
    assert [r.responses for r in routes.ROUTES] == [{201: ChallengeOut}, {201: SessionOut}]
    listed = [r for r in all_routes() if r.path.startswith("/v1/auth/")]
    assert listed == list(routes.ROUTES)


async def test_a_challenge_and_its_proof_answer_201_with_their_bodies(client: TestClient, node: Node) -> None:
    key = keys.SigningKey.generate()
    await import_identity(node, "roamer", key, agents.identity_record(key, "Roamer", "", node.node_id))
    resp = await client.post("/v1/auth/challenge", json={"agent_id": key.did})
    assert resp.status == 201, await resp.text()
    ch = await resp.json()
    assert (ch["agent_id"], ch["node_id"], ch["purpose"]) == (key.did, node.node_id, sessions.PURPOSE)
    signature = key.sign(sessions.challenge_message(node.node_id, key.did, ch["challenge"]))
    resp = await client.post(
        "/v1/auth/session", json={"agent_id": key.did, "challenge": ch["challenge"], "signature": signature}
    )
    assert resp.status == 201, await resp.text()
    body = await resp.json()
    assert body["agent_id"] == key.did and body["token"].startswith("bbss_")
    assert body["expires_in"] == sessions.SESSION_TTL_MS // 1000


async def test_bodies_that_do_not_decode_are_422_problems(client: TestClient) -> None:
    for path in ("/v1/auth/challenge", "/v1/auth/session"):
        resp = await client.post(path, json={"unexpected": 1})
        assert resp.status == 422 and resp.content_type == "application/problem+json", path
        assert (await resp.json())["code"]
