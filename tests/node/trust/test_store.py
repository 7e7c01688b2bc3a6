"""node.trust.store: the signals read from the log and the trust cache beside it, on a real node's SQLite file
through the node's read and write jobs."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from identity import keys, records
from node.features import LOG
from node.service import Node
from node.store import projections
from node.store.conn import Conn
from node.trust import store
from tests.conftest import AgentCreds
from tests.node.api_helpers import entry_record, hash_of
from tests.pg_fixtures import on_both_engines
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


def _trust_story(conn: Conn, alice: keys.SigningKey, bob: keys.SigningKey, carol: keys.SigningKey) -> list[Any]:
    """Alice claims; Bob supports it with a link, Carol disconfirms it with an entry, Alice supports herself (not a
    signal), Bob's retracted support of another claim (not one). The signals, then the cache written and read."""
    t0 = 1_767_323_045_000
    claim = entry_record(alice, "the bridge holds", created_ms=t0)
    other = entry_record(alice, "the road is open", created_ms=t0 + 1)

    def on(target: dict[str, Any], link_type: str) -> list[dict[str, str]]:
        return [{"target": hash_of(target), "link_type": link_type, "annotation": ""}]

    support = entry_record(bob, "it does", created_ms=t0 + 2, links=on(other, "supports"))
    story = [
        claim,
        other,
        entry_record(bob, "agreed", created_ms=t0 + 3, links=on(claim, "supports")),
        entry_record(
            carol, "it does not", created_ms=t0 + 4, performative="disconfirm", links=on(claim, "responds_to")
        ),
        entry_record(alice, "me too", created_ms=t0 + 5, links=on(claim, "supports")),
        support,
        entry_record(bob, "I take it back", created_ms=t0 + 6, performative="retract", links=on(support, "supersedes")),
    ]
    conn.execute("BEGIN")
    for record in story:
        projections.append_many(conn, [projections.Incoming(record, *records.check(record))], origin="local", now_ms=t0)
    signals = sorted(tuple(row) for row in store.signal_rows(conn))
    head = store.log_head(conn)
    before = store.cache_seq(conn)
    store.replace_cache_txn(
        conn, [(alice.did, 1, 1, 0.5, 0.5, 1.0, 1.0)], [(hash_of(claim), 0.625, 1, 1)], head, t0 + 10
    )
    conn.execute("COMMIT")
    return [signals, head, before, store.cache_seq(conn), tuple(store.agent_scores(conn, alice.did)),
            store.agent_scores(conn, bob.did)]  # fmt: skip


def test_the_trust_store_answers_alike_on_either_engine(tmp_path: Path, pg_migrated_url: str) -> None:
    alice, bob, carol = (keys.SigningKey.generate() for _ in range(3))
    expected, got = on_both_engines(tmp_path, pg_migrated_url, LOG, lambda conn: _trust_story(conn, alice, bob, carol))
    assert got == expected
    signals, head, before, after, scores, none = expected
    # Bob's link supports the claim, Carol's disconfirm entry opposes it; Alice's own link and Bob's retracted
    # support are no signals (on the claim: two rows, one each way)
    assert sorted(polarity for endorser, _, target, polarity in signals) == [-1, 1]
    assert {endorser for endorser, *_ in signals} == {bob.did, carol.did}
    assert (before, after, head) == (None, head, 7) and scores == (1, 1, 0.5, 0.5) and none is None
