"""The bus over a real server: messages are signed records, filtered by project or either end, paged."""

from __future__ import annotations

import asyncio
import json
import sqlite3
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient

from identity import canonical, records
from node.service import Node
from node.spaces.sight import OPERATOR
from node.store import db as dbmod
from node.workflows import bus
from tests.conftest import AgentCreds, FakeClock
from tests.node.api_helpers import self_signer
from tests.node.workflows.helpers import WF, count_records
from wire.time import format_ms, parse_ms
from wire.workflows import MessageQuery

MakeAgent = Callable[[str], Awaitable[AgentCreds]]


async def send(client: TestClient, who: AgentCreds, status: int = 201, **body: object) -> dict[str, object]:
    resp = await client.post(f"{WF}/messages", json=body, headers=who.headers)
    data = await resp.json()
    assert resp.status == status, data
    return data


async def test_message_is_a_signed_raw_fact_with_both_agents_as_tags(
    client: TestClient, make_agent: MakeAgent, node: Node
) -> None:
    alice, bob = await make_agent("alice"), await make_agent("bob")
    msg = await send(
        client,
        alice,
        to_agent=bob.agent_id,
        message_type="handoff",
        body="scan done, over to you",
        payload={"files": 12, "ratio": 0.25},
        dependency_ids=["abc", "def"],
        project="repo-audit",
    )
    assert msg["from_agent"] == alice.agent_id and msg["to_agent"] == bob.agent_id
    assert msg["tags"] == sorted([alice.agent_id, bob.agent_id])
    assert (msg["authority"], msg["truth_state"], msg["confidence"]) == ("raw", "fact", 1.0)
    assert msg["payload"] == {"files": 12, "ratio": 0.25} and msg["dependency_ids"] == ["abc", "def"]
    body = await node.db.read(
        lambda c: c.execute("SELECT body FROM records WHERE hash = ?", (msg["record_hash"],)).fetchone()[0]
    )
    record = json.loads(body)
    assert records.verify(record) == msg["record_hash"]  # anyone can check who sent it
    assert record["author_id"] == alice.agent_id and record["kind"] == "message"


async def test_broadcast_and_filters(client: TestClient, make_agent: MakeAgent, clock: FakeClock) -> None:
    alice, bob, carol = await make_agent("alice"), await make_agent("bob"), await make_agent("carol")
    m1 = await send(client, alice, message_type="status", body="starting", project="p1")
    clock.advance(1)
    m2 = await send(client, bob, to_agent=alice.agent_id, message_type="question", body="which branch?", project="p1")
    clock.advance(1)
    m3 = await send(client, carol, to_agent=bob.agent_id, message_type="status", body="elsewhere", project="p2")
    assert m1["to_agent"] is None and m1["tags"] == [alice.agent_id]

    async def ids(**params: str) -> list[object]:
        resp = await client.get(f"{WF}/messages", params=params, headers=carol.headers)
        assert resp.status == 200
        return [m["id"] for m in (await resp.json())["messages"]]

    assert await ids() == [m3["id"], m2["id"], m1["id"]]  # newest first by default
    assert await ids(order="oldest") == [m1["id"], m2["id"], m3["id"]]
    assert await ids(project="p1") == [m2["id"], m1["id"]]
    assert await ids(agent=alice.agent_id) == [m2["id"], m1["id"]]  # what alice said and what was said to her
    assert await ids(agent=bob.agent_id) == [m3["id"], m2["id"]]
    assert await ids(agent=bob.agent_id, project="p2") == [m3["id"]]
    assert await ids(message_type="status") == [m3["id"], m1["id"]]


async def test_paging_walks_every_message_once(client: TestClient, make_agent: MakeAgent) -> None:
    alice = await make_agent("alice")
    sent = [(await send(client, alice, message_type="tick", body=str(i)))["id"] for i in range(7)]  # one millisecond
    for order, expected in (("newest", sent[::-1]), ("oldest", sent)):
        seen: list[object] = []
        cursor = None
        while True:
            params = {"limit": "3", "order": order} | ({"cursor": cursor} if cursor else {})
            page = await (await client.get(f"{WF}/messages", params=params, headers=alice.headers)).json()
            seen += [m["id"] for m in page["messages"]]
            cursor = page["next_cursor"]
            if cursor is None:
                break
        assert seen == expected


async def test_idempotency_key_appends_once(client: TestClient, make_agent: MakeAgent, node: Node) -> None:
    alice = await make_agent("alice")
    headers = alice.headers | {"Idempotency-Key": "retry-1"}
    first = await client.post(f"{WF}/messages", json={"message_type": "x", "body": "once"}, headers=headers)
    second = await client.post(f"{WF}/messages", json={"message_type": "x", "body": "once"}, headers=headers)
    assert (first.status, second.status) == (201, 200)
    assert (await first.json())["id"] == (await second.json())["id"]
    assert await count_records(node, "message") == 1
    # the key now belongs to a message: a post with it is refused, and a signed message whose body key
    # differs from the header is a mismatch, as on every other route
    resp = await client.post(
        "/v1/entries", json={"entry_type": "finding", "performative": "inform", "content": "x"}, headers=headers
    )
    assert resp.status == 409 and (await resp.json())["code"] == "idempotency_key_reused"
    resp = await client.post(
        f"{WF}/messages", json={"record": {"kind": "message"}, "idempotency_key": "other"}, headers=headers
    )
    assert resp.status == 422 and (await resp.json())["code"] == "idempotency_key_mismatch"
    assert await count_records(node, "message") == 1 and await count_records(node, "entry") == 0


async def test_from_agent_must_be_the_sender(client: TestClient, make_agent: MakeAgent, node: Node) -> None:
    alice, bob = await make_agent("alice"), await make_agent("bob")
    resp = await client.post(
        f"{WF}/messages", json={"message_type": "x", "from_agent": bob.agent_id}, headers=alice.headers
    )
    problem = await resp.json()
    assert resp.status == 403 and problem["field"] == "$.from_agent"
    await send(client, alice, message_type="x", from_agent=alice.agent_id)
    assert await count_records(node, "message") == 1


async def test_identical_sends_in_one_millisecond_are_separate_messages(
    client: TestClient, make_agent: MakeAgent, node: Node
) -> None:
    """The clock does not move: every send has the same fields and millisecond, yet each is its own message
    (signed 1 ms later), as a bus of heartbeats needs; only an idempotency key makes a retry."""
    alice = await make_agent("alice")
    body = {"message_type": "heartbeat", "body": "alive"}
    answers = await asyncio.gather(*(client.post(f"{WF}/messages", json=body, headers=alice.headers) for _ in range(6)))
    assert [r.status for r in answers] == [201] * 6
    hashes = {(await r.json())["record_hash"] for r in answers}
    assert len(hashes) == 6 and await count_records(node, "message") == 6


async def test_the_body_idempotency_key_works_as_the_header_does(
    client: TestClient, make_agent: MakeAgent, node: Node
) -> None:
    alice = await make_agent("alice")
    body = {"message_type": "x", "body": "once", "idempotency_key": "body-key"}
    first = await client.post(f"{WF}/messages", json=body, headers=alice.headers)
    again = await client.post(f"{WF}/messages", json=body, headers=alice.headers)
    assert (first.status, again.status) == (201, 200)
    assert (await first.json())["id"] == (await again.json())["id"]
    both = await client.post(f"{WF}/messages", json=body, headers=alice.headers | {"Idempotency-Key": "other"})
    assert both.status == 422 and (await both.json())["code"] == "idempotency_key_mismatch"
    assert await count_records(node, "message") == 1


async def test_following_in_arrival_order_never_skips_a_late_message(
    client: TestClient, make_agent: MakeAgent, node: Node, clock: FakeClock
) -> None:
    """A message can arrive dated before messages already read (relayed by a peer, signed by a slow clock):
    a consumer paging `oldest` past it never sees it; one following `arrival` sees every message once."""
    alice = await make_agent("alice")
    carol = await self_signer(node, "carol")
    for i in range(3):
        await send(client, alice, message_type="tick", body=f"tick {i}", project="p")
        clock.advance(1)

    async def page(order: str, cursor: str | None) -> dict[str, Any]:
        params = {"order": order, "project": "p", **({"cursor": cursor} if cursor else {})}
        resp = await client.get(f"{WF}/messages", params=params, headers=alice.headers)
        assert resp.status == 200
        return await resp.json()

    seen = {order: await page(order, None) for order in ("oldest", "arrival")}
    assert [m["body"] for m in seen["oldest"]["messages"]] == ["tick 0", "tick 1", "tick 2"]
    assert [m["body"] for m in seen["arrival"]["messages"]] == ["tick 0", "tick 1", "tick 2"]
    last = {order: seen[order]["messages"][-1] for order in seen}
    late = {
        "kind": "message",
        "schema_version": canonical.SCHEMA_VERSION,
        "author_id": carol.agent_id,
        "created_at": format_ms(node.now_ms() - 3_600_000),  # an hour before everything above
        "message_type": "tick",
        "body": "late",
        "payload": {},
        "dependency_ids": [],
        "project": "p",
        "tags": [carol.agent_id],
        "authority": "raw",
        "truth_state": "fact",
        "confidence": 1,
    }
    resp = await client.post(f"{WF}/messages", json={"record": records.sign(late, carol.key)}, headers=carol.headers)
    assert resp.status == 201, await resp.json()
    after_oldest = await page("oldest", f"{_ms(last['oldest'])}.{last['oldest']['id']}")
    after_arrival = await page("arrival", f"0.{last['arrival']['id']}")  # a follower at the end: the last id
    assert after_oldest["messages"] == []  # sorted by time, the late one is behind the cursor
    assert [m["body"] for m in after_arrival["messages"]] == ["late"]


def _ms(message: dict[str, Any]) -> int:
    return parse_ms(message["created_at"])


class _Recorder:
    """Records the statement a function runs on a connection, to read its plan."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn
        self.statement: tuple[str, Any] = ("", [])

    def execute(self, sql: str, params: Any = ()) -> sqlite3.Cursor:
        self.statement = (sql, params)
        return self.conn.execute(sql, params)


@pytest.mark.sqlite_only(reason="reads SQLite's query plans (EXPLAIN QUERY PLAN)")
@pytest.mark.parametrize("order", ["newest", "oldest", "arrival"])
@pytest.mark.parametrize("filters", [{}, {"agent": "did:key:z6Mk" + "a" * 44}, {"project": "p"}, {"message_type": "t"}])
def test_every_bus_page_is_an_index_range(tmp_path: Path, order: str, filters: dict[str, str]) -> None:
    conn = dbmod.connect(tmp_path / "bus.db")
    dbmod.migrate(conn)
    for cursor in (None, "1000.7"):
        rec = _Recorder(conn)
        bus.list_messages(rec, MessageQuery(order=order, cursor=cursor, **filters), sight=OPERATOR)  # type: ignore[arg-type]
        sql, params = rec.statement
        steps = [row[3] for row in conn.execute("EXPLAIN QUERY PLAN " + sql, params)]
        assert not [s for s in steps if "TEMP B-TREE" in s], steps
        if filters or cursor:
            assert not [s for s in steps if s.startswith("SCAN")], steps
