"""sync.store: the storage interface sync needs, and the two stores that implement it."""

from __future__ import annotations

import dataclasses
import inspect
import logging

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


def test_a_round_that_found_the_store_unavailable_is_logged_in_one_line(caplog: pytest.LogCaptureFixture) -> None:
    """A database restarting is an operating event: a warning of one line, no stack (the node's own ConnectionLost
    is a StoreUnavailable), and so is leader work whose term ended under it (NotLeader); any other failure is a bug,
    logged with its stack."""
    from node.errors import NotLeader
    from node.store.conn import ConnectionLost

    log = logging.getLogger("bbs.test")
    with caplog.at_level(logging.WARNING, logger="bbs.test"):
        store.log_round_failure(
            log, "the scan", ConnectionLost("consuming input failed:\nserver closed the connection")
        )
        try:
            raise ValueError("a bug")
        except ValueError as exc:
            store.log_round_failure(log, "the scan", exc)
        store.log_round_failure(log, "the sweep", NotLeader("the stored epoch is 3, held by process b"))
    unavailable, bug, ended = caplog.records
    assert unavailable.levelno == logging.WARNING and unavailable.exc_info is None
    assert "\n" not in unavailable.getMessage() and "server closed the connection" in unavailable.getMessage()
    assert ended.levelno == logging.WARNING and ended.exc_info is None and "held by process b" in ended.getMessage()
    assert bug.levelno == logging.ERROR and bug.exc_info is not None and bug.exc_info[0] is ValueError
