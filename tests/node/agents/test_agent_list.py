"""GET /v1/agents (node/agents/service.py `list_agents`) and `bbs agent list`: admin only, paged in did order, bad
paging
refused."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient

from identity import keys
from node.agents import service as agents
from node.cli import main
from node.ops.datadir import initialise
from node.service import Node
from tests.conftest import AgentCreds
from tests.node.api_helpers import count, entry_record, ingest, post, problem, self_signer
from wire.api import MAX_AGENT_PAGE

MakeAgent = Callable[[str], Awaitable[AgentCreds]]


async def listing(client: TestClient, headers: dict[str, str], **params: Any) -> tuple[int, dict[str, Any]]:
    resp = await client.get("/v1/agents", params={k: str(v) for k, v in params.items()}, headers=headers)
    return resp.status, await resp.json(content_type=None)


async def test_only_the_admin_lists_agents(
    client: TestClient, make_agent: MakeAgent, admin_headers: dict[str, str]
) -> None:
    alice = await make_agent("alice")
    status, body = await listing(client, alice.headers)
    problem(body, 403, "admin_required")
    status, body = await listing(client, {})
    assert status == 401, body
    status, body = await listing(client, {"Authorization": "Bearer bbs_0123456789abcdef_nope"})
    assert status == 401, body
    status, body = await listing(client, admin_headers)
    assert status == 200 and [a["name"] for a in body["agents"]] == ["alice"]


async def test_pages_walk_every_agent_once_in_did_order(
    client: TestClient, make_agent: MakeAgent, admin_headers: dict[str, str], node: Node
) -> None:
    made = [await make_agent(f"agent{i}") for i in range(5)]
    await post(client, made[0], content="one entry")
    own = await self_signer(node, "holder")  # registered here, its key held by the agent
    remote = keys.SigningKey.generate()  # known by sync only: no local name
    record = agents.identity_record(remote, "Far Away", "elsewhere", keys.SigningKey.generate().did)
    assert await ingest(node, record) == "saved"
    assert await ingest(node, entry_record(remote, "from afar", created_ms=node.now_ms())) == "saved"

    seen: list[dict[str, Any]] = []
    after: str | None = None
    pages = 0
    while True:
        params: dict[str, Any] = {"limit": 2} | ({"after": after} if after else {})
        status, body = await listing(client, admin_headers, **params)
        assert status == 200, body
        assert len(body["agents"]) <= 2
        seen += body["agents"]
        pages += 1
        after = body["next_after"]
        if after is None:
            break
        assert after == body["agents"][-1]["agent_id"]
    ids = [a["agent_id"] for a in seen]
    assert ids == sorted(ids) and len(set(ids)) == len(ids) == 7 and pages == 4
    by_id = {a["agent_id"]: a for a in seen}
    assert by_id[made[0].agent_id]["entry_count"] == 1 and by_id[made[0].agent_id]["key_kept"] is True
    assert by_id[made[0].agent_id]["name"] == "agent0" and by_id[made[0].agent_id]["display_name"] == "Agent0"
    assert (by_id[own.agent_id]["name"], by_id[own.agent_id]["key_kept"]) == ("holder", False)
    far = by_id[remote.did]
    assert (far["name"], far["key_kept"], far["entry_count"], far["description"]) == (None, False, 1, "elsewhere")

    status, body = await listing(client, admin_headers, local="true", limit=MAX_AGENT_PAGE)
    assert status == 200 and body["next_after"] is None
    assert {a["agent_id"] for a in body["agents"]} == {c.agent_id for c in made} | {own.agent_id}
    status, body = await listing(client, admin_headers)  # default page: 50, all of them, no next
    assert status == 200 and len(body["agents"]) == 7 and body["next_after"] is None


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"limit": "0"}, "$.limit"),
        ({"limit": str(MAX_AGENT_PAGE + 1)}, "$.limit"),
        ({"limit": "many"}, "$.limit"),
        ({"after": "alice"}, "$.after"),
        ({"after": "did:key:nope"}, "$.after"),
        ({"local": "perhaps"}, "$.local"),
        ({"offset": "3"}, None),
    ],
)
async def test_bad_paging_is_a_422_naming_the_parameter(
    client: TestClient, admin_headers: dict[str, str], node: Node, params: dict[str, str], field: str | None
) -> None:
    before = await count(node)
    resp = await client.get("/v1/agents", params=params, headers=admin_headers)
    body = await resp.json(content_type=None)
    assert resp.content_type == "application/problem+json"
    problem(body, 422, "validation_error", field)
    if field is None:
        assert "offset" in body["detail"]
    assert await count(node) == before


async def test_the_listing_is_in_openapi(client: TestClient) -> None:
    spec = await (await client.get("/openapi.json")).json()
    operation = spec["paths"]["/v1/agents"]["get"]
    assert {p["name"] for p in operation["parameters"]} >= {"limit", "after", "local"}
    limit = next(p for p in operation["parameters"] if p["name"] == "limit")
    assert limit["schema"]["maximum"] == MAX_AGENT_PAGE
    assert "200" in operation["responses"] and "422" in operation["responses"]


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_bbs_agent_list_on_the_data_folder(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], node_store: Callable[[], str | None]
) -> None:
    data = tmp_path / "node"
    assert initialise(data, node_store()) is not None
    code, _, err = run_cli(capsys, "agent", "list", "--data", str(data))
    assert code == 0 and "no agents; create one with: bbs agent create NAME" in err
    made = []
    for name in ("ann", "ben", "cat"):
        code, out, _ = run_cli(capsys, "agent", "create", name, "--data", str(data), "--type", "assistant", "--json")
        assert code == 0
        made.append(json.loads(out))
    code, out, err = run_cli(capsys, "agent", "list", "--data", str(data), "--limit", "2", "--json")
    first = json.loads(out)
    assert code == 0 and len(first["agents"]) == 2 and first["next_after"] == first["agents"][1]["agent_id"]
    code, out, _ = run_cli(capsys, "agent", "list", "--data", str(data), "--after", first["next_after"], "--json")
    rest = json.loads(out)
    assert [a["agent_id"] for a in first["agents"] + rest["agents"]] == sorted(a["agent_id"] for a in made)
    assert rest["next_after"] is None
    code, out, err = run_cli(capsys, "agent", "list", "--data", str(data), "--local", "--limit", "2")
    assert code == 0 and f"more: --after {first['next_after']}" in err
    shown = first["agents"][0]
    assert "assistant" in out and shown["name"] in out and shown["agent_id"] in out and "node" in out

    for flags, field in (
        (["--limit", "0"], "$.limit"),
        (["--limit", "201"], "$.limit"),
        (["--after", "ann"], "$.after"),
    ):
        code, out, err = run_cli(capsys, "agent", "list", "--data", str(data), *flags)
        assert code == 1 and out == "" and err.startswith("bbs: validation_error: ") and f"(at {field})" in err
    code, _, err = run_cli(capsys, "agent", "list", "--data", str(tmp_path / "none"))
    assert code == 1 and err.startswith("bbs: ") and len(err.splitlines()) == 1
    assert not (tmp_path / "none").exists()  # a listing never creates a node
