"""The submission rules (node/store/submission.py) close bad input where records enter, never in the check sync shares:
a record a peer already holds is pulled and stored by a node that would refuse it from a client."""

from __future__ import annotations

from tests.node.api_helpers import count, entry_record, hash_of, ingest, self_signer
from tests.sync.conftest import PeerNode


async def test_a_peer_syncs_what_a_client_may_not_submit(make_peer) -> None:  # type: ignore[no-untyped-def]
    a: PeerNode = await make_peer("a")
    b: PeerNode = await make_peer("b")
    await a.add_peer(b)
    await b.add_peer(a)
    author = await self_signer(b.node, "own-key")  # an agent holding its own key, registered on b
    now = b.node.now_ms()
    held = [
        entry_record(author.key, "a number too big for doubles", created_ms=now, metadata={"n": 2**53 + 1}),
        entry_record(author.key, "a tag with a NUL", created_ms=now + 1, tags=["a\x00b"]),
        entry_record(author.key, "\u200b\u202e\u2066", created_ms=now + 2),
    ]
    before = await count(b.node)
    for record in held:  # b refuses each from its author...
        async with b.session.post(b.url + "/v1/entries", json={"record": record}, headers=author.headers) as resp:
            assert resp.status == 422, await resp.text()
            problem = await resp.json(content_type=None)
            assert problem["code"] in ("integer_out_of_range", "nul_character", "invisible_only")
    assert await count(b.node) == before
    for record in held:  # ...but a holds them (stored by an older node, or one without the rules)
        assert await ingest(a.node, record) == "saved"

    report = await b.puller().pull_once(a.config)
    saved = {o.hash for o in report.outcomes if o.outcome == "saved"}
    assert {hash_of(r) for r in held} <= saved
    assert {hash_of(r) for r in held} <= await b.hashes()
