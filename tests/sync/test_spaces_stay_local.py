"""Until part 2 of issue 37, a space's records never leave the node that holds them (docs/spaces.md): two real
nodes, the peer pulls, fetches and reconciles, and gets none of them; a peer that sends one is refused."""

from __future__ import annotations

from node.spaces import store as space_store
from sync.verify import TOO_NEW, verify_record


async def test_a_space_and_its_members_are_not_pulled_fetched_or_in_the_digest(make_peer) -> None:  # type: ignore[no-untyped-def]
    a, b = await make_peer("a"), await make_peer("b")
    await a.add_peer(b)
    await b.add_peer(a)
    owner, member = await a.agent("owner"), await a.agent("member")
    made = await a.node.spaces.create(owner, "family", "")
    await a.node.spaces.set_role(owner, made.space_id, member, "writer")
    shared = await a.post(owner, "public")
    sql = "SELECT hash, body FROM records WHERE kind LIKE 'space%'"
    held = await a.node.db.read(lambda c: [(str(r[0]), bytes(r[1])) for r in c.execute(sql)])
    assert len(held) == 3  # the space, its member and the space_host naming node a
    await b.puller().pull_once(a.config)
    got = await b.hashes()
    assert shared in got and not {h for h, _ in held} & got
    fetched = await b.puller().fetch_into_store(a.config, [h for h, _ in held])
    assert fetched[0] == []
    assert await a.digest() == await b.digest()  # the digest covers neither
    assert await b.node.db.read(lambda c: space_store.space(c, made.space_id)) is None
    for record_hash, body in held:  # a peer that sends one anyway is refused as a form it does not take
        verdict = verify_record(body, record_hash)
        assert getattr(verdict, "reason", None) == TOO_NEW, verdict
