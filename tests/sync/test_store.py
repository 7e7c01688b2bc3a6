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


def test_rounds_that_found_the_store_unavailable_are_one_line_once_and_bugs_a_stack_each(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A database restarting is an operating event: one warning line, no stack (the node's own ConnectionLost is a
    StoreUnavailable), once for a run of such rounds, and one line when a round gets through again; leader work whose
    term ended under it (NotLeader) is one line too, but each time (a run of them is work outliving its term); any
    other failure is a bug, logged with its stack each time."""
    from node.errors import NotLeader
    from node.store.conn import ConnectionLost

    log = logging.getLogger("bbs.test")
    rounds = store.RoundFailures(log, "the scan")
    with caplog.at_level(logging.DEBUG, logger="bbs.test"):
        rounds.failed(ConnectionLost("consuming input failed:\nserver closed the connection"))
        rounds.failed(ConnectionLost("the connection is closed"))
        rounds.failed(NotLeader("the stored epoch is 3, held by process b"))  # said each time: see the docstring
        for _ in range(2):
            try:
                raise ValueError("a bug")
            except ValueError as exc:
                rounds.failed(exc)
        rounds.passed()
        rounds.passed()  # nothing more to say
        rounds.failed(ConnectionLost("the connection is closed"))
        rounds.passed()  # after one: the warning said it
    first, again, ended, bug, bug_again, back, later = caplog.records
    assert first.levelno == logging.WARNING and first.exc_info is None
    assert "\n" not in first.getMessage() and "server closed the connection" in first.getMessage()
    assert again.levelno == logging.DEBUG and "the connection is closed" in again.getMessage()
    assert ended.levelno == logging.WARNING and "held by process b" in ended.getMessage() and ended.exc_info is None
    for record in (bug, bug_again):
        assert record.levelno == logging.ERROR and record.exc_info is not None and record.exc_info[0] is ValueError
    assert back.levelno == logging.WARNING and "the scan works again, after 3 rounds" in back.getMessage()
    assert later.levelno == logging.WARNING and "connection is closed" in later.getMessage()
