"""wire.workflows: the wire types of /v1/agent-workflows and their bounds."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from identity import keys
from wire import workflows as w

DID = keys.SigningKey.generate().did


def convert(typ: type[Any], value: dict[str, Any]) -> Any:
    return msgspec.convert(value, typ)


def refused(typ: type[Any], value: dict[str, Any], *, strict: bool = True) -> str:
    with pytest.raises(msgspec.ValidationError) as info:
        msgspec.convert(value, typ, strict=strict)
    return str(info.value)


def test_a_message_needs_only_its_type() -> None:
    message = convert(w.PostMessage, {"message_type": "status"})
    assert (message.body, message.to_agent, message.payload, message.dependency_ids) == ("", None, {}, [])
    assert "message_type" in refused(w.PostMessage, {})
    assert "$.message_type" in refused(w.PostMessage, {"message_type": ""})
    assert "$.to_agent" in refused(w.PostMessage, {"message_type": "s", "to_agent": "Bob"})
    assert "$.dependency_ids" in refused(w.PostMessage, {"message_type": "s", "dependency_ids": ["d"] * 33})
    assert "unknown field `sender`" in refused(w.PostMessage, {"message_type": "s", "sender": DID})


def test_the_message_query_and_its_cursor() -> None:
    query = convert(w.MessageQuery, {})
    assert (query.order, query.limit, query.cursor) == ("newest", 50, None)
    assert convert(w.MessageQuery, {"cursor": "1767323045000.42"}).cursor == "1767323045000.42"
    for cursor in ["42", "a.b", "1.2\n", "1" * 17 + ".1"]:
        assert "$.cursor" in refused(w.MessageQuery, {"cursor": cursor})
    assert "$.limit" in refused(w.MessageQuery, {"limit": w.MAX_MESSAGE_PAGE + 1})
    assert "$.order" in refused(w.MessageQuery, {"order": "random"})
    # query strings arrive as text: the node converts them loosely (strict=False)
    assert msgspec.convert({"limit": "7"}, w.MessageQuery, strict=False).limit == 7


def test_a_task_key_is_never_all_digits() -> None:
    assert convert(w.DeclareTask, {"key": "shed-1"}).key == "shed-1"
    for key in ["123", "", "a b", "k" * 129]:
        assert "$.key" in refused(w.DeclareTask, {"key": key})
    assert "$.depends_on[0]" in refused(w.DeclareTask, {"key": "a", "depends_on": ["42"]})
    assert "$.status" in refused(w.DeclareTask, {"key": "a", "status": "stalled"})
    assert "$.depends_on" in refused(w.DeclareTask, {"key": "a", "depends_on": ["d"] * (w.MAX_TASK_DEPENDS + 1)})


def test_lease_seconds_are_bounded() -> None:
    assert convert(w.LeaseIn, {}).seconds == w.LEASE_DEFAULT_SECONDS == 900
    assert convert(w.LeaseIn, {"seconds": w.LEASE_MIN_SECONDS}).seconds == 30
    assert convert(w.LeaseIn, {"seconds": w.LEASE_MAX_SECONDS}).seconds == 86_400
    assert "$.seconds" in refused(w.LeaseIn, {"seconds": 29})
    assert "$.seconds" in refused(w.LeaseIn, {"seconds": 86_401})
    assert "$.agent" in refused(w.LeaseIn, {"agent": ""})
    rid = "r" * 16
    peer = convert(w.PeerLeaseIn, {"task_key": "shed", "agent_id": DID, "request_id": rid})
    assert (peer.seconds, peer.agent_document) == (900, None)
    assert "$.agent_id" in refused(w.PeerLeaseIn, {"task_key": "shed", "agent_id": "alice", "request_id": rid})
    assert "$.seconds" in refused(
        w.PeerLeaseIn, {"task_key": "shed", "agent_id": DID, "request_id": rid, "seconds": 86_401}
    )
    for bad in (None, "r" * 15, "r" * 65, "r" * 15 + "/"):
        body = {"task_key": "shed", "agent_id": DID} | ({} if bad is None else {"request_id": bad})
        assert "request_id" in refused(w.PeerLeaseIn, body)


def test_finish_ready_and_graph_queries() -> None:
    assert convert(w.FinishIn, {}).checkpoint is None
    assert convert(w.FinishIn, {"lease": "a" * 64}).lease == "a" * 64  # the fencing token
    assert "$.lease" in refused(w.FinishIn, {"lease": "x"})
    assert "$.lease" in refused(w.DeclareTask, {"key": "k", "lease": "A" * 64})
    assert "unknown field" in refused(w.FinishIn, {"token": "x"})
    event = convert(w.PeerTaskEventIn, {"record": {"kind": "task_event"}})
    assert event.lease is None
    assert "`record`" in refused(w.PeerTaskEventIn, {})
    ready = convert(w.ReadyQuery, {})
    assert (ready.limit, ready.after) == (100, None)
    assert "$.after" in refused(w.ReadyQuery, {"after": -1})
    graph = convert(w.GraphQuery, {})
    assert (graph.format, graph.limit) == ("json", w.MAX_GRAPH_NODES)
    assert "$.format" in refused(w.GraphQuery, {"format": "svg"})
    assert "$.limit" in refused(w.GraphQuery, {"limit": 0})


def test_answers_encode_as_json() -> None:
    task = w.TaskOut(
        id=1,
        key="shed",
        title="Build the shed",
        status="processing",
        depends_on=[],
        waiting_on=[],
        checkpoint={"step": 2},
        home_node=DID,
        lease=w.LeaseOut(lease_id="h" * 64, holder=DID, expires_at="2026-01-02T03:19:05Z"),
        created_at="2026-01-02T03:04:05Z",
        updated_at="2026-01-02T03:04:05Z",
    )
    decoded = msgspec.json.decode(msgspec.json.encode(task), type=w.TaskOut)
    assert decoded == task
    edge = w.GraphEdge(type="precedes", from_key="a", to_key="b", from_id=None, to_id=2)
    assert msgspec.json.decode(msgspec.json.encode(edge))["from_id"] is None
