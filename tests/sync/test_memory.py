"""sync runs against any SyncStore: a puller into the in-memory store, from a real node."""

from __future__ import annotations

from typing import Any

from identity import keys
from sync import messages as m
from sync.memory import MemoryStore
from sync.puller import Puller
from sync.server import SyncServer
from sync.store import Verified
from sync.verify import verify_record
from tests.sync.conftest import body_of, hash_of, signed_entry


async def test_puller_into_memory_store_matches_the_node_digest(make_peer: Any) -> None:
    a = await make_peer("a")
    me = keys.SigningKey.generate()
    await a.session.post(a.url + "/v1/peers", json={"url": "http://127.0.0.1:9", "node_id": me.did}, headers=a.admin)
    writer = await a.agent()
    for i in range(7):
        await a.post(writer, f"entry {i}")
    await a.post(writer, "not for export", scope="local")
    store = MemoryStore(node_id=me.did)
    puller = Puller(store, me, a.session)
    report = await puller.pull_once(a.config)
    assert [o.outcome for o in report.outcomes].count("saved") == 8
    count, sha = store.digest()
    assert (count, sha) == await a.digest()
    rec = await puller.reconcile(a.config)
    assert rec.need == 0 and rec.have == 0


async def test_server_over_memory_store() -> None:
    author = keys.SigningKey.generate()
    store = MemoryStore(node_id=author.did)
    local = signed_entry(author, "mine only", scope="local")
    shared = signed_entry(author, "shared")
    assert verify_record(body_of(local), None).reason == "local_scope"  # type: ignore[union-attr]
    store.add(Verified(hash_of(local), body_of(local), local, None), scope="local")
    store.add(Verified(hash_of(shared), body_of(shared), shared, None))
    server = SyncServer(store)
    page = await server.changes(m.ChangesQuery(v=m.PROTOCOL_VERSION, since=0))
    assert isinstance(page, m.Changes)
    assert [i.hash for i in page.items] == [hash_of(shared)] and page.next == 2 and page.head == 2
    reset = await server.changes(m.ChangesQuery(v=m.PROTOCOL_VERSION, since=5))
    assert isinstance(reset, m.Reset) and reset.reason == "cursor_ahead"
    reset = await server.changes(m.ChangesQuery(v=m.PROTOCOL_VERSION, since=0, epoch="ab"))
    assert isinstance(reset, m.Reset) and reset.reason == "epoch_changed"
    fetched = await server.fetch(m.FetchRequest(hashes=[hash_of(local), hash_of(shared)]))
    assert [i.hash for i in fetched.items] == [hash_of(shared)] and fetched.missing == [hash_of(local)]


def test_the_memory_store_keeps_versions_by_the_nodes_rule() -> None:
    """At most two versions of an address, the two with the smallest (scope != federation, version), whatever
    the order; a refused or evicted version is remembered (node/store/equivocation.py is the node's rule)."""
    import itertools

    from node.store import equivocation
    from tests.node.api_helpers import entry_record

    author = keys.SigningKey.generate()
    bodies = [entry_record(author, "one address", created_ms=1_767_323_045_000, tags=[f"t{i}"]) for i in range(3)]
    verified = [verify_record(body_of(r), hash_of(r)) for r in bodies]
    assert all(isinstance(v, Verified) for v in verified)
    kept = {v for v, _ in equivocation.kept((v.version, "federation") for v in verified)}  # type: ignore[union-attr]
    for order in itertools.permutations(verified):
        store = MemoryStore(node_id=author.did)
        words = [store.put(v) for v in order]  # type: ignore[arg-type]
        assert {e[1] for e in store.log if e is not None} == kept
        assert words.count("overflow") + sum(1 for e in store.log if e is None) == 1
        assert store.rejected == {v.version for v in verified} - kept  # type: ignore[union-attr]


def test_a_re_signed_version_is_kept_beside_the_first_and_counts_once_against_the_cap() -> None:
    """The node's rule for re-signed entries (docs/sync.md, "Versions"): versions equal but for `signing_key` and
    `signature` are one statement; the two best statements are kept with every version of them."""
    from identity import canonical, records

    first_key, new_key = keys.SigningKey.generate(), keys.SigningKey.generate()
    store = MemoryStore(node_id=first_key.did)

    def checked(record: dict[str, Any]) -> Verified:
        v = verify_record(canonical.canonical_bytes(record), records.compute_hash(record))
        assert isinstance(v, Verified), v
        return v

    def resign(record: dict[str, Any]) -> dict[str, Any]:
        body = {**records.unsigned(record), "signing_key": new_key.did}
        return {**body, "signature": new_key.sign(canonical.canonical_bytes(body))}

    a = signed_entry(first_key, "one address")
    others = [{**records.unsigned(a), "tags": [t]} for t in ("b", "c")]
    b, c = (records.sign(o, first_key) for o in others)
    assert records.compute_hash(b) == records.compute_hash(a)
    assert [store.put(checked(r)) for r in (a, resign(a), b)] == ["saved"] * 3  # two statements, three versions
    third = store.put(checked(c))
    best = sorted([(min(checked(a).version, checked(resign(a)).version), "a"), (checked(b).version, "b"),
                   (checked(c).version, "c")])[:2]  # fmt: skip
    assert third == ("saved" if "c" in {s for _, s in best} else "overflow")
    held = set(store.addresses[checked(a).hash])
    kept = {"a": {checked(a).version, checked(resign(a)).version}, "b": {checked(b).version}, "c": {checked(c).version}}
    assert held == set().union(*(kept[s] for _, s in best))


async def test_the_memory_store_finds_versions_by_prefix_as_refused_finds_them_whole() -> None:
    """Decision 74: what `refused` names by whole version, `refused_prefixes` names by the first 32 hex digits."""
    author = keys.SigningKey.generate()
    held, other = (
        verify_record(body_of(r), hash_of(r)) for r in (signed_entry(author, "a"), signed_entry(author, "b"))
    )
    assert isinstance(held, Verified) and isinstance(other, Verified)
    store = MemoryStore(node_id=author.did)
    store.put(held)
    store.rejected.add("1" * 64)
    versions = [held.version, "1" * 64, other.version]
    assert await store.refused(versions) == set(versions[:2])
    assert await store.refused_prefixes([v[:32] for v in versions]) == {v[:32] for v in versions[:2]}
    assert await store.refused_prefixes([]) == set()
