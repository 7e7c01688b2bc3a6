"""A thief's redaction made void by the owner's revocation, over two real nodes on loopback, each with its own SQLite
file (issue 39, "A thief cannot destroy in one stroke"; docs/sync.md "Redaction"): A scrubs at once (grace 0), B
keeps the dropped body aside for its grace. When the revocation arrives, B shows the entry again from what it set
aside, and A, which holds nothing of it any more, fetches it back from B by reconciliation; then both hold it, the
digests agree and reconciliation asks for nothing. C, which never held the body (the redaction came first), fetches
it from B too."""

from __future__ import annotations

import asyncio
from typing import Any

from node.redaction import store as redaction_store
from tests.node.api_helpers import SelfSigner, hash_of
from tests.node.redaction.test_void_by_revocation import Theft, theft
from tests.sync.conftest import PeerNode
from tests.sync.test_redaction_federates import holds, peered, tombstone_of


async def send(peer: PeerNode, who: SelfSigner, path: str, body: dict[str, Any], status: int = 201) -> Any:
    async with peer.session.post(peer.url + path, json=body, headers=who.headers) as resp:
        data = await resp.json(content_type=None)
        assert resp.status == status, data
        return data


async def set_aside(peer: PeerNode) -> int:
    return await peer.node.db.read(redaction_store.set_aside_count)


async def reads(peer: PeerNode, story: Theft) -> tuple[list[str], list[str]]:
    """(entries, tombstones) a read of the story's entry answers on `peer`."""
    address = hash_of(story.entry)
    async with peer.session.get(f"{peer.url}/v1/entries/{address}", headers=peer.admin) as resp:
        body = await resp.json()
        if resp.status == 404:
            return [], []
        assert resp.status == 200, body
        return [e["record_hash"] for e in body["entries"]], [t["hash"] for t in body["redacted"]]


async def test_the_node_that_scrubbed_fetches_the_body_back_from_the_node_that_kept_it(make_peer: Any) -> None:
    a, b, c = await peered(make_peer, "a", "b", "c")
    a.node.redactions.grace_s = 0  # A scrubs at once; B keeps its default grace (24 h)
    story = await theft(a.node)
    owner, address = story.owner, hash_of(story.entry)
    await send(
        a, owner, f"/v1/agents/{owner.agent_id}/key-events", {"record": story.rotate, "pages": [story.rotate_page]}
    )
    await send(a, owner, "/v1/entries", {"record": story.entry})
    await b.puller().pull_once(a.config)
    assert await holds(b, address)

    # the thief redacts on A; B takes the redaction; A's scrub deletes everything of the body
    await send(a, owner, "/v1/redactions", {"record": story.redaction})
    await b.puller().pull_once(a.config)
    assert await tombstone_of(a, address) == await tombstone_of(b, address) == hash_of(story.redaction)
    assert not await holds(a, address) and not await holds(b, address)
    deadline = asyncio.get_running_loop().time() + 30
    while await set_aside(a):  # A's scrubber runs beside the test
        assert asyncio.get_running_loop().time() < deadline, "A's scrub did not run"
        await asyncio.sleep(0.05)
    assert await set_aside(b) == 1  # B is within its grace
    assert await reads(a, story) == ([], [address]) == await reads(b, story)
    assert await a.digest() == await b.digest()
    await c.puller().pull_once(a.config)  # C never held the body: it holds the redaction, waiting for its target
    assert not await holds(c, address) and await tombstone_of(c, address) is None
    assert await a.digest() == await c.digest()

    # the owner revokes the stolen key on A, vouching for its entry and not the redaction
    revocation = {"record": story.revoke, "pages": story.revoke_pages}
    await send(a, owner, f"/v1/agents/{owner.agent_id}/key-events", revocation)
    assert await reads(a, story) == ([], [])  # void here too, but A scrubbed: nothing left to show
    assert await tombstone_of(a, address) is None
    await b.puller().pull_once(a.config)  # B: the redaction is void, the body it set aside is in its log again
    assert await holds(b, address) and await tombstone_of(b, address) is None and await set_aside(b) == 0
    assert await reads(b, story) == ([address], [])
    # A no longer refuses the version: reconciliation with B brings it back
    report = await a.puller().reconcile(b.config)
    assert report.need == 1, report
    assert await holds(a, address) and await reads(a, story) == ([address], [])
    # C, which never held it, takes the revocation from A and the body from B
    await c.puller().pull_once(a.config)
    assert (await c.puller().reconcile(b.config)).need == 1
    assert await reads(c, story) == ([address], [])
    assert await a.digest() == await b.digest() == await c.digest()
    for one, other in ((a, b), (b, a), (c, a), (a, c)):
        assert (await one.puller().reconcile(other.config)).need == 0
