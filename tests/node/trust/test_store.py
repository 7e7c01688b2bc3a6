"""node.trust.store: the signals read from the log and the trust cache beside it, on a real node's SQLite file
through the node's read and write jobs."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from node.service import Node
from node.trust import store
from tests.conftest import AgentCreds
from wire.api import LinkSpec, PostEntry

MakeAgent = Callable[[str], Awaitable[AgentCreds]]


async def post(node: Node, who: AgentCreds, content: str, performative: str = "inform", **extra: object) -> str:
    body = PostEntry(entry_type="finding", performative=performative, content=content, **extra)  # type: ignore[arg-type]
    entry, _ = await node.entries.post(who.agent_id, body, None)
    return entry.record_hash


async def test_signal_rows_count_each_endorsement_once_and_never_oneself(node: Node, make_agent: MakeAgent) -> None:
    alice, bob, carol = [await make_agent(n) for n in ("alice", "bob", "carol")]
    claim = await post(node, alice, "the bridge holds")
    assert await node.db.read(store.signal_rows) == []
    # bob confirms with a confirm entry that also asserts `supports`: one row (UNION)
    await post(node, bob, "seen it", "confirm", links=[LinkSpec(target=claim, link_type="supports")])
    await post(node, carol, "it sways", links=[LinkSpec(target=claim, link_type="contradicts")])
    await post(node, alice, "I agree with me", "confirm", links=[LinkSpec(target=claim, link_type="supports")])
    rows = sorted(tuple(r) for r in await node.db.read(store.signal_rows))
    assert rows == sorted([(bob.agent_id, alice.agent_id, claim, 1), (carol.agent_id, alice.agent_id, claim, -1)])


async def test_the_log_head_and_an_empty_cache(node: Node, make_agent: MakeAgent) -> None:
    assert await node.db.read(store.log_head) == 0
    assert await node.db.read(store.cache_seq) is None  # no refresh yet
    alice = await make_agent("alice")
    await post(node, alice, "one")
    head = await node.db.read(lambda c: c.execute("SELECT max(seq) FROM records").fetchone()[0])
    assert await node.db.read(store.log_head) == head > 0
    assert await node.db.read(lambda c: store.agent_scores(c, alice.agent_id)) is None


async def test_replace_cache_txn_replaces_the_whole_cache(node: Node) -> None:
    await node.db.write(
        lambda c: store.replace_cache_txn(
            c, [("did:key:za", 2, 1, 0.6, 0.55, 1.0, 0.5), ("did:key:zb", 0, 0, 0.5, 0.5, 0.0, 0.0)],
            [("e" * 64, 0.7, 2, 1)], 5, 1000,
        )
    )  # fmt: skip
    assert await node.db.read(store.cache_seq) == 5
    assert tuple(await node.db.read(lambda c: store.agent_scores(c, "did:key:za"))) == (2, 1, 0.6, 0.55)
    await node.db.write(lambda c: store.replace_cache_txn(c, [("did:key:zb", 1, 0, 0.667, 0.6, 0.5, 0.0)], [], 9, 2000))
    assert await node.db.read(store.cache_seq) == 9
    assert await node.db.read(lambda c: store.agent_scores(c, "did:key:za")) is None  # gone with the old cache
    assert tuple(await node.db.read(lambda c: store.agent_scores(c, "did:key:zb"))) == (1, 0, 0.667, 0.6)
    left = await node.db.read(lambda c: c.execute("SELECT count(*) FROM entry_confidence").fetchone()[0])
    state = await node.db.read(lambda c: tuple(c.execute("SELECT computed_seq, computed_ms FROM trust_state")))
    assert left == 0 and [tuple(s) for s in state] == [(9, 2000)]
