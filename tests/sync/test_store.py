"""sync.store: the storage interface sync needs, and the two stores that implement it."""

from __future__ import annotations

import dataclasses
import inspect

import pytest

from node.federation.store import NodeSyncStore
from sync import store
from sync.memory import MemoryStore

PROTOCOL_METHODS = [
    name for name, member in inspect.getmembers(store.SyncStore, inspect.isfunction) if not name.startswith("_")
]


def test_the_protocol_lists_what_sync_calls() -> None:
    assert sorted(
        ["position", "changes", "wait_for_change", "fetch", "reconcile_items", "refused", "refused_prefixes",
         "ingest", "peers", "cursor", "cursor_version", "upgrade_cursor", "note_peer", "wanted", "want_failed",
         "reconcile_wanted", "served_spaces", "set_items", "hosting_items", "reconcile_spaces"]
    ) == PROTOCOL_METHODS  # fmt: skip


@pytest.mark.parametrize("implementation", [MemoryStore, NodeSyncStore])
@pytest.mark.parametrize("name", PROTOCOL_METHODS)
def test_both_stores_implement_every_method_with_its_signature(implementation: type, name: str) -> None:
    wanted = inspect.signature(getattr(store.SyncStore, name))
    method = getattr(implementation, name)
    assert inspect.iscoroutinefunction(method), f"{implementation.__name__}.{name} must be async"
    got = inspect.signature(method)
    assert list(got.parameters) == list(wanted.parameters), f"{implementation.__name__}.{name}"
    for param in wanted.parameters.values():
        assert got.parameters[param.name].kind == param.kind
        assert got.parameters[param.name].default == param.default


def test_the_value_types() -> None:
    verified = store.Verified("h", b"{}", {}, None)
    assert verified.hash == "h" and verified._fields == ("hash", "body", "record", "decoded")
    assert store.Invalid(None, "malformed", "why").hash is None
    assert store.Outcome("h", "saved").reason is None
    assert store.Cursor("e", 3) == ("e", 3) and store.Cursor("e", 3) < store.Cursor("e", 4)
    page = store.Page("epoch", head=0, next=0, more=False)
    assert page.items == [] and store.Page("e", 0, 0, False).items is not page.items  # a fresh list each
    peer = store.PeerConfig("did:key:z", "http://h:1")
    with pytest.raises(dataclasses.FrozenInstanceError):
        peer.url = "http://other:1"  # type: ignore[misc]
    assert {peer, store.PeerConfig("did:key:z", "http://h:1")} == {peer}  # hashable: the scheduler keys on it
