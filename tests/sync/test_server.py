"""sync.server: the serving side of the protocol (feed, fetch, reconciliation) over the in-memory store."""

from __future__ import annotations

import asyncio

import pytest

from identity import keys
from sync import messages as m
from sync import server as server_module
from sync.memory import MemoryStore
from sync.negentropy import Negentropy, VectorStorage
from sync.server import BadSyncMessage, SyncServer
from sync.store import Verified
from tests.sync.conftest import body_of, hash_of, signed_entry

AUTHOR = keys.SigningKey.generate()
PEER = keys.SigningKey.generate().did


def add(store: MemoryStore, content: str, *, scope: str = "federation", origin: str = "local") -> str:
    record = signed_entry(AUTHOR, content, scope=scope)
    store.add(Verified(hash_of(record), body_of(record), record, None), scope=scope, origin=origin)
    return hash_of(record)


@pytest.fixture
def store() -> MemoryStore:
    return MemoryStore(node_id=keys.SigningKey.generate().did)


async def test_the_feed_in_pages(store: MemoryStore) -> None:
    hashes = [add(store, f"entry {i}") for i in range(5)]
    server = SyncServer(store)
    first = await server.changes(m.ChangesQuery(v=m.PROTOCOL_VERSION, since=0, limit=2))
    assert isinstance(first, m.Changes)
    assert ([i.hash for i in first.items], first.next, first.more, first.head) == (hashes[:2], 2, True, 5)
    assert first.node_id == store.node_id and first.epoch == store.epoch
    assert store.log[0] is not None and first.items[0].body() == store.log[0][2]  # the stored bytes, as they are
    rest = await server.changes(m.ChangesQuery(v=m.PROTOCOL_VERSION, since=first.next, epoch=store.epoch, limit=10))
    assert isinstance(rest, m.Changes) and [i.hash for i in rest.items] == hashes[2:] and not rest.more


async def test_records_from_the_asking_peer_are_not_echoed(store: MemoryStore) -> None:
    mine = add(store, "mine")
    add(store, "from the peer", origin=PEER)
    page = await SyncServer(store).changes(m.ChangesQuery(v=m.PROTOCOL_VERSION, since=0), PEER)
    assert isinstance(page, m.Changes) and [i.hash for i in page.items] == [mine] and page.next == 2


async def test_a_page_is_cut_at_its_byte_budget(store: MemoryStore, monkeypatch: pytest.MonkeyPatch) -> None:
    hashes = [add(store, f"entry {i}") for i in range(4)]
    assert store.log[0] is not None
    monkeypatch.setattr(server_module, "MAX_PAGE_BYTES", len(store.log[0][2]) * 2 + 1)
    page = await SyncServer(store).changes(m.ChangesQuery(v=m.PROTOCOL_VERSION, since=0))
    assert isinstance(page, m.Changes)
    assert ([i.hash for i in page.items], page.next, page.more) == (hashes[:2], 2, True)
    monkeypatch.setattr(server_module, "MAX_PAGE_BYTES", 1)
    page = await SyncServer(store).changes(m.ChangesQuery(v=m.PROTOCOL_VERSION, since=0))
    assert isinstance(page, m.Changes) and len(page.items) == 1  # one record always goes, whatever its size


async def test_resets(store: MemoryStore) -> None:
    add(store, "one")
    server = SyncServer(store)
    ahead = await server.changes(m.ChangesQuery(v=m.PROTOCOL_VERSION, since=2))
    assert isinstance(ahead, m.Reset) and (ahead.reason, ahead.head) == ("cursor_ahead", 1)
    other = await server.changes(m.ChangesQuery(v=m.PROTOCOL_VERSION, since=0, epoch="abc"))
    assert isinstance(other, m.Reset) and (other.reason, other.epoch) == ("epoch_changed", store.epoch)


async def test_a_long_poll_returns_on_a_change_or_on_closing(store: MemoryStore) -> None:
    server = SyncServer(store)
    waiting = asyncio.create_task(server.changes(m.ChangesQuery(v=m.PROTOCOL_VERSION, since=0, wait_ms=10_000)))
    await asyncio.sleep(0.05)
    assert not waiting.done()
    added = add(store, "arrives while the peer waits")
    page = await asyncio.wait_for(waiting, 5)
    assert isinstance(page, m.Changes) and [i.hash for i in page.items] == [added]
    waiting = asyncio.create_task(server.changes(m.ChangesQuery(v=m.PROTOCOL_VERSION, since=1, wait_ms=10_000)))
    await asyncio.sleep(0.05)
    server.closing.set()  # the node shuts down: long polls answer at once
    page = await asyncio.wait_for(waiting, 5)
    assert isinstance(page, m.Changes) and page.items == []
    empty = await SyncServer(store).changes(m.ChangesQuery(v=m.PROTOCOL_VERSION, since=1, wait_ms=50))
    assert isinstance(empty, m.Changes) and empty.items == []  # the wait simply runs out


async def test_fetch_by_hash(store: MemoryStore) -> None:
    shared = add(store, "shared")
    local = add(store, "kept", scope="local")
    reply = await SyncServer(store).fetch(m.FetchRequest(hashes=[local, shared, shared, "f" * 64]))
    assert [i.hash for i in reply.items] == [shared] and reply.missing == [local, "f" * 64]
    assert reply.node_id == store.node_id


async def test_reconcile_answers_as_the_responder(store: MemoryStore) -> None:
    add(store, "one")
    add(store, "two")
    server = SyncServer(store)
    mine = Negentropy(VectorStorage([]))
    reply = await server.reconcile(m.ReconcileRequest(message=mine.initiate().hex()))
    assert reply.epoch == store.epoch and reply.head == 2
    have: list[bytes] = []
    need: list[bytes] = []
    message = reply.message
    while message is not None:
        out = mine.reconcile(bytes.fromhex(message), have, need)
        if out is None:
            break
        message = (await server.reconcile(m.ReconcileRequest(message=out.hex()))).message
    assert sorted(h.hex() for h in need) == sorted(e[1] for e in store.log if e is not None) and have == []
    with pytest.raises(BadSyncMessage):
        await server.reconcile(m.ReconcileRequest(message="ff"))
