"""`bbs processes` and `bbs restore --by-hand` (node/ops/processes.py): the operator's view of a node's processes on
PostgreSQL and the mark of a restore made by hand, as commands instead of SQL (a real promotion and restore with two
processes: tests/node/multiproc/test_lease_fence.py)."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

import pytest

from node.cli import main
from node.ops import store as ops_store
from node.ops.datadir import initialise
from node.ops.processes import SILENT_AFTER_MS, registered
from node.service import Node
from node.store.db import connect_store, read_sync, transaction
from node.workflows.fence import FENCE_NAME, IDENTITY_KEY, FenceFile, write_fence
from node.workflows.store import fence as fence_store
from tests.conftest import FakeClock


def _register(url: str, *rows: tuple[str, bool, bool, int]) -> None:
    """Processes registered as serving ones register themselves: (id, vouched, checked the current history, ms)."""
    with contextlib.closing(connect_store(url)) as conn, transaction(conn, immediate=True):
        identity = fence_store.history_identity(conn)
        for process, vouched, checked, at in rows:
            fence_store.register_txn(conn, process, vouched, identity if checked else "S:1:an-earlier-one", at)


def test_processes_lists_them_and_forgets_a_retired_one(
    pg_folder: tuple[Path, str],
    capsys: pytest.CaptureFixture[str],
) -> None:
    folder, url = pg_folder
    assert main(["processes", "--data", str(folder)]) == 0
    assert "no process registered yet" in capsys.readouterr().out
    _register(url, ("p-in", True, True, 1_000), ("p-old", True, False, 500), ("p-new", False, False, 2_000))
    assert main(["processes", "--data", str(folder), "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert [(p["process"], p["vouched"], p["checked"], p["this_folder"]) for p in listed["processes"]] == [
        ("p-in", True, True, False),
        ("p-new", False, False, False),
        ("p-old", True, False, False),
    ]
    assert listed["holds"] == []
    assert [p["checked_in_ms"] for p in listed["processes"]] == [1_000, 2_000, 500]
    assert all(p["silent"] for p in listed["processes"])  # by this machine's clock, not heard from since 1970
    assert main(["processes", "--data", str(folder)]) == 0
    text = capsys.readouterr().out.splitlines()
    assert [line.split()[:2] for line in text] == [["p-in", "checked"], ["p-new", "waiting"], ["p-old", "not"]]
    assert all("last check-in 1970-01-01T00:00:0" in line and "silent: stopped or retired" in line for line in text)
    # silent once not heard from in SILENT_AFTER_MS: a serving process records a check-in at least once a minute
    heard = registered(folder, now_ms=1_000 + SILENT_AFTER_MS)
    assert [(p.process, p.silent) for p in heard.processes] == [("p-in", False), ("p-new", False), ("p-old", True)]

    write_fence(folder / FENCE_NAME, FenceFile("did:key:z", "f", "e", 0, process="p-in"))  # this folder's process
    assert main(["processes", "--data", str(folder), "--json"]) == 0
    assert [p["this_folder"] for p in json.loads(capsys.readouterr().out)["processes"]] == [True, False, False]
    assert main(["processes", "--data", str(folder), "--forget", "p-in"]) == 1  # in use: it would register again
    assert "is the process of" in capsys.readouterr().err
    assert main(["processes", "--data", str(folder), "--forget", "p-old"]) == 0
    assert "forgot process p-old" in capsys.readouterr().out
    assert [row[0] for row in read_sync(url, fence_store.processes)] == ["p-in", "p-new"]
    assert main(["processes", "--data", str(folder), "--forget", "p-old"]) == 1  # once: then it is unknown
    assert capsys.readouterr().err == "bbs: the node has no process p-old (bbs processes lists them)\n"
    assert [row[0] for row in read_sync(url, fence_store.processes)] == ["p-in", "p-new"]


def test_a_restore_by_hand_is_marked_and_the_next_start_renews_the_epoch(
    pg_folder: tuple[Path, str],
    capsys: pytest.CaptureFixture[str],
    clock: FakeClock,
) -> None:
    folder, url = pg_folder
    epoch = read_sync(url, lambda conn: ops_store.meta_value(conn, "epoch"))
    _register(url, ("p-in", True, True, 1_000))
    with contextlib.closing(connect_store(url)) as conn, transaction(conn, immediate=True):
        ops_store.set_meta_txn(conn, IDENTITY_KEY, fence_store.history_identity(conn))  # as a check records it
    assert main(["restore", "--by-hand", "--force", "--store", url, "--data", str(folder)]) == 1
    assert capsys.readouterr().err == (
        "bbs: --by-hand marks the database the data folder names; --store, --force does not apply\n"
    )
    assert read_sync(url, lambda c: ops_store.meta_value(c, IDENTITY_KEY)) != "restored"  # refused: nothing marked

    assert main(["restore", "--by-hand", "--data", str(folder)]) == 0
    assert json.loads(capsys.readouterr().out) == {"data": str(folder), "marked": "restored"}
    marks = read_sync(url, lambda c: [ops_store.meta_value(c, k) for k in (ops_store.HISTORY_KEY, IDENTITY_KEY)])
    assert marks == ["restored", "restored"]  # set even where no look recorded one yet (the store epoch's history)
    assert main(["processes", "--data", str(folder)]) == 0
    shown = capsys.readouterr().out.splitlines()
    assert shown[0].startswith("the database's history changed") and shown[1].split()[:3] == ["p-in", "not", "checked"]

    node = Node(folder, clock=clock)
    node.open(search_index=False)  # a process's start: the epoch is renewed before anything reads it
    node.close()
    assert read_sync(url, lambda conn: ops_store.meta_value(conn, "epoch")) != epoch
    assert read_sync(url, lambda conn: ops_store.meta_value(conn, "previous_epoch")) == epoch


@pytest.mark.sqlite_only(reason="the refusal of a node on SQLite; the commands themselves are PostgreSQL's (above)")
def test_a_node_on_sqlite_has_neither(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    initialise(tmp_path / "node")
    for command in (["processes"], ["processes", "--forget", "p"], ["restore", "--by-hand"]):
        assert main([*command, "--data", str(tmp_path / "node")]) == 1, command
        err = capsys.readouterr().err
        assert err.startswith(f"bbs: {tmp_path / 'node'} keeps its node on SQLite: one process serves it"), err
