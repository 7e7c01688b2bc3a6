"""An entry re-signed by its author's new key after a rotation (docs/format-v3.md 3.6, docs/sync.md "Versions"):
the same address, another version, not an equivocation. On a real aiohttp server over a real SQLite node with real
Ed25519 keys."""

from __future__ import annotations

from typing import Any

from aiohttp.test_utils import TestClient

from identity import keys, records
from node.service import Node
from tests.conftest import FakeClock
from tests.node.agents.test_key_events import (
    identity_document,
    page,
    post_signed,
    rotation,
    signed,
    submit,
    version_of,
)
from tests.node.api_helpers import SelfSigner, count, entry_record, get_json, hash_of, problem, self_signer


async def rotated_with(
    client: TestClient, node: Node, clock: FakeClock
) -> tuple[SelfSigner, keys.SigningKey, dict[str, Any]]:
    """A self-signing agent with one post, rotated to a new key vouching for it: (agent, new key, the post)."""
    who = await self_signer(node, "rover")
    now = int(clock() * 1000)
    old = entry_record(who.key, "said before the rotation", created_ms=now - 1000, tags=["kept"])
    await post_signed(client, who, old, 201)
    new = keys.SigningKey.generate()
    vouched = [version_of(old), version_of(await identity_document(node, who.agent_id))]
    event = rotation(who.agent_id, who.key, new, vouched, created_ms=now)
    await submit(client, who, event, [page(who.agent_id, who.key, event, vouched)], 201)
    return who, new, old


async def equivocations(node: Node) -> int:
    return await count(node, "equivocations")


async def test_a_re_signed_entry_is_stored_shown_by_the_new_key_and_is_no_equivocation(
    client: TestClient, node: Node, clock: FakeClock
) -> None:
    who, new, old = await rotated_with(client, node, clock)
    again = signed(records.unsigned(old), new)
    assert hash_of(again) == hash_of(old) and again["signing_key"] == new.did
    stored = await post_signed(client, who, again, 200)  # an address held here: answered as it is shown
    assert stored["record_hash"] == hash_of(old) and stored["signature"] == again["signature"]
    (shown,) = (await get_json(client, f"/v1/entries/{hash_of(old)}", who))["entries"]
    assert shown["signature"] == again["signature"] and shown["equivocated"] is False
    assert shown["tags"] == ["kept"]
    assert await equivocations(node) == 0
    # both versions are in the log (the digest counts both), one entry is shown
    assert await count(node, "entries") == 1
    # the first key's version again (vouched for by the rotation): idempotent, the new key's stays shown
    first = await post_signed(client, who, old, 200)
    assert first["signature"] == again["signature"]
    assert (await post_signed(client, who, again, 200))["signature"] == again["signature"]
    assert await equivocations(node) == 0


async def test_another_body_under_the_re_signed_address_is_still_409_equivocation(
    client: TestClient, node: Node, clock: FakeClock
) -> None:
    who, new, old = await rotated_with(client, node, clock)
    await post_signed(client, who, signed(records.unsigned(old), new), 200)
    other = signed({**records.unsigned(old), "tags": ["changed"]}, new)
    assert hash_of(other) == hash_of(old)
    problem(await post_signed(client, who, other, 409), 409, "equivocation")
    assert await equivocations(node) == 0


async def test_a_re_signed_entry_by_an_unknown_key_is_refused_and_stores_nothing(
    client: TestClient, node: Node, clock: FakeClock
) -> None:
    who, _, old = await rotated_with(client, node, clock)
    before = await count(node)
    stranger = keys.SigningKey.generate()
    refused = await post_signed(client, who, signed(records.unsigned(old), stranger), 422)
    problem(refused, 422, "unknown_signing_key")
    assert await count(node) == before
