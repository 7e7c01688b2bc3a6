"""node.store.submission: what a client may not submit (duplicate keys, NUL, integers beyond ±2^53, invisible-only
content and tags), checked in the functions and end to end over REST against a real node: each class of bad
input answers problem+json with its code and the offending field, and stores nothing."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any

import msgspec
import pytest
from aiohttp.test_utils import TestClient

from identity import keys
from node.errors import BBSError
from node.service import Node
from node.store import submission
from tests.conftest import AgentCreds
from tests.node.api_helpers import count, entry_record, ingest, post, problem, self_signer

MakeAgent = Callable[[str], Awaitable[AgentCreds]]
BIG = 2**53 + 1


def raises(fn: Callable[[], Any]) -> BBSError:
    with pytest.raises(BBSError) as info:
        fn()
    return info.value


# ---- the functions ------------------------------------------------------------------------------------------


def test_path_of_spells_names_indexes_and_odd_keys() -> None:
    assert submission.path_of("$", "tags") == "$.tags"
    assert submission.path_of("$.tags", 2) == "$.tags[2]"
    assert submission.path_of("$.metadata", "a b") == '$.metadata["a b"]'
    assert submission.path_of("$", "k\x00") == '$["k\\u0000"]'


@pytest.mark.parametrize(
    ("raw", "where"),
    [
        (b'{"a": 1, "a": 2}', "$.a"),
        (b'{"x": {"b": [1, {"c": 1, "d": 2, "c": 3}]}}', "$.x.b[1].c"),
        (b'[{"ok": 1}, {"z": 1, "z": 1}]', "$[1].z"),
        (b'{"a": {"q": 1, "q": 2}, "b": {"r": 1, "r": 2}}', "$.a.q"),  # the first in document order
        (b'{"a": 1, "b": 2}', None),
        (b'{"a": {"a": 1}}', None),  # one key in two objects is no repeat
        (b"[1, 2, 2]", None),
    ],
)
def test_duplicate_key_path(raw: bytes, where: str | None) -> None:
    assert submission.duplicate_key_path(raw) == where


def test_check_body_refuses_a_repeated_key_wherever_it_is_and_whatever_the_spacing() -> None:
    for raw in (b'{"a":1,"a":1}', b'{ "a" : 1 ,\n "a" : 1 }', b'{"e":[{"r":{"t":[],"t":["x"]}}]}'):
        err = raises(partial(submission.check_body, raw, msgspec.json.decode(raw)))
        assert (err.status, err.code) == (400, "duplicate_key")
    assert err.field == "$.e[0].r.t"


def test_check_body_passes_plain_bodies_compact_or_not() -> None:
    value = {"content": "café 😀", "tags": ["a"], "n": 1.5, "m": {"k": [1, None, True]}}
    for raw in (msgspec.json.encode(value), json.dumps(value).encode(), json.dumps(value, indent=2).encode()):
        submission.check_body(raw, msgspec.json.decode(raw))
    submission.check_body(b'"\\\\u0000"', "\\u0000")  # an escaped backslash before u0000 is no NUL


def test_check_body_refuses_a_nul_in_a_key_or_a_string() -> None:
    err = raises(lambda: submission.check_body(b'{"tags":["a\\u0000"]}', {"tags": ["a\x00"]}))
    assert (err.status, err.code, err.field) == (422, "nul_character", "$.tags[0]")
    err = raises(lambda: submission.check_body(b'{"m":{"k\\u0000":1}}', {"m": {"k\x00": 1}}))
    assert err.field == '$.m["k\\u0000"]'


def test_check_record_refuses_nul_unsafe_integers_and_invisible_text() -> None:
    cases: list[tuple[dict[str, Any], str, str]] = [
        ({"metadata": {"n": BIG}}, "integer_out_of_range", "$.record.metadata.n"),
        ({"metadata": {"l": [1, -BIG]}}, "integer_out_of_range", "$.record.metadata.l[1]"),
        ({"payload": {"deep": {"x": 2**64 + 1}}}, "integer_out_of_range", "$.record.payload.deep.x"),
        ({"tags": ["ok", "a\x00"]}, "nul_character", "$.record.tags[1]"),
        ({"metadata": {"k\x00": 1}}, "nul_character", '$.record.metadata["k\\u0000"]'),
        ({"content": "\u200b\u200d\u202e\u2066 \t\x00"}, "nul_character", "$.record.content"),
        ({"content": "\u200b\u200c\u200d\u2060\ufeff"}, "invisible_only", "$.record.content"),
        ({"content": "\u202e\u2067\u200f \n"}, "invisible_only", "$.record.content"),
        ({"content": "ok", "tags": ["a", "\u3164\u200b"]}, "invisible_only", "$.record.tags[1]"),
    ]
    for record, code, field in cases:
        err = raises(partial(submission.check_record, record, "$.record"))
        assert (err.status, err.code, err.field) == (422, code, field), record


def test_check_record_passes_what_is_fine() -> None:
    submission.check_record(
        {
            "content": "\u200bhello\u200b",  # invisible characters around visible ones are text
            "tags": ["é", "😀"],
            "metadata": {"max": 2**53, "min": -(2**53), "flag": True, "none": None, "float": 1.5},
            "exact": [2**60, int(1e300), -(2**64)],  # what canonical form makes of large floats: doubles hold them
        }
    )


def test_invisible_only() -> None:
    assert submission.invisible_only("\u200b\u00ad\u034f\u2800 ")
    assert not submission.invisible_only("\u200bx") and not submission.invisible_only("٣")


# ---- over REST ----------------------------------------------------------------------------------------------


async def send(client: TestClient, path: str, raw: bytes, who: Any) -> tuple[int, dict[str, Any]]:
    headers = {**who.headers, "Content-Type": "application/json"}
    resp = await client.post(path, data=raw, headers=headers)
    return resp.status, await resp.json(content_type=None)


async def test_rest_refuses_duplicate_keys_in_any_body_and_stores_nothing(
    client: TestClient, node: Node, make_agent: MakeAgent, admin_headers: dict[str, str]
) -> None:
    alice = await make_agent("alice")
    signer = await self_signer(node, "sam")
    record = entry_record(signer.key, "signed by sam", created_ms=node.now_ms())
    before = await count(node)
    signed = json.dumps({"record": record})[:-2] + ', "content": "other words"}}'  # a second "content" in it
    cases: list[tuple[str, bytes, Any, str]] = [
        ("/v1/entries", signed.encode(), signer, "$.record.content"),
        ("/v1/entries", b'{"entry_type":"finding","performative":"inform","content":"a","content":"b"}', alice,
         "$.content"),
        ("/v1/entries/batch", b'{"entries":[{"record":{}},{"metadata":{"k":1,"k":2}}]}', alice,
         "$.entries[1].metadata.k"),
        ("/v1/subscriptions", b'{"tags":["a"],"tags":["b"]}', alice, "$.tags"),
        ("/v1/agents", b'{"name":"x","name":"y"}', type("Admin", (), {"headers": admin_headers}), "$.name"),
    ]  # fmt: skip
    for path, raw, who, field in cases:
        status, data = await send(client, path, raw, who)
        assert status == 400, data
        problem(data, 400, "duplicate_key", field)
    assert await count(node) == before


async def test_rest_refuses_nul_in_identifiers_keys_and_tags(
    client: TestClient, node: Node, make_agent: MakeAgent
) -> None:
    alice = await make_agent("alice")
    signer = await self_signer(node, "sam")
    before = await count(node)
    problem(await post(client, alice, 422, content="x", tags=["a\x00b"]), 422, "nul_character", "$.tags[0]")
    data = await post(client, alice, 422, content="x", metadata={"k\x00": 1})
    problem(data, 422, "nul_character", '$.metadata["k\\u0000"]')
    problem(await post(client, alice, 422, content="x", idempotency_key="k\x00"), 422, "nul_character")
    record = entry_record(signer.key, "signed", created_ms=node.now_ms(), tags=["t\x00"])
    resp = await client.post("/v1/entries", json={"record": record}, headers=signer.headers)
    problem(await resp.json(), 422, "nul_character", "$.record.tags[0]")
    resp = await client.post("/v1/agent-workflows/messages", json={"message_type": "note\x00"}, headers=alice.headers)
    problem(await resp.json(), 422, "nul_character", "$.message_type")
    assert await count(node) == before


async def test_rest_refuses_content_and_tags_of_invisible_characters(
    client: TestClient, node: Node, make_agent: MakeAgent
) -> None:
    alice = await make_agent("alice")
    signer = await self_signer(node, "sam")
    before = await count(node)
    for content in ("\u200b\u200c\u200d", "\u202e\u2066\u200f", "\ufeff \u2060\u00a0"):
        problem(await post(client, alice, 422, content=content), 422, "invisible_only", "$.content")
    problem(await post(client, alice, 422, content="x", tags=["\u200b"]), 422, "invisible_only", "$.tags[0]")
    record = entry_record(signer.key, "\u2067\u200b", created_ms=node.now_ms())
    resp = await client.post("/v1/entries", json={"record": record}, headers=signer.headers)
    problem(await resp.json(), 422, "invisible_only", "$.record.content")
    batch = {"entries": [{"entry_type": "finding", "performative": "inform", "content": c} for c in ("ok", "\u200b")]}
    resp = await client.post("/v1/entries/batch", json=batch, headers=alice.headers)
    problem(await resp.json(), 422, "invisible_only", "$.entries[1].content")
    assert await count(node) == before


async def test_rest_refuses_integers_beyond_2_53_in_metadata_and_payloads(
    client: TestClient, node: Node, make_agent: MakeAgent
) -> None:
    alice = await make_agent("alice")
    signer = await self_signer(node, "sam")
    before = await count(node)
    for value, field in ((BIG, "$.metadata.n"), (-BIG, "$.metadata.n"), ({"x": [0, 10**20 + 1]}, "$.metadata.n.x[1]")):
        data = await post(client, alice, 422, content="x", metadata={"n": value})
        problem(data, 422, "integer_out_of_range", field)
    record = entry_record(signer.key, "signed", created_ms=node.now_ms(), metadata={"n": BIG})
    resp = await client.post("/v1/entries", json={"record": record}, headers=signer.headers)
    problem(await resp.json(), 422, "integer_out_of_range", "$.record.metadata.n")
    message = {"message_type": "note", "payload": {"n": BIG}}
    resp = await client.post("/v1/agent-workflows/messages", json=message, headers=alice.headers)
    problem(await resp.json(), 422, "integer_out_of_range", "$.payload.n")
    assert await count(node) == before
    ok = await post(client, alice, content="limits", metadata={"max": 2**53, "big": 1e300})
    assert ok["metadata"] == {"big": 1e300, "max": 2**53}


async def test_an_agent_made_here_meets_the_rules_too(node: Node) -> None:
    """`bbs agent create` (no HTTP body) registers through the same rules as `bbs agent import`."""
    with pytest.raises(BBSError) as caught:
        await node.agents.create("ann", "Ann\x00")
    assert (caught.value.code, caught.value.field) == ("nul_character", "$.display_name")
    assert await count(node) == 0


async def test_a_record_refused_at_submission_is_still_taken_from_a_peer(node: Node) -> None:
    """The submission rules are not in the check sync shares: a record a peer holds is stored (end to end over
    real sync in tests/sync/test_refused_at_submission.py)."""
    key = keys.SigningKey.generate()
    record = entry_record(key, "\u200b", created_ms=node.now_ms(), tags=["a\x00"], metadata={"n": BIG})
    assert await ingest(node, record) == "saved"
