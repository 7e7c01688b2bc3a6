"""node.trust.routes: POST /v1/trust/refresh on a real aiohttp server; the numbers themselves are
tests/node/trust/test_service.py's."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from aiohttp.test_utils import TestClient

from node.features import all_routes
from node.service import Node
from node.trust import routes
from node.trust.service import TrustRefresh
from tests.conftest import AgentCreds

MakeAgent = Callable[[str], Awaitable[AgentCreds]]


def test_the_route_is_declared_and_listed_once() -> None:
    [route] = routes.ROUTES
    assert (route.method, route.path, route.handler.__name__, route.auth, route.tag) == (
        "POST",
        "/v1/trust/refresh",
        "refresh_now",
        "any",
        "trust",
    )
    assert route.responses == {200: TrustRefresh}
    assert [r for r in all_routes() if r.path.startswith("/v1/trust/")] == [route]


async def test_refresh_answers_whether_it_ran_and_the_position_covered(
    client: TestClient, node: Node, make_agent: MakeAgent
) -> None:
    alice = await make_agent("alice")
    first = await client.post("/v1/trust/refresh", headers=alice.headers)
    assert first.status == 200, await first.text()
    body = await first.json()
    head = await node.db.read(lambda c: c.execute("SELECT max(seq) FROM records").fetchone()[0])
    assert body["computed_seq"] == head  # ran now, or the background refresh ran a moment ago
    again = await client.post("/v1/trust/refresh", headers=alice.headers)
    assert await again.json() == {"ran": False, "computed_seq": head}


async def test_refresh_needs_a_credential(client: TestClient) -> None:
    resp = await client.post("/v1/trust/refresh")
    assert resp.status == 401 and resp.content_type == "application/problem+json"
