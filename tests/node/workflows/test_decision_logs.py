"""Lease decisions are logged at info (issue 9: operators can see who got what and why a lease was refused)."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

import pytest
from aiohttp.test_utils import TestClient

from tests.conftest import AgentCreds

P = "/v1/agent-workflows"


async def test_lease_grant_extend_refusal_and_completion_are_logged(
    client: TestClient, make_agent: Callable[[str], Awaitable[AgentCreds]], caplog: pytest.LogCaptureFixture
) -> None:
    a, b = await make_agent("a"), await make_agent("b")
    assert (await client.post(f"{P}/tasks", json={"key": "t1", "title": "T"}, headers=a.headers)).status == 201
    caplog.set_level(logging.INFO, logger="bbs.leases")
    assert (await client.post(f"{P}/tasks/t1/lease", json={"seconds": 60}, headers=a.headers)).status == 201
    extended = await client.post(f"{P}/tasks/t1/lease", json={"seconds": 90}, headers=a.headers)
    assert extended.status == 200
    assert (await client.post(f"{P}/tasks/t1/lease", json={}, headers=b.headers)).status == 409
    token = {"lease": (await extended.json())["lease"]["lease_id"]}
    assert (await client.post(f"{P}/tasks/t1/complete", json=token, headers=a.headers)).status == 200
    lines = [r.getMessage() for r in caplog.records if r.name == "bbs.leases"]
    assert lines[0] == f"lease granted: task t1 to {a.agent_id} for 60 s"
    assert lines[1] == f"lease extended: task t1 to {a.agent_id} for 90 s"
    assert lines[2].startswith(f"lease refused: task t1 for {b.agent_id}: ")
    assert lines[3] == f"complete: task t1 by {a.agent_id}"
    assert all(r.levelno == logging.INFO for r in caplog.records if r.name == "bbs.leases")
