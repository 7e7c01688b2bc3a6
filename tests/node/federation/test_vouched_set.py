"""The `matches` shortcut of docs/format-v3.md 6.5: when the records of a rotated-out key that the log holds are
exactly the set its rotation vouches for, they are decided without any vouch page (node/store/void.py asks,
node/store/authority.py `learn_vouched` answers); when they are not (a thief's extra record signed by the same key),
the pages decide as before. A real node's Database (its writer thread) and NodeSyncStore.ingest, real Ed25519 keys.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from identity.vouching import vouch
from node.federation.store import NodeSyncStore
from node.store import void
from tests.node.federation.test_waiting import PEERS, NodeStore, ingest, new_database, sync_store
from tests.node.federation.v3_story import A0, A1, A, address, key_event, post, version, vouch_page


async def flagged(store: NodeSyncStore) -> dict[str, str]:
    """The flagged records' hashes with their reasons."""
    rows = await store.db.read(lambda c: void.listing(c, 0, 100))
    return {row.hash: row.reason for row in rows}


def test_a_held_set_equal_to_the_vouched_set_is_decided_without_pages(node_store: NodeStore, tmp_path: Path) -> None:
    owned = [post(A, A0, f"the owner's record {i}") for i in range(3)]
    rotation = key_event(A0, "rotate", 1, installs=A1, vouches=[vouch(A0.did, [version(r) for r in owned])])
    late_thief = post(A, A0, "signed with the stolen old key after the rotation", "2026-02-01T08:00:00Z")
    late_copy = post(A, A0, "the owner's record 1")  # the same bytes as a vouched record: the same version

    async def run() -> None:
        async with sync_store(new_database(node_store, tmp_path)) as store:
            assert set((await ingest(store, owned)).values()) == {"saved"}
            assert await ingest(store, [rotation]) == {address(rotation): "saved"}  # no page sent
            assert await flagged(store) == {}  # every held record of A0 is vouched: none flagged
            # the whole vouched set is known: a record of A0 outside it is void at once, not left waiting for pages
            assert await ingest(store, [late_thief], PEERS[1]) == {address(late_thief): "void"}
            assert await ingest(store, [late_copy], PEERS[1]) == {address(late_copy): "duplicate"}
            fresh = post(A, A1, "signed by the new key")
            assert await ingest(store, [fresh]) == {address(fresh): "saved"}
            assert await flagged(store) == {}

    asyncio.run(run())


def test_a_thiefs_extra_record_breaks_the_match_and_the_pages_void_it(node_store: NodeStore, tmp_path: Path) -> None:
    owned = [post(A, A0, f"the owner's record {i}") for i in range(3)]
    thief = post(A, A0, "the thief's record, signed by the same key before the rotation", "2026-01-01T08:00:00Z")
    vouched = [version(r) for r in owned]
    rotation = key_event(A0, "rotate", 1, installs=A1, vouches=[vouch(A0.did, vouched)])
    page = vouch_page(A0, rotation, A0, vouched)
    late_thief = post(A, A0, "signed with the stolen old key after the rotation", "2026-02-01T08:00:00Z")

    async def run() -> None:
        async with sync_store(new_database(node_store, tmp_path)) as store:
            assert set((await ingest(store, [*owned, thief])).values()) == {"saved"}
            assert await ingest(store, [rotation]) == {address(rotation): "saved"}
            assert await flagged(store) == {}  # the held set is not the vouched one: undecided until the page
            assert await ingest(store, [late_thief], PEERS[1]) == {address(late_thief): "waiting"}
            assert await ingest(store, [page]) == {address(page): "saved"}
            assert await flagged(store) == {address(thief): "unvouched"}  # the owner's three stay valid

    asyncio.run(run())
