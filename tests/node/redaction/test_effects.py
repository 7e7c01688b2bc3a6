"""What a redaction does on one node, and a body arriving after it: through a real Node's database and sync ingest
(`NodeSyncStore.ingest`, as a pull stores a peer's records), real keys and a real SQLite file."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from identity import canonical, keys, records
from node.errors import Forbidden
from node.federation.store import NodeSyncStore, add_peer_txn
from node.redaction import effects, store
from node.service import Node
from node.store import projections
from node.store.conn import Conn
from sync.store import Verified
from sync.verify import verify_record
from tests.node.api_helpers import SelfSigner, entry_record, hash_of, ingest, link_record, self_signer
from tests.store_dump import dump
from wire.time import format_ms


def redaction_of(signer: SelfSigner, target: str, created_ms: int, **more: Any) -> dict[str, Any]:
    body = {
        "kind": "redaction",
        "schema_version": canonical.SCHEMA_VERSION,
        "author_id": signer.agent_id,
        "created_at": format_ms(created_ms),
        "target": target,
        **more,
    }
    return records.sign(body, signer.key)


async def held(node: Node, address: str) -> list[str]:
    return await node.db.read(
        lambda c: [str(r[0]) for r in c.execute("SELECT version FROM records WHERE hash = ?", (address,))]
    )


async def rebuilt_equals(node: Node) -> None:
    def run(conn: Conn) -> tuple[Any, Any]:
        before = projections.snapshot(conn)
        projections.rebuild(conn)
        return before, projections.snapshot(conn)

    before, after = await node.db.write(run)
    assert before == after and before["redactions"]


async def test_a_peers_body_after_the_redaction_is_refused_and_only_the_tombstone_kept(node: Node) -> None:
    author = await self_signer(node, "author")
    record = entry_record(author.key, "secret-from-a-peer", created_ms=node.now_ms() - 5000)
    address = hash_of(record)
    out = await node.redactions.submit(author.agent_id, redaction_of(author, address, node.now_ms()))
    assert out.pending
    assert await ingest(node, record) == "void"  # the body never touches the log
    assert await held(node, address) == []
    tombs = await node.db.read(lambda c: store.tombstones(c, [address]))
    assert [(t.kind, t.author_id, t.redaction) for t in tombs] == [("entry", author.agent_id, out.redaction)]
    assert address in await node.db.read(lambda c: {str(r[0]) for r in c.execute("SELECT hash FROM refused_versions")})
    assert "secret-from-a-peer" not in await node.db.read(dump)
    assert await ingest(node, record) == "void"  # again: still refused, one tombstone
    await rebuilt_equals(node)


async def test_a_peers_body_of_another_author_is_stored_despite_a_redaction_naming_it(node: Node) -> None:
    author, mallory = await self_signer(node, "author"), await self_signer(node, "mallory")
    record = entry_record(author.key, "not mallory's", created_ms=node.now_ms() - 5000)
    address = hash_of(record)
    await node.redactions.submit(mallory.agent_id, redaction_of(mallory, address, node.now_ms()))
    assert await ingest(node, record) == "saved"
    assert await held(node, address) != []
    assert await node.db.read(lambda c: store.tombstones(c, [address])) == []
    await rebuilt_equals(node)  # a rebuild replays the void redaction and changes no log
    assert await held(node, address) != []


async def test_rebuild_gives_the_same_tables_after_redactions(node: Node) -> None:
    author = await self_signer(node, "author")
    now = node.now_ms()
    one = entry_record(author.key, "one", created_ms=now - 9000)
    two = entry_record(author.key, "two", created_ms=now - 8000)
    joined = link_record(author.key, hash_of(two), hash_of(one), "supports", created_ms=now - 7000)
    for record in (one, two, joined):
        assert await ingest(node, record) == "saved"
    for target in (hash_of(one), hash_of(joined)):
        await node.redactions.submit(author.agent_id, redaction_of(author, target, now))
    assert await held(node, hash_of(one)) == [] and await held(node, hash_of(joined)) == []
    await rebuilt_equals(node)


@pytest.mark.parametrize("redaction_first", [True, False])
async def test_either_arrival_order_ends_with_the_same_tombstone_and_no_body(node: Node, redaction_first: bool) -> None:
    author = await self_signer(node, "author")
    record = entry_record(author.key, "order-secret", created_ms=node.now_ms() - 5000)
    address = hash_of(record)
    redaction = redaction_of(author, address, node.now_ms())
    if redaction_first:
        await node.redactions.submit(author.agent_id, redaction)
        assert await ingest(node, record) == "void"
    else:
        assert await ingest(node, record) == "saved"
        await node.redactions.submit(author.agent_id, redaction)
    tombs = await node.db.read(lambda c: store.tombstones(c, [address]))
    assert [(t.hash, t.redaction, t.versions) for t in tombs] == [(address, hash_of(redaction), [hash_version(record)])]
    assert await held(node, address) == []


def hash_version(record: dict[str, Any]) -> str:
    return projections.version_of("entry", hash_of(record), canonical.canonical_bytes(record))


@settings(max_examples=15, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(order=st.permutations(range(4)))
def test_any_arrival_order_of_bodies_and_redactions_gives_the_same_state(
    tmp_path_factory: Any, order: list[int], node_store: Callable[[], str | None]
) -> None:
    """Two entries, one redacted by its author and one named by a stranger's redaction, arriving in any order on a
    fresh node: the same bodies held, the same tombstones."""
    import asyncio

    from node.ops.datadir import initialise

    async def run() -> tuple[list[str], list[str]]:
        path = tmp_path_factory.mktemp("node") / "node"
        initialise(path, node_store())
        node = Node(path)
        node.open(search_index=False)
        try:
            author, stranger = await self_signer(node, "author"), await self_signer(node, "stranger")
            now = node.now_ms()
            kept = entry_record(author.key, "kept", created_ms=now - 5000)
            gone = entry_record(author.key, "gone", created_ms=now - 4000)
            steps = [
                lambda: ingest(node, kept),
                lambda: ingest(node, gone),
                lambda: node.redactions.submit(author.agent_id, redaction_of(author, hash_of(gone), now)),
                lambda: strangers(node, stranger, hash_of(kept), now),
            ]
            for i in order:
                await steps[i]()
            bodies = await node.db.read(
                lambda c: sorted(
                    json.loads(r[0])["content"] for r in c.execute("SELECT body FROM records WHERE kind = 'entry'")
                )
            )
            tombs = await node.db.read(lambda c: [t.hash for t in store.tombstones(c, [hash_of(kept), hash_of(gone)])])
            return bodies, tombs
        finally:
            node.close()

    bodies, tombs = asyncio.run(run())
    assert bodies == ["kept"]
    assert len(tombs) == 1


async def strangers(node: Node, stranger: SelfSigner, target: str, now: int) -> None:
    """A stranger's redaction: refused (403) while the target is held, stored (and void for it) before."""
    try:
        await node.redactions.submit(stranger.agent_id, redaction_of(stranger, target, now))
    except Forbidden as exc:
        assert exc.code == "not_target_author"


def test_effects_tombstone_out_keeps_every_member() -> None:
    row = store.TombstoneRow("a" * 64, "link", "did:key:x", "2026-01-01T00:00:00Z", None, ["a" * 64], "r", "did:key:x",
                             "2026-01-02T00:00:00Z", 5)  # fmt: skip
    out = effects.tombstone_out(row)
    assert (out.hash, out.kind, out.redacted, out.redaction, out.versions) == ("a" * 64, "link", True, "r", ["a" * 64])


async def test_a_peers_redaction_wakes_the_scrubber_at_once(node: Node) -> None:
    """A redaction taken from a peer sets the scrubber to work without its idle wait (scrub.IDLE_S), as a local one
    does: the redaction drill found the bytes left 5 s later on a node that synced it."""
    author = await self_signer(node, "author")
    record = entry_record(author.key, "leaked-then-synced", created_ms=node.now_ms() - 5000)
    assert await ingest(node, record) == "saved"
    await node.redactions.wait_for_work(0)  # nothing pending before the redaction arrives
    peer = keys.SigningKey.generate().did
    await node.db.write(lambda c: add_peer_txn(c, "http://127.0.0.1:9", peer, node.now_ms()))
    redaction = redaction_of(author, hash_of(record), node.now_ms())
    checked = verify_record(canonical.canonical_bytes(redaction), records.compute_hash(redaction))
    assert isinstance(checked, Verified), checked
    (outcome,) = await node.sync.ingest(peer, [checked], [], None)  # the node's own sync store, as its puller
    assert outcome.outcome == "saved"
    await asyncio.wait_for(node.redactions.wait_for_work(60), 5)  # woken: returns at once, not after 60 s


async def test_a_peers_redaction_applies_as_a_local_one(node: Node) -> None:
    author = await self_signer(node, "author")
    record = entry_record(author.key, "leaked-by-a-peer", created_ms=node.now_ms() - 5000)
    address = hash_of(record)
    assert await ingest(node, record) == "saved"
    peers_redaction = redaction_of(author, address, node.now_ms())
    assert await ingest(node, peers_redaction) == "saved"  # verified as any record (no longer too_new)
    assert await held(node, address) == []
    (tombstone,) = await node.db.read(lambda c: store.tombstones(c, [address]))
    assert tombstone.redaction == hash_of(peers_redaction)
    scope = "SELECT scope FROM records WHERE hash = ?"
    assert await node.db.read(lambda c: c.execute(scope, (hash_of(peers_redaction),)).fetchone()[0]) == "federation"
    assert "leaked-by-a-peer" not in await node.db.read(dump)


async def test_a_peers_redaction_of_an_unseen_target_is_stored_and_counts_toward_nothing(node: Node) -> None:
    """A redaction whose target never arrived is no tombstone: no refused version, no equivocation; a stranger's
    redaction stored before the body does not keep the author's body out when it comes."""
    author, stranger = await self_signer(node, "author"), await self_signer(node, "stranger")
    record = entry_record(author.key, "mine", created_ms=node.now_ms() - 5000)
    address = hash_of(record)
    assert await ingest(node, redaction_of(stranger, address, node.now_ms())) == "saved"

    def counts(conn: Conn) -> list[int]:
        tables = ("tombstones", "refused_versions", "equivocations")
        return [int(conn.execute(f"SELECT count(*) FROM {t}").fetchone()[0]) for t in tables]

    assert await node.db.read(counts) == [0, 0, 0]
    assert await ingest(node, record) == "saved"  # the stranger's redaction is void for it
    assert await held(node, address) != [] and await node.db.read(counts) == [0, 0, 0]


async def test_a_peers_redaction_of_a_redaction_stays_void(node: Node) -> None:
    author = await self_signer(node, "author")
    record = entry_record(author.key, "gone", created_ms=node.now_ms() - 5000)
    first = redaction_of(author, hash_of(record), node.now_ms() - 1000)
    assert await ingest(node, record) == "saved" and await ingest(node, first) == "saved"
    again = redaction_of(author, hash_of(first), node.now_ms())
    assert await ingest(node, again) == "saved"  # stored as every node stores it (convergent), void for its target
    assert await held(node, hash_of(first)) != [] and await held(node, hash_of(record)) == []
    assert await node.db.read(lambda c: store.tombstones(c, [hash_of(first)])) == []


async def test_a_redacted_body_that_would_wait_for_a_key_is_refused_before_it_waits(node: Node) -> None:
    """The screen runs before the waiting area: a version of a redacted address signed by a key this node does not
    know yet (it would wait for the rotation) never reaches the disk, not even the waiting table."""
    author = await self_signer(node, "author")
    rotated = keys.SigningKey.generate()
    record = entry_record(rotated, "waits-secret", created_ms=node.now_ms() - 5000, author_id=author.agent_id,
                          signing_key=rotated.did)  # fmt: skip
    address = hash_of(record)
    await node.redactions.submit(author.agent_id, redaction_of(author, address, node.now_ms()))
    assert await ingest(node, record) == "void"
    assert await node.db.read(lambda c: c.execute("SELECT count(*) FROM waiting").fetchone()[0]) == 0
    assert "waits-secret" not in await node.db.read(dump)


@pytest.mark.parametrize("redaction_first", [True, False])
async def test_a_peers_batch_with_a_body_and_its_redaction_keeps_only_the_tombstone(
    node: Node, redaction_first: bool
) -> None:
    """Whatever their order in one batch, the redaction is stored first and the body never reaches the log."""
    author = await self_signer(node, "author")
    record = entry_record(author.key, "in-one-batch", created_ms=node.now_ms() - 5000)
    redaction = redaction_of(author, hash_of(record), node.now_ms())
    batch = [redaction, record] if redaction_first else [record, redaction]
    peer = keys.SigningKey.generate().did
    await node.db.write(lambda c: add_peer_txn(c, "http://127.0.0.1:9", peer, node.now_ms()))
    checked = [verify_record(canonical.canonical_bytes(r), hash_of(r)) for r in batch]
    verified = [v for v in checked if isinstance(v, Verified)]
    assert len(verified) == 2
    outcomes = await NodeSyncStore(node.db, node.node_id, node.now_ms).ingest(peer, verified, [], None)
    assert {o.hash: o.outcome for o in outcomes} == {hash_of(redaction): "saved", hash_of(record): "void"}
    assert await held(node, hash_of(record)) == []
    entries = await node.db.read(lambda c: c.execute("SELECT count(*) FROM entries").fetchone()[0])
    assert entries == 0


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(order=st.permutations(range(4)), split=st.integers(min_value=0, max_value=4))
def test_any_arrival_order_from_peers_gives_equal_digests(
    tmp_path_factory: Any, order: list[int], split: int, node_store: Callable[[], str | None]
) -> None:
    """Two bodies, the author's redaction of one and a stranger's of the other, all from peers: one node takes them
    in `order`, in two batches cut at `split`; another node takes them one by one in the reverse order. Both hold the
    same bodies, tombstones and federation digest (the redaction records count, the redacted body does not)."""
    import asyncio

    from node.ops.datadir import initialise

    author, stranger = keys.SigningKey.generate(), keys.SigningKey.generate()

    async def state(name: str, batches: list[list[dict[str, Any]]]) -> tuple[list[str], list[str], tuple[int, str]]:
        path = tmp_path_factory.mktemp(name) / "node"
        initialise(path, node_store())
        node = Node(path)
        node.open(search_index=False)
        try:
            peer = keys.SigningKey.generate().did
            await node.db.write(lambda c: add_peer_txn(c, "http://127.0.0.1:9", peer, node.now_ms()))
            sync_store = NodeSyncStore(node.db, node.node_id, node.now_ms)
            for batch in batches:
                checked = [verify_record(canonical.canonical_bytes(r), hash_of(r)) for r in batch]
                await sync_store.ingest(peer, [v for v in checked if isinstance(v, Verified)], [], None)
            bodies = await node.db.read(
                lambda c: sorted(
                    json.loads(r[0])["content"] for r in c.execute("SELECT body FROM records WHERE kind = 'entry'")
                )
            )
            tombs = await node.db.read(
                lambda c: [t.hash for t in store.tombstones(c, [r["target"] for r in redactions])]
            )
            digest = await sync_store.digest()
            return bodies, tombs, (digest.count, digest.sha256)
        finally:
            node.close()

    base = format_ms(1_764_900_000_000)
    kept = entry_record(author, "kept", created_ms=1_764_900_000_000 - 5000)
    gone = entry_record(author, "gone", created_ms=1_764_900_000_000 - 4000)
    redactions = [
        records.sign({"kind": "redaction", "schema_version": canonical.SCHEMA_VERSION, "author_id": key.did,
                      "created_at": base, "target": hash_of(target)}, key)
        for key, target in ((author, gone), (stranger, kept))
    ]  # fmt: skip
    items = [kept, gone, *redactions]
    ordered = [items[i] for i in order]
    first = asyncio.run(state("a", [b for b in (ordered[:split], ordered[split:]) if b]))
    second = asyncio.run(state("b", [[r] for r in reversed(ordered)]))
    assert first == second
    assert first[0] == ["kept"] and first[1] == [hash_of(gone)] and first[2][0] == 3
