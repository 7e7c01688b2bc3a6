"""A damaged or missing search index repairs itself: `bbs rebuild` from nothing, a node that starts with a damaged
index, and a serving node whose index folder is removed (real `bbs serve` processes, real tantivy folders)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from node.ops.datadir import initialise
from node.search_index.index import DAMAGED_FOLDER, FOLDER
from tests.node.workflows.test_served import Served


def bbs(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "node.cli", *args], capture_output=True, text=True, timeout=120, check=False
    )


NodeStore = Callable[[], str | None]  # the `node_store` fixture (tests/pg_fixtures.py)


@pytest.fixture
def served(tmp_path: Path) -> Iterator[list[Served]]:
    running: list[Served] = []
    yield running
    for node in running:
        node.stop()


def _post(node: Served, key: str, content: str) -> None:
    body = {"content": content, "entry_type": "finding", "performative": "inform"}
    resp = node.call("POST", "/v1/entries", key, body)
    assert resp.status_code == 201, resp.text


def _search(node: Served, key: str, words: str) -> httpx.Response:
    return httpx.get(
        node.url + "/v1/search",
        params={"q": words, "fresh": "true"},
        headers={"Authorization": f"Bearer {key}"},
        timeout=30,
    )


def _found(node: Served, key: str, words: str, count: int) -> None:
    """Wait until a search for `words` answers 200 with `count` hits (a 503 meanwhile carries Retry-After)."""
    deadline = time.monotonic() + 30
    while True:
        resp = _search(node, key, words)
        if resp.status_code == 200 and len(resp.json()["entries"]) == count:
            return
        if resp.status_code == 503:
            assert resp.json()["code"] == "search_index_building" and int(resp.headers["Retry-After"]) >= 1
        assert time.monotonic() < deadline, resp.text
        time.sleep(0.1)


def _log(node: Served) -> str:
    return (node.data.parent / f"{node.data.name}.log").read_text()


def _metric(node: Served, name: str) -> float:
    text = node.call("GET", "/metrics").text
    line = next(line for line in text.splitlines() if line.startswith(name + " "))
    return float(line.split()[1])


def _doctor_index(data: Path) -> dict[str, str]:
    run = bbs("doctor", "--data", str(data), "--json")
    return next(c for c in json.loads(run.stdout) if c["name"] == "search_index")


def _filled(tmp_path: Path, served: list[Served], node_store: NodeStore) -> tuple[Served, str]:
    """A served node (its store PostgreSQL in the `--store postgresql` pass) holding five indexed entries, stopped."""
    data = tmp_path / "n"
    node = Served(data, token=initialise(data, node_store()) or "").start()
    served.append(node)
    _, key = node.agent("writer")
    for i in range(5):
        _post(node, key, f"ledger note {i}")
    _found(node, key, "ledger", 5)
    node.stop()
    return node, key


@pytest.mark.parametrize("damaged", ["meta.json", ".managed.json"])
def test_bbs_rebuild_rebuilds_a_damaged_index_from_nothing(
    tmp_path: Path, served: list[Served], node_store: NodeStore, damaged: str
) -> None:
    node, _ = _filled(tmp_path, served, node_store)
    (node.data / FOLDER / damaged).write_text("{garbage")
    assert _doctor_index(node.data)["status"] == "fail"
    for _round in range(2):  # a second damaged copy replaces the first: at most one is kept
        (node.data / FOLDER / damaged).write_text("{garbage")
        run = bbs("rebuild", "--data", str(node.data))
        assert run.returncode == 0, run.stderr
        report = json.loads(run.stdout)
        assert report["search_index_entries"] == 5 and report["search_index"] == "ok", report
        assert f"moved it to {node.data / DAMAGED_FOLDER}" in run.stderr
        assert (node.data / DAMAGED_FOLDER / damaged).read_text() == "{garbage"
    assert sorted(p.name for p in node.data.iterdir() if p.name.startswith(FOLDER)) == [FOLDER, DAMAGED_FOLDER]
    assert _doctor_index(node.data)["status"] == "ok"
    assert bbs("doctor", "--data", str(node.data)).returncode == 0


def test_bbs_rebuild_fails_when_the_index_still_cannot_be_used(
    tmp_path: Path, served: list[Served], node_store: NodeStore
) -> None:
    node, _ = _filled(tmp_path, served, node_store)
    shutil.rmtree(node.data / FOLDER)
    (node.data / FOLDER).mkdir()
    (node.data / FOLDER / "meta.json").mkdir()  # neither openable nor creatable in place...
    (node.data / DAMAGED_FOLDER).write_text("a file where the aside copy goes\n")  # ...nor moved aside
    run = bbs("rebuild", "--data", str(node.data))
    assert run.returncode == 1, run.stdout
    assert json.loads(run.stdout)["search_index"] == "fail"
    assert "search index:" in run.stderr and "Traceback" not in run.stderr


def test_a_node_started_with_a_damaged_index_rebuilds_it_in_the_background(
    tmp_path: Path, served: list[Served], node_store: NodeStore
) -> None:
    node, key = _filled(tmp_path, served, node_store)
    (node.data / FOLDER / "meta.json").write_text("{garbage")
    node.start()
    _found(node, key, "ledger", 5)
    assert _log(node).count("moved it to") == 1
    assert (node.data / DAMAGED_FOLDER / "meta.json").read_text() == "{garbage"
    node.stop()
    assert _doctor_index(node.data)["status"] == "ok"


def test_a_serving_node_rebuilds_an_index_folder_removed_under_it(
    tmp_path: Path, served: list[Served], node_store: NodeStore
) -> None:
    node, key = _filled(tmp_path, served, node_store)
    node.start()
    _found(node, key, "ledger", 5)
    shutil.rmtree(node.data / FOLDER)
    _post(node, key, "ledger note after the removal")
    _found(node, key, "ledger", 6)  # the new entry indexed, the old ones again
    log = _log(node)
    assert log.count("its folder is gone; rebuilding it from the log") == 1, log
    assert "Traceback" not in log, log
    assert _metric(node, "bbs_search_index_repairs") >= 1
    node.stop()
    assert _doctor_index(node.data)["status"] == "ok"


def test_a_serving_node_rebuilds_an_index_damaged_under_it(
    tmp_path: Path, served: list[Served], node_store: NodeStore
) -> None:
    node, key = _filled(tmp_path, served, node_store)
    node.start()
    _found(node, key, "ledger", 5)
    for segment in (node.data / FOLDER).glob("*.idx"):  # the segments' term index: every reload now fails
        segment.write_bytes(b"{garbage")
    (node.data / FOLDER / "meta.json").write_text("{garbage")
    _post(node, key, "ledger note after the damage")
    _found(node, key, "ledger", 6)
    log = _log(node)
    assert "Traceback" not in log, log
    assert log.count("search indexing failed") <= 1 and "rebuilding it from the log" in log, log
    assert _metric(node, "bbs_search_index_repairs") >= 1
    node.stop()
    assert _doctor_index(node.data)["status"] == "ok"
