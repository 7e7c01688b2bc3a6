"""Redaction through the service on a real Node: a space's owner or admin redacts a member's post (moderation), a
member without the role cannot, and the redaction names the target's space."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import pytest
from aiohttp.test_utils import TestClient

from identity import canonical, records
from node.errors import Forbidden, InvalidInput
from node.service import Node
from tests.conftest import AgentCreds
from tests.node.api_helpers import count, get_json, post
from wire.api import PostEntry
from wire.time import format_ms

MakeAgent = Callable[[str], Awaitable[AgentCreds]]


async def test_an_admin_of_the_space_redacts_a_members_post_and_a_reader_cannot(
    client: TestClient, node: Node, make_agent: MakeAgent
) -> None:
    owner, admin, writer, reader = [await make_agent(n) for n in ("owner", "admin", "writer", "reader")]
    space = (await node.spaces.create(owner.agent_id, "family", "")).space_id
    for member, role in ((admin, "admin"), (writer, "writer"), (reader, "reader")):
        await node.spaces.set_role(owner.agent_id, space, member.agent_id, role)
    first = (await post(client, writer, content="space secret one", space=space))["record_hash"]
    second = (await post(client, writer, content="space secret two", space=space))["record_hash"]
    before = await count(node)
    with pytest.raises(Forbidden) as refused:
        await node.redactions.redact(reader.agent_id, first, None)
    assert refused.value.code == "not_target_author"
    assert await count(node) == before
    by_admin = await node.redactions.redact(admin.agent_id, first, "moderation")
    by_owner = await node.redactions.redact(owner.agent_id, second, None)
    assert by_admin.tombstone is not None and by_admin.tombstone.space == space
    assert by_admin.tombstone.redacted_by == admin.agent_id and by_admin.tombstone.author_id == writer.agent_id
    assert by_owner.tombstone is not None and by_owner.tombstone.redacted_by == owner.agent_id
    read = await get_json(client, f"/v1/entries/{first}", reader)
    assert [t["hash"] for t in read["redacted"]] == [first] and read["entries"] == []
    outsider = await make_agent("outsider")  # a tombstone of a space is shown only to who may read the space
    hidden = await get_json(client, f"/v1/entries/{first}", outsider, status=404)
    assert hidden["code"] == "entry_not_found"
    # nor does redacting reveal it: the outsider's redaction is answered as of a target never seen here
    third = (await post(client, writer, content="space secret three", space=space))["record_hash"]
    for target in (first, third):
        out = await node.redactions.redact(outsider.agent_id, target, None)
        assert out.created and out.pending and out.tombstone is None
    assert (await get_json(client, f"/v1/entries/{third}", writer))["entries"]  # void for it: the body stays


async def test_a_redaction_of_a_space_post_names_its_space(
    client: TestClient, node: Node, make_agent: MakeAgent
) -> None:
    owner, writer = await make_agent("owner"), await make_agent("writer")
    space = (await node.spaces.create(owner.agent_id, "family", "")).space_id
    await node.spaces.set_role(owner.agent_id, space, writer.agent_id, "writer")
    target = (await post(client, writer, content="in a space", space=space))["record_hash"]
    key = await node.sealing.signing_key(writer.agent_id)
    assert key is not None
    unsigned = {
        "kind": "redaction",
        "schema_version": canonical.SCHEMA_VERSION,
        "author_id": writer.agent_id,
        "created_at": format_ms(node.now_ms()),
        "target": target,
    }
    before = await count(node)
    with pytest.raises(InvalidInput) as refused:
        await node.redactions.submit(writer.agent_id, records.sign(unsigned, key))
    assert (refused.value.code, refused.value.field) == ("space_mismatch", "$.record.space")
    assert await count(node) == before
    out = await node.redactions.submit(writer.agent_id, records.sign({**unsigned, "space": space}, key))
    assert out.created and out.tombstone is not None


async def test_tombstones_are_shown_only_where_the_sight_sees_them(node: Node, make_agent: MakeAgent) -> None:
    from node.spaces.sight import OPERATOR, PUBLIC

    assert await node.redactions.tombstones(["a" * 64], OPERATOR) == []
    alice = await make_agent("alice")
    entry, _ = await node.entries.post(
        alice.agent_id, PostEntry(entry_type="finding", performative="inform", content="public words"), None
    )
    address = entry.record_hash
    await node.redactions.redact(alice.agent_id, address, None)
    assert [t.hash for t in await node.redactions.tombstones([address], PUBLIC)] == [address]
