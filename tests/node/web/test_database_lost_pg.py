"""A node on PostgreSQL whose database connections are lost (the server restarted, its backends were ended) answers
each request that found its connection lost 503 `database_unavailable`, never a bare 500, and serves the next ones
on new connections (issue 41's chaos scenario found 500s at a server restart: scenarios/multiproc.py)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path

import psycopg
import pytest
from aiohttp.test_utils import TestClient

from node.app import create_app
from node.ops.datadir import initialise
from node.service import Node
from node.store import conn as neutral
from node.store import pg_conn
from scenarios import pg_cluster as cluster_mod
from tests.conftest import FakeClock

pytestmark = pytest.mark.postgresql

ENTRY = {"entry_type": "finding", "performative": "inform"}


def end_backends(cluster: cluster_mod.Cluster, name: str) -> int:
    """End every server session on database `name` (what a server restart does to them); how many."""
    with psycopg.connect(cluster.url(name), autocommit=True) as other:
        row = other.execute(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
            " WHERE datname = current_database() AND pid <> pg_backend_pid()"
        ).fetchone()
    assert row is not None
    return int(row[0])


def test_connection_failures_are_connection_lost() -> None:
    """SQLSTATE class 08, the server stopping or starting, and libpq's own failures are `ConnectionLost`; a statement
    stopped by its timeout (57014) is not."""
    for state in ("08006", "08003", "57P01", "57P03"):
        error = psycopg.OperationalError("gone")
        error.sqlstate = state
        assert isinstance(pg_conn.neutral_error(error), neutral.ConnectionLost), state
    assert isinstance(
        pg_conn.neutral_error(psycopg.OperationalError("the connection is closed")), neutral.ConnectionLost
    )
    stopped = psycopg.OperationalError("canceling statement due to statement timeout")
    stopped.sqlstate = "57014"
    assert not isinstance(pg_conn.neutral_error(stopped), neutral.ConnectionLost)


async def test_lost_connections_answer_503_then_the_node_serves_again(
    tmp_path: Path,
    pg_cluster: cluster_mod.Cluster,
    pg_template: str,
    clock: FakeClock,
    aiohttp_client: Callable[..., Awaitable[TestClient]],
) -> None:
    name = pg_cluster.create_database(template=pg_template)
    assert initialise(tmp_path / "node", pg_cluster.store_url(name)) is not None
    node = Node(tmp_path / "node", clock=clock)
    node.open()
    client = await aiohttp_client(create_app(node))
    try:
        created = await node.agents.create("ada", "Ada")
        headers = {"Authorization": f"Bearer {created.api_key}"}
        posted = await client.post("/v1/entries", json={**ENTRY, "content": "before"}, headers=headers)
        assert posted.status == 201, await posted.text()
        address = (await posted.json())["record_hash"]
        assert (await client.get(f"/v1/entries/{address}", headers=headers)).status == 200
        assert end_backends(pg_cluster, name) >= 2  # the writer's and the readers' sessions

        answers: list[tuple[int, str]] = []
        # Each connection that finds itself lost (the writer, the loop's quick reader, each reader thread's: which of
        # them a read lands on is the pool's choice) fails one request, then is opened anew: rounds until one whole
        # round is served, bounded by more rounds than there are connections.
        for i in range(12):
            round_ = []
            for method, path, body in (
                ("POST", "/v1/entries", {**ENTRY, "content": f"after {i}"}),
                ("GET", f"/v1/entries/{address}", None),
                ("GET", "/v1/inbox", None),
            ):
                resp = await client.request(method, path, json=body, headers=headers)
                round_.append((resp.status, (await resp.json()).get("code", "") if resp.status >= 400 else ""))
            answers += round_
            if [status for status, _ in round_] == [201, 200, 200]:
                break
        assert all(status < 500 or status == 503 for status, _ in answers), answers
        assert (503, "database_unavailable") in answers, answers
        assert [status for status, _ in answers[-3:]] == [201, 200, 200], answers
    finally:
        await client.close()
        node.close()
        pg_cluster.drop_database(name)
