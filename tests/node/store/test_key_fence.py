"""node.store.key_fence: the file of keys rotated out on a node, read back, put back, settled, and unreadable."""

from __future__ import annotations

import errno
import fcntl
import json
import os
import stat
from pathlib import Path

import pytest

from node.errors import Unavailable
from node.store import key_fence
from node.store.key_fence import KEY_FENCE_NAME, SETTLE_AFTER_MS, FenceNotDurable, KeyFence


def temporary_file(path: Path) -> Path:
    """The temporary file writes of the fence at `path` go through before their rename."""
    return path.with_name(path.name + ".tmp")


def test_a_recorded_rotation_refuses_its_old_key_only(tmp_path: Path) -> None:
    fence = KeyFence(tmp_path / KEY_FENCE_NAME)
    assert fence.refusal("did:key:zA", "did:key:zA") is None
    written = fence.record("did:key:zA", "did:key:zA", "did:key:zB", "e" * 64, "epoch-1", 0)
    assert written["event"] == "e" * 64
    assert stat.S_IMODE((tmp_path / KEY_FENCE_NAME).stat().st_mode) == 0o600
    again = KeyFence(tmp_path / KEY_FENCE_NAME)  # read back from the file
    refused = again.refusal("did:key:zA", "did:key:zA")
    assert refused is not None and "e" * 64 in refused and "did:key:zB" in refused and "bbs doctor" in refused
    assert again.refusal("did:key:zA", "did:key:zB") is None  # the key it installed signs
    assert again.refusal("did:key:zOther", "did:key:zA") is None
    assert again.identities() == {"did:key:zA"}
    again.put_back(written)  # the rotation's commit failed
    assert KeyFence(tmp_path / KEY_FENCE_NAME).rotations() == []


def test_put_back_takes_out_only_the_entry_it_is_given(tmp_path: Path) -> None:
    """A rotation whose commit failed is taken out; what the writer learned meanwhile stays."""
    fence = KeyFence(tmp_path / KEY_FENCE_NAME)
    failing = fence.record("did:key:zA", "did:key:zA", "did:key:zB", "failed", "epoch-1", 0)
    fence.learn([("did:key:zC", "did:key:zC", "did:key:zD", "made-there")], "epoch-1", 1)
    fence.put_back(failing)
    assert [r["event"] for r in KeyFence(tmp_path / KEY_FENCE_NAME).rotations()] == ["made-there"]


def test_settle_forgets_only_this_epochs_rotations_that_never_committed(tmp_path: Path) -> None:
    fence = KeyFence(tmp_path / KEY_FENCE_NAME)
    fence.record("did:key:zA", "did:key:zA", "did:key:zB", "held", "now", 1_000)
    fence.record("did:key:zA", "did:key:zB", "did:key:zC", "lost", "now", 1_000)
    fence.record("did:key:zD", "did:key:zD", "did:key:zE", "lost", "before-the-restore", 1_000)
    fence.record("did:key:zF", "did:key:zF", "did:key:zG", "committing", "now", 50_000)

    def held(identity: str, event: str) -> bool:
        return event == "held"

    # a minute on: the rotation committing in another process right now is kept
    stale = fence.settle("now", held, 1_000 + SETTLE_AFTER_MS + 1)
    assert [r["key"] for r in stale] == ["did:key:zC"]
    kept = [r["key"] for r in KeyFence(tmp_path / KEY_FENCE_NAME).rotations()]
    assert kept == ["did:key:zB", "did:key:zE", "did:key:zG"]
    assert [r["committed"] for r in KeyFence(tmp_path / KEY_FENCE_NAME).rotations()] == ["1", "0", "0"]  # held


def test_a_rotation_marked_committed_stays_when_a_database_put_back_from_before_it_kept_the_epoch(
    tmp_path: Path,
) -> None:
    """The gap record 60 left: a database file copied back (or a dump restored) by hand keeps the store epoch and
    lacks the rotation's event, as a rotation that never committed does. The mark tells them apart."""
    fence = KeyFence(tmp_path / KEY_FENCE_NAME)
    done = fence.record("did:key:zA", "did:key:zA", "did:key:zB", "done", "same", 1_000)
    fence.committed(done)  # the rotation's write job committed
    fence.record("did:key:zC", "did:key:zC", "did:key:zD", "crashed", "same", 1_000)  # never committed

    stale = fence.settle("same", lambda identity, event: False, 1_000 + SETTLE_AFTER_MS + 1)
    assert [r["event"] for r in stale] == ["crashed"]
    again = KeyFence(tmp_path / KEY_FENCE_NAME)
    assert [(r["event"], r["committed"]) for r in again.rotations()] == [("done", "1")]
    assert again.refusal("did:key:zA", "did:key:zA") is not None


def test_a_fence_file_from_before_the_mark_reads_as_not_known_committed(tmp_path: Path) -> None:
    entry = {"identity": "a", "retired": "a", "key": "b", "event": "e", "epoch": "x", "at_ms": "0"}
    (tmp_path / KEY_FENCE_NAME).write_text(json.dumps({"rotations": [entry]}))
    assert KeyFence(tmp_path / KEY_FENCE_NAME).rotations() == [entry | {"committed": "0"}]


@pytest.mark.parametrize("content", ["not json", '{"rotations": {}}', '{"rotations": [{"identity": "x"}]}'])
def test_an_unreadable_fence_refuses_nothing_and_says_so(
    tmp_path: Path, content: str, caplog: pytest.LogCaptureFixture
) -> None:
    (tmp_path / KEY_FENCE_NAME).write_text(content)
    fence = KeyFence(tmp_path / KEY_FENCE_NAME)
    assert fence.rotations() == [] and fence.refusal("x", "x") is None
    assert "unreadable" in caplog.text
    assert KeyFence(None).rotations() == []


def test_learn_adds_only_the_rotations_not_listed_and_writes_once(tmp_path: Path) -> None:
    fence = KeyFence(tmp_path / KEY_FENCE_NAME)
    fence.record("did:key:zA", "did:key:zA", "did:key:zB", "made-here", "epoch-1", 1_000)
    found = [
        ("did:key:zA", "did:key:zA", "did:key:zB", "made-here"),  # listed already (by the process that made it)
        ("did:key:zC", "did:key:zC", "did:key:zD", "made-there"),
        ("did:key:zC", "did:key:zC", "did:key:zD", "made-there"),  # twice in one call: once in the file
    ]
    added = fence.learn(found, "epoch-1", 2_000)
    assert added == [
        {
            "identity": "did:key:zC",
            "retired": "did:key:zC",
            "key": "did:key:zD",
            "event": "made-there",
            "epoch": "epoch-1",
            "at_ms": "2000",
            "committed": "1",  # read from a committed key event
        }
    ]
    again = KeyFence(tmp_path / KEY_FENCE_NAME)  # read back from the file
    assert [r["event"] for r in again.rotations()] == ["made-here", "made-there"]
    assert again.refusal("did:key:zC", "did:key:zC") is not None
    written = (tmp_path / KEY_FENCE_NAME).stat().st_mtime_ns
    assert again.learn(found, "epoch-1", 3_000) == []  # nothing new: the file is not written
    assert (tmp_path / KEY_FENCE_NAME).stat().st_mtime_ns == written
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == [KEY_FENCE_NAME, f"{KEY_FENCE_NAME}.lock"]  # no temporary file left


def test_a_fence_that_cannot_be_written_changes_neither_the_file_nor_memory(tmp_path: Path) -> None:
    """A write that fails (here the rename into place) leaves the fence as it was, so the next `learn` or `record`
    writes the entry again rather than taking it for listed; no temporary file is left."""
    path = tmp_path / KEY_FENCE_NAME
    fence = KeyFence(path)
    fence.record("did:key:zA", "did:key:zA", "did:key:zB", "first", "epoch-1", 0)
    before = fence.rotations()
    in_the_way = temporary_file(path)
    in_the_way.mkdir()  # the temporary file cannot be made
    found = [("did:key:zC", "did:key:zC", "did:key:zD", "made-there")]
    with pytest.raises(Unavailable) as refused:
        fence.learn(found, "epoch-1", 1)
    assert refused.value.code == "key_fence_unwritable" and KEY_FENCE_NAME in str(refused.value)
    with pytest.raises(Unavailable):
        fence.record("did:key:zE", "did:key:zE", "did:key:zF", "second", "epoch-1", 2)
    assert fence.rotations() == before and fence.refusal("did:key:zE", "did:key:zE") is None
    in_the_way.rmdir()
    assert sorted(p.name for p in tmp_path.iterdir()) == [KEY_FENCE_NAME, f"{KEY_FENCE_NAME}.lock"]
    assert [r["event"] for r in fence.learn(found, "epoch-1", 3)] == ["made-there"]
    assert [r["event"] for r in KeyFence(path).rotations()] == ["first", "made-there"]


def test_learn_marks_an_unmarked_entry_of_the_same_event_and_adds_another_event_for_the_same_key(
    tmp_path: Path,
) -> None:
    """An unmarked entry may be a rotation that never committed: another event taking out the same key is listed on
    its own, so forgetting the first (`settle`) leaves the key fenced."""
    fence = KeyFence(tmp_path / KEY_FENCE_NAME)
    fence.record("did:key:zA", "did:key:zA", "did:key:zB", "committing", "e", 0)  # its commit not known yet
    fence.record("did:key:zC", "did:key:zC", "did:key:zD", "cut-off", "e", 0)  # never committed
    found = [
        ("did:key:zA", "did:key:zA", "did:key:zB", "committing"),  # the database holds it: it did commit
        ("did:key:zC", "did:key:zC", "did:key:zE", "made-there"),  # the same key, taken out by another rotation
    ]
    added = fence.learn(found, "e", 1)
    assert [r["event"] for r in added] == ["made-there"]
    marks = {r["event"]: r["committed"] for r in KeyFence(tmp_path / KEY_FENCE_NAME).rotations()}
    assert marks == {"committing": "1", "cut-off": "0", "made-there": "1"}
    fence.settle("e", lambda identity, event: event != "cut-off", SETTLE_AFTER_MS + 1)
    assert fence.refusal("did:key:zC", "did:key:zC") is not None  # still fenced by the rotation that committed


def test_settle_that_cannot_write_leaves_the_fence_as_it_was(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A start goes on when the fence file cannot be written: nothing is forgotten (what is listed goes on refusing)
    and nothing is marked; a later settle does both."""
    path = tmp_path / KEY_FENCE_NAME
    fence = KeyFence(path)
    fence.record("did:key:zA", "did:key:zA", "did:key:zB", "held", "e", 0)
    fence.record("did:key:zC", "did:key:zC", "did:key:zD", "lost", "e", 0)
    before = fence.rotations()
    in_the_way = temporary_file(path)
    in_the_way.mkdir()
    assert fence.settle("e", lambda identity, event: event == "held", SETTLE_AFTER_MS + 1) == []
    assert fence.rotations() == before and "cannot settle" in caplog.text
    in_the_way.rmdir()
    assert [r["event"] for r in fence.settle("e", lambda i, e: e == "held", SETTLE_AFTER_MS + 1)] == ["lost"]
    assert [(r["event"], r["committed"]) for r in KeyFence(path).rotations()] == [("held", "1")]


def test_two_writers_of_one_folders_fence_keep_what_each_wrote(tmp_path: Path) -> None:
    """A `bbs` command opening a folder a node serves holds its own copy of the fence: each change is made to the
    file as it is now, under a lock, so neither writer replaces what the other wrote with an older copy."""
    path = tmp_path / KEY_FENCE_NAME
    serving, command = KeyFence(path), KeyFence(path)
    assert serving.rotations() == command.rotations() == []  # both read the (missing) file
    made = serving.record("did:key:zA", "did:key:zA", "did:key:zB", "made-by-the-node", "e", 0)
    command.record("did:key:zC", "did:key:zC", "did:key:zD", "made-by-the-command", "e", 0)
    serving.committed(made)
    events = {r["event"]: r["committed"] for r in KeyFence(path).rotations()}
    assert events == {"made-by-the-node": "1", "made-by-the-command": "0"}
    assert {r["event"] for r in serving.rotations()} == set(events)  # each change reads the file first


def test_a_change_refuses_an_unreadable_file_rather_than_write_over_it(tmp_path: Path) -> None:
    """Loading an unreadable fence reads it as empty (loudly); writing on top of it would replace every rotation it
    lists, so a change refuses it (503 `key_fence_unwritable`) and leaves it as it is."""
    path = tmp_path / KEY_FENCE_NAME
    path.write_text('{"rotations": [{"identity": "x", "truncated')
    fence = KeyFence(path)
    assert fence.rotations() == []
    with pytest.raises(Unavailable) as refused:
        fence.record("did:key:zA", "did:key:zA", "did:key:zB", "e", "epoch", 0)
    assert refused.value.code == "key_fence_unwritable" and "cannot be read" in str(refused.value)
    assert path.read_text() == '{"rotations": [{"identity": "x", "truncated'
    assert fence.rotations() == []


def test_settle_asks_the_database_before_it_takes_the_lock_and_leaves_what_was_written_since(tmp_path: Path) -> None:
    """On PostgreSQL a read may wait for a lock that a process waiting for the fence's flock holds (a restore
    emptying the database), so settle asks the database first, with the flock free; an entry another process
    writes in between was not asked about and waits for the next settle, even when old enough to be forgotten."""
    path = tmp_path / KEY_FENCE_NAME
    fence, other = KeyFence(path), KeyFence(path)
    fence.record("did:key:zA", "did:key:zA", "did:key:zB", "held", "e", 0)
    fence.record("did:key:zC", "did:key:zC", "did:key:zD", "lost", "e", 0)
    asked: list[str] = []

    def held(identity: str, event: str) -> bool:
        lock_fd = os.open(path.with_name(path.name + ".lock"), os.O_RDWR)
        try:
            fcntl.flock(lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # raises BlockingIOError while settle holds it
        finally:
            os.close(lock_fd)
        if not asked:
            other.record("did:key:zE", "did:key:zE", "did:key:zF", "written-meanwhile", "e", 0)
        asked.append(event)
        return event == "held"

    stale = fence.settle("e", held, SETTLE_AFTER_MS + 1)
    assert sorted(asked) == ["held", "lost"] and [r["event"] for r in stale] == ["lost"]
    marks = {r["event"]: r["committed"] for r in KeyFence(path).rotations()}
    assert marks == {"held": "1", "written-meanwhile": "0"}
    assert [r["event"] for r in fence.settle("e", held, SETTLE_AFTER_MS + 1)] == ["written-meanwhile"]


def test_a_folder_that_cannot_be_synced_after_the_rename_says_the_file_was_replaced(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The rename is done when the folder's fsync fails: the answer says the change may not survive a crash (not
    that nothing was written), and what this process holds in memory is what the file holds."""
    path = tmp_path / KEY_FENCE_NAME
    fence = KeyFence(path)

    def fails(folder: Path) -> None:
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(key_fence, "fsync_path", fails)  # the OS's edge: a device error on the folder's fsync
    with pytest.raises(Unavailable) as refused:
        fence.record("did:key:zA", "did:key:zA", "did:key:zB", "e", "epoch", 0)
    assert isinstance(refused.value, FenceNotDurable) and refused.value.code == "key_fence_unwritable"
    assert "may not survive a crash" in str(refused.value) and "nothing was written" not in str(refused.value)
    assert fence.rotations() == KeyFence(path).rotations() and len(fence.rotations()) == 1
    # a settle whose write is not made durable still says what it forgot (the node key's block is decided again)
    stale = fence.settle("epoch", lambda identity, event: False, SETTLE_AFTER_MS + 1)
    assert [r["event"] for r in stale] == ["e"]
    assert fence.rotations() == KeyFence(path).rotations() == [] and not fence.unsettled()


def test_a_rotation_committed_after_settle_forgot_its_entry_is_listed_again_marked(tmp_path: Path) -> None:
    """A rotation's write job that waited past SETTLE_AFTER_MS before its commit: a settle meanwhile forgot its entry
    (its event was not held yet). Once the commit is known, `committed` writes the entry again, marked."""
    path = tmp_path / KEY_FENCE_NAME
    fence = KeyFence(path)
    entry = fence.record("did:key:zA", "did:key:zA", "did:key:zB", "late", "e", 0)
    assert [r["event"] for r in fence.settle("e", lambda identity, event: False, SETTLE_AFTER_MS + 1)] == ["late"]
    fence.committed(entry)
    assert [(r["event"], r["committed"]) for r in KeyFence(path).rotations()] == [("late", "1")]
    assert KeyFence(path).refusal("did:key:zA", "did:key:zA") is not None
