"""An admin's redaction and the admin's later demotion, in every arrival order (issue 39; docs/format-v3.md 5.2
and 6): a demotion whose vouched set names the redaction keeps it holding; one that leaves it out makes it void
for its target, so the body shows again on the node that had dropped it (appended back from what it set aside for
the grace) and is kept by the node that took the demotion first. Every order ends with the same bodies held and the
same digest. Real nodes on real SQLite files, sync ingest as a peer's batch is taken, real signed records."""

from __future__ import annotations

import random
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from identity import keys, records, vouching
from node.redaction import store as redaction_store
from node.service import Node
from node.spaces.service import nonce
from tests.conftest import AgentCreds
from tests.node.api_helpers import entry_record
from tests.node.spaces.test_orders import owners_node
from tests.node.spaces.test_vouched_set import _arrive, _verified, signed
from wire.api import PostEntry

MakeAgent = Callable[[str], Awaitable[AgentCreds]]
OWNER = keys.SigningKey.from_seed(b"\x61" * 32)
MOD, BOB = keys.SigningKey.from_seed(b"\x62" * 32), keys.SigningKey.from_seed(b"\x63" * 32)


def _story(space: str, vouch_for_redaction: bool) -> dict[str, dict[str, Any]]:
    """The owner makes MOD an admin and BOB a writer; BOB posts; MOD redacts the post; the owner demotes MOD with a
    removal vouching for the redaction, or for nothing."""
    promotion = signed(OWNER, 2, kind="space_admin", space=space, member=MOD.did, role="admin", seq=1)
    writer = signed(OWNER, 3, kind="space_member", space=space, member=BOB.did, role="writer", seq=1)
    post = entry_record(BOB, "the neighbour's phone number", created_ms=1_764_583_204_000, schema_version="v2",
                        space=space)  # fmt: skip
    redaction = signed(MOD, 5, kind="redaction", target=records.compute_hash(post), space=space, reason="personal")
    vouched = [_verified(redaction).version] if vouch_for_redaction else []
    vouch = vouching.vouch(MOD.did, vouched).as_json()
    demotion = signed(OWNER, 6, kind="space_admin", space=space, member=MOD.did, role="none", seq=2,
                      prior=records.compute_hash(promotion), vouches=[vouch])  # fmt: skip
    story = {"promotion": promotion, "writer": writer, "post": post, "redaction": redaction, "demotion": demotion}
    if vouched:
        versions, proof = vouching.page(sorted(vouched), 0)
        story["page"] = signed(OWNER, 7, kind="vouch_page", event=records.compute_hash(demotion), subject=MOD.did,
                               page=0, versions=versions, proof=proof, space=space)  # fmt: skip
    return story


def _orders(story: dict[str, dict[str, Any]]) -> dict[str, list[list[dict[str, Any]]]]:
    s = story
    tail = [s["page"]] if "page" in s else []
    base = [s["promotion"], s["writer"], s["post"]]
    orders = {
        "the redaction, then the demotion": [base, [s["redaction"]], [s["demotion"], *tail]],
        "the demotion, then the redaction": [base, [s["demotion"], *tail], [s["redaction"]]],
        "the redaction before the post": [
            [s["promotion"], s["writer"], s["redaction"]],
            [s["post"]],
            [s["demotion"], *tail],
        ],
        "one batch": [[*base, s["redaction"], s["demotion"], *tail]],
    }
    rnd = random.Random(39)
    for n in range(3):
        every = [*base, s["redaction"], s["demotion"], *tail]
        rnd.shuffle(every)
        orders[f"shuffled {n}"] = [[record] for record in every]
    return orders


@pytest.mark.parametrize("vouch_for_redaction", [False, True])
async def test_every_order_of_a_redaction_and_its_admins_demotion_ends_the_same(
    tmp_path: Path, vouch_for_redaction: bool, node_store: Callable[[], str | None]
) -> None:
    creation = signed(OWNER, kind="space", name="street", description="", nonce=nonce())
    space = records.compute_hash(creation)
    story = _story(space, vouch_for_redaction)
    target = records.compute_hash(story["post"])
    ends: dict[str, tuple[bool, bool, int, str]] = {}
    for n, (name, batches) in enumerate(_orders(story).items()):
        async with owners_node(tmp_path / f"node-{n}", OWNER, node_store()) as node:
            await node.spaces.submit(OWNER.did, creation)  # created here: this node hosts the space
            await _arrive(node, batches)

            def state(conn: Any) -> tuple[bool, bool]:
                held = conn.execute("SELECT count(*) FROM records WHERE hash = ?", (target,)).fetchone()[0] > 0
                return held, bool(redaction_store.tombstones(conn, [target]))

            held, tombstone = await node.db.read(state)
            digest = await node.sync.digest(space=space)
            ends[name] = (held, tombstone, digest.count, digest.sha256)
    expected_held = not vouch_for_redaction  # left out of the vouched set: the redaction is void, the body stays
    for name, (held, tombstone, _count, _sha) in ends.items():
        assert (held, tombstone) == (expected_held, not expected_held), name
    assert len({(count, sha) for _h, _t, count, sha in ends.values()}) == 1, ends


async def test_the_nodes_own_demotion_vouches_for_the_admins_redactions(node: Node, make_agent: MakeAgent) -> None:
    """The node's own demotion (`Spaces.set_role`, `bbs space role`) vouches for what the admin did as an admin:
    its redactions keep holding after it (a demotion is no undo of the admin's moderation)."""
    owner, moderator, writer = [await make_agent(n) for n in ("owner", "moderator", "writer")]
    space = (await node.spaces.create(owner.agent_id, "street", "")).space_id
    await node.spaces.set_role(owner.agent_id, space, writer.agent_id, "writer")
    await node.spaces.set_role(owner.agent_id, space, moderator.agent_id, "admin")
    post = PostEntry(entry_type="finding", performative="inform", content="the neighbour's phone number", space=space)
    entry, _ = await node.entries.post(writer.agent_id, post, None)
    await node.redactions.redact(moderator.agent_id, entry.record_hash, "personal")
    await node.spaces.set_role(owner.agent_id, space, moderator.agent_id, "writer")
    await node.spaces.set_role(owner.agent_id, space, moderator.agent_id, "none")
    tombstones = await node.db.read(lambda c: redaction_store.tombstones(c, [entry.record_hash]))
    held = await node.db.read(
        lambda c: c.execute("SELECT count(*) FROM records WHERE hash = ?", (entry.record_hash,)).fetchone()[0]
    )
    assert (len(tombstones), held) == (1, 0)
