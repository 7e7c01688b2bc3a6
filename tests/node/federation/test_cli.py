"""node.federation.cli: `bbs peer add`, `bbs peers` and `bbs digest` on a real data folder, run in-process through
main."""

from __future__ import annotations

import asyncio
import json
import logging
from pathlib import Path
from typing import Any

import msgspec
import pytest

from identity import key_files, keys
from node.cli import main
from node.federation import store as sync_store
from node.ops.datadir import DataDir
from node.service import Node
from node.store import db
from sync.store import Invalid
from tests.sync.conftest import make_peer  # noqa: F401 (a fixture: two real nodes for `peers --watch`)
from tests.sync.test_puller import until

PEER = keys.SigningKey.generate().did


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_peer_add_then_list(data_dir: tuple[Path, str], capsys: pytest.CaptureFixture[str]) -> None:
    data = str(data_dir[0])
    code, out, err = run(capsys, "peers", "--data", data)
    assert (code, out) == (0, "") and "no peers" in err
    code, out, _ = run(capsys, "peer", "add", "http://10.0.0.2:8420", "--key", PEER, "--data", data)
    assert (
        code == 0
        and out == f"peer {PEER} at http://10.0.0.2:8420 added; a running node starts pulling within a second\n"
    )
    code, out, _ = run(capsys, "peer", "add", "http://10.0.0.3:8420", "--key", PEER, "--data", data, "--json")
    status = json.loads(out)
    assert code == 0 and (status["node_id"], status["url"], status["cursor_seq"]) == (PEER, "http://10.0.0.3:8420", 0)
    code, out, _ = run(capsys, "peers", "--data", data, "--json")
    assert code == 0 and [p["url"] for p in json.loads(out)["peers"]] == ["http://10.0.0.3:8420"]
    code, out, _ = run(capsys, "peers", "--data", data)
    lines = out.splitlines()
    assert lines[0] == f"{PEER}  http://10.0.0.3:8420"
    assert lines[1] == "  cursor -:0  remote head None  lag ?"
    assert lines[2] == "  saved 0  duplicate 0  invalid 0  pending-link 0"
    assert lines[3] == "  last ok -  reconciliations 0" and len(lines) == 4


def test_peer_add_with_a_filter_of_spaces(data_dir: tuple[Path, str], capsys: pytest.CaptureFixture[str]) -> None:
    """`--spaces S1,S2`: stored sorted, shown by `bbs peers`; adding the peer again replaces it; a bad id: nothing."""
    data = str(data_dir[0])
    one, two = "b" * 64, "a" * 64
    code, _, err = run(capsys, "peer", "add", "http://10.0.0.2:8420", "--key", PEER, "--spaces", f"{one},{two}",
                       "--data", data)  # fmt: skip
    assert code == 0, err
    code, out, _ = run(capsys, "peers", "--data", data)
    assert out.splitlines()[1] == f"  spaces {two}, {one}"
    assert json.loads(run(capsys, "peers", "--data", data, "--json")[1])["peers"][0]["spaces"] == [two, one]
    run(capsys, "peer", "add", "http://10.0.0.2:8420", "--key", PEER, "--spaces", "", "--data", data)
    assert run(capsys, "peers", "--data", data)[1].splitlines()[1] == "  spaces none (the public federation only)"
    run(capsys, "peer", "add", "http://10.0.0.2:8420", "--key", PEER, "--data", data)
    assert json.loads(run(capsys, "peers", "--data", data, "--json")[1])["peers"][0]["spaces"] is None
    code, out, err = run(capsys, "peer", "add", "http://10.0.0.2:8420", "--key", PEER, "--spaces", "family",
                         "--data", data)  # fmt: skip
    assert code == 1 and "validation_error" in err
    assert json.loads(run(capsys, "peers", "--data", data, "--json")[1])["peers"][0]["spaces"] is None


async def test_peers_shows_invalid_reasons_and_the_last_error(
    data_dir: tuple[Path, str], node: Node, capsys: pytest.CaptureFixture[str]
) -> None:
    """The CLI beside a running node: the node counts what a peer sent and notes its error; `bbs peers` shows it."""
    data = str(data_dir[0])
    assert run(capsys, "peer", "add", "http://10.0.0.2:8420", "--key", PEER, "--data", data)[0] == 0
    store = node.sync
    bad = [Invalid("a" * 64, "bad_signature", "x"), Invalid(None, "malformed", "y"), Invalid(None, "malformed", "z")]
    await store.ingest(PEER, [], bad, None)
    await store.note_peer(PEER, error="connection refused")
    code, out, _ = run(capsys, "peers", "--data", data)
    assert code == 0
    assert "  saved 0  duplicate 0  invalid 3  pending-link 0  (bad_signature 1, malformed 2)" in out
    assert out.splitlines()[-1].endswith(": connection refused") and "  last error at " in out


async def test_peers_shows_the_waiting_areas_outcomes(
    data_dir: tuple[Path, str], node: Node, capsys: pytest.CaptureFixture[str]
) -> None:
    from tests.node.federation import v3_story

    data = str(data_dir[0])
    assert run(capsys, "peer", "add", "http://10.0.0.2:8420", "--key", PEER, "--data", data)[0] == 0
    early = v3_story.post(v3_story.A, v3_story.A1, "its key event has not arrived")
    assert [o.outcome for o in await node.sync.ingest(PEER, [v3_story.verified(early)], [], None)] == ["waiting"]
    code, out, _ = run(capsys, "peers", "--data", data)
    assert code == 0
    assert "  saved 0  duplicate 0  invalid 0  pending-link 0  waiting 1" in out


@pytest.mark.parametrize(
    ("url", "key", "needle"),
    [
        # the message names the code and detail, not which argument (explain drops the error's field)
        ("ftp://host:1", PEER, "validation_error: Expected `str` matching regex '^(?:https?://"),
        ("http://user:pw@host:1", PEER, "invalid_peer_url: the peer URL cannot carry credentials"),
        ("http://host:1", "not-a-did", "validation_error: Expected `str` matching regex '^(?:did:key:"),
    ],
    ids=["scheme", "credentials", "key"],  # stable: PEER is a new key in each process (pytest-xdist workers)
)
def test_peer_add_refuses_bad_input_and_adds_nothing(
    data_dir: tuple[Path, str], capsys: pytest.CaptureFixture[str], url: str, key: str, needle: str
) -> None:
    data = str(data_dir[0])
    code, out, err = run(capsys, "peer", "add", url, "--key", key, "--data", data)
    assert code == 1 and out == "" and err.startswith("bbs: ") and needle in err
    assert json.loads(run(capsys, "peers", "--data", data, "--json")[1]) == {"peers": [], "equivocating_authors": []}


def test_commands_never_create_a_node(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    empty = tmp_path / "empty"
    for argv in (["peer", "add", "http://h:1", "--key", PEER], ["peers"], ["digest"]):
        code, _, err = run(capsys, *argv, "--data", str(empty))
        assert code == 1 and err.startswith("bbs: "), argv
    assert not (empty / "bbs.db").exists()


def test_digest_agrees_with_the_node(data_dir: tuple[Path, str], capsys: pytest.CaptureFixture[str]) -> None:
    data = data_dir[0]
    node_id = key_files.load_key(data / "node.key").did
    expected = db.read_sync(DataDir(data).store, lambda c: sync_store.digest(c, node_id))
    code, out, _ = run(capsys, "digest", "--data", str(data))
    assert (code, out) == (0, f"{expected.count} {expected.sha256}\n")
    code, out, _ = run(capsys, "digest", "--data", str(data), "--json")
    assert json.loads(out) == {"type": "digest", "v": 3, "node_id": node_id, "count": expected.count,
                               "sha256": expected.sha256}  # fmt: skip
    empty = db.read_sync(DataDir(data).store, lambda c: sync_store.digest(c, node_id, space="a" * 64))
    assert run(capsys, "digest", "--data", str(data), "--space", "a" * 64)[1] == f"0 {empty.sha256}\n"
    code, out, err = run(capsys, "digest", "--data", str(data), "--space", "family")
    assert code == 1 and out == "" and "--space takes a space id" in err


async def test_peers_watch_follows_a_first_catch_up_until_it_is_done(
    make_peer: Any,  # noqa: F811 (the fixture imported above)
    capsys: pytest.CaptureFixture[str],
) -> None:
    a, b = await make_peer("a"), await make_peer("b", scheduler=True)
    await a.add_peer(b)  # a accepts b's requests
    writer = await a.agent()
    for i in range(5):
        await a.post(writer, f"entry {i}")
    data = str(b.node.data.root)
    assert await asyncio.to_thread(main, ["peer", "add", a.url, "--key", a.node_id, "--data", data]) == 0
    capsys.readouterr()
    watching = asyncio.to_thread(main, ["peers", "--watch", "--interval", "0.1", "--data", data])
    code = await asyncio.wait_for(watching, 60)
    out, err = capsys.readouterr()
    assert code == 0 and "caught up with every peer" in err
    assert f"{a.url}: " in err  # plain progress lines (no terminal): cursor against the peer's head
    assert "lag 0 records" in out  # then the usual listing


def test_peers_watch_without_peers_says_so(data_dir: tuple[Path, str], capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "peers", "--watch", "--data", str(data_dir[0]))
    assert (code, out) == (0, "") and "no peers" in err


def peer_status(data: str, node_id: str) -> dict[str, Any]:
    """The peer's status as `bbs peers --json` shows it (read beside the running node)."""
    listing = db.read_sync(DataDir(Path(data)).store, lambda c: sync_store.peer_list(c, 0))
    status: dict[str, Any] = json.loads(msgspec.json.encode(next(p for p in listing.peers if p.node_id == node_id)))
    return status


async def test_a_peer_that_has_not_added_this_node_is_waited_for_not_failed(
    make_peer: Any,  # noqa: F811 (the fixture imported above)
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Added on one side only: the other answers 403 unknown_peer. `bbs peers` says it waits, counts no failure,
    and the log says so once however many polls; once the other side adds this node, sync starts and says so."""
    caplog.set_level(logging.DEBUG)
    a, b = await make_peer("a"), await make_peer("b", scheduler=True)
    await a.post(await a.agent(), "waiting for b to be added")
    data = str(b.node.data.root)
    assert await asyncio.to_thread(main, ["peer", "add", a.url, "--key", a.node_id, "--data", data]) == 0
    capsys.readouterr()

    def polls() -> int:
        scheduler = b.sync.scheduler
        return scheduler.puller.traffic.requests if scheduler is not None else 0

    await until(lambda: polls() >= 3, 30)  # three requests, three 403 unknown_peer answers
    status = await asyncio.to_thread(peer_status, data, a.node_id)
    assert status["health"]["waiting_for_peer"] is True
    assert (status["health"]["failures"], status["health"]["consecutive_failures"]) == (0, 0)
    assert status["last_error"].startswith("waiting for the peer to add this node: ")
    code, out, _ = await asyncio.to_thread(run, capsys, "peers", "--data", data)
    assert code == 0
    assert f"  waiting for the peer to add this node (on it: bbs peer add <this node's URL> --key {b.node_id})" in out
    assert "failures" not in out and "last error" not in out
    async with b.session.get(b.url + "/metrics", headers=b.admin) as resp:
        assert f'bbs_sync_waiting_for_peer{{peer="{a.node_id}"}} 1.0' in await resp.text()
    said = [r.getMessage() for r in caplog.records if r.levelno >= logging.INFO and "unknown_peer" in r.getMessage()]
    assert len(said) == 1 and "has not added this node yet" in said[0] and b.node_id in said[0]

    await a.add_peer(b)  # the other side adds this node: the next poll (within about 2 s) gets through
    # as stored, not as in memory: the puller clears its flag a moment before the note that stores it commits
    await until(lambda: not peer_status(data, a.node_id)["health"]["waiting_for_peer"], 30)
    await until(lambda: peer_status(data, a.node_id)["lag_records"] == 0, 30)
    status = await asyncio.to_thread(peer_status, data, a.node_id)
    assert status["health"]["waiting_for_peer"] is False and status["last_error"] is None
    assert status["health"]["failures"] == 0 and status["counters"]["saved"] >= 2
    code, out, _ = await asyncio.to_thread(run, capsys, "peers", "--data", data)
    assert code == 0 and "waiting" not in out and "lag 0 records" in out
    messages = [r.getMessage() for r in caplog.records if r.levelno >= logging.INFO]
    assert sum("has added this node" in m for m in messages) == 1
    assert sum("unknown_peer" in m for m in messages) == 1  # said once for all the polls
    assert not [m for r in caplog.records if r.levelno >= logging.WARNING for m in [r.getMessage()]]


def test_digest_of_the_v2_compatible_records(data_dir: tuple[Path, str], capsys: pytest.CaptureFixture[str]) -> None:
    """`--sync-version 2`: the digest a node of protocol v2 holding the same records prints (here every record is
    v2-compatible, so it equals the full one); another version is refused by argparse."""
    data = data_dir[0]
    node_id = key_files.load_key(data / "node.key").did
    expected = db.read_sync(DataDir(data).store, lambda c: sync_store.digest(c, node_id, 2))
    code, out, _ = run(capsys, "digest", "--data", str(data), "--sync-version", "2", "--json")
    assert code == 0 and json.loads(out) == {"type": "digest", "v": 2, "node_id": node_id, "count": expected.count,
                                             "sha256": expected.sha256}  # fmt: skip
    full = db.read_sync(DataDir(data).store, lambda c: sync_store.digest(c, node_id))
    assert (expected.count, expected.sha256) == (full.count, full.sha256)
    with pytest.raises(SystemExit):
        run(capsys, "digest", "--data", str(data), "--sync-version", "1")
