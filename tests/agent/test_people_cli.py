"""`bbs post/search/read/inbox/ack/tail/tasks` (agent/people_cli.py) against a real `bbs serve` subprocess."""

from __future__ import annotations

import json
import os
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from agent.client import BBSClientError
from agent.people_cli import problem_line
from node.cli import main
from tests.agent.conftest import BBS, ServedNode, start_node, stop_node

# One worker runs this module: its tests share the module's served node (pytest-xdist, --dist loadgroup).
pytestmark = pytest.mark.xdist_group("people-cli")

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServedNode]:
    node = start_node(tmp_path_factory.mktemp("people") / "node")
    yield node
    stop_node(node)


@pytest.fixture
def alice(served: ServedNode, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """A fresh agent whose key and node URL are in BBS_API_KEY and BBS_NODE."""
    created = served.create_agent(f"alice{time.monotonic_ns()}")
    monkeypatch.setenv("BBS_NODE", served.url)
    monkeypatch.setenv("BBS_API_KEY", created["api_key"])
    return created


def bbs(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_post_then_search_and_read_as_tables_and_json(
    alice: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = bbs(capsys, "post", "The [bold]cache[/] hit rate fell to 41%", "--tag", "perf", "--json")
    assert code == 0
    entry = json.loads(out)
    assert entry["author_id"] == alice["agent_id"] and entry["tags"] == ["perf"]
    code, out, _ = bbs(capsys, "post", "a question about caches", "--type", "question", "--reply-to", str(entry["id"]))
    assert code == 0 and "question/inform" in out and "posted" in out

    code, out, _ = bbs(capsys, "search", "cache", "--tag", "perf")
    assert code == 0 and "[bold]cache[/]" in out  # content printed as written, never as markup
    code, out, _ = bbs(capsys, "search", "cache", "--json", "--fresh")
    found = json.loads(out)
    assert entry["id"] in [e["id"] for e in found["entries"]]
    assert found["stale"] is False and found["indexed_through"] >= entry["id"]  # --fresh waited for the index
    assert found["snippets"][entry["record_hash"]]["text"] == "The [bold]cache[/] hit rate fell to 41%"

    code, out, _ = bbs(capsys, "read", str(entry["id"]), "--hops", "1")
    assert code == 0 and entry["record_hash"] in out and "responds_to" in out
    code, out, _ = bbs(capsys, "read", entry["record_hash"], "--json")
    assert json.loads(out)["entries"][0]["id"] == entry["id"]


def test_read_of_an_unknown_entry_says_so_and_fails(alice: dict[str, str], capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = bbs(capsys, "read", "999999")
    assert code == 1 and "not found: 999999" in err


def test_inbox_and_ack(served: ServedNode, alice: dict[str, str], capsys: pytest.CaptureFixture[str]) -> None:
    bob = served.create_agent(f"bob{time.monotonic_ns()}")
    assert bbs(capsys, "post", "for alice", "--to", alice["agent_id"], "--api-key", bob["api_key"])[0] == 0
    code, out, err = bbs(capsys, "inbox")
    assert code == 0 and "directed" in out and "bbs ack" in err
    ids = err.split("bbs ack ")[1].split()
    code, out, _ = bbs(capsys, "ack", *ids, "--json")
    assert code == 0 and json.loads(out) == {"acknowledged": len(ids)}
    code, _, err = bbs(capsys, "inbox")
    assert code == 0 and "inbox empty" in err

    assert bbs(capsys, "post", "again for alice", "--to", alice["agent_id"], "--api-key", bob["api_key"])[0] == 0
    code, out, _ = bbs(capsys, "inbox", "--ack", "--json")
    polled = json.loads(out)
    assert len(polled["notifications"]) == 1 and polled["acknowledged"] == 1


def test_tasks_ready_and_graph(served: ServedNode, alice: dict[str, str], capsys: pytest.CaptureFixture[str]) -> None:
    import urllib.request

    for body in ({"key": "build", "title": "Build it"}, {"key": "ship", "title": "Ship it", "depends_on": ["build"]}):
        request = urllib.request.Request(
            served.url + "/v1/agent-workflows/tasks",
            data=json.dumps(body).encode(),
            headers={"Authorization": f"Bearer {alice['api_key']}", "Content-Type": "application/json"},
            method="POST",
        )
        urllib.request.urlopen(request, timeout=10).close()
    code, out, _ = bbs(capsys, "tasks")
    assert code == 0 and "Build it" in out and "Ship it" not in out
    code, out, _ = bbs(capsys, "tasks", "--json")
    assert [t["key"] for t in json.loads(out)["tasks"]] == ["build"]
    code, out, _ = bbs(capsys, "tasks", "--graph")
    assert code == 0 and "Ship it" in out and "precedes" in out and "blocked" in out
    code, out, _ = bbs(capsys, "tasks", "--graph", "--json")
    graph = json.loads(out)
    assert {(e["from_key"], e["to_key"]) for e in graph["edges"]} == {("build", "ship")}


def test_tail_without_follow_prints_what_is_there(alice: dict[str, str], capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = bbs(capsys, "post", "tail me", "--json")
    entry = json.loads(out)
    code, out, _ = bbs(capsys, "tail", "--after", str(entry["id"] - 1), "--no-follow", "--json")
    lines = [json.loads(line) for line in out.splitlines()]
    assert code == 0 and [e["id"] for e in lines] == [entry["id"]]
    code, out, _ = bbs(capsys, "tail", "--after", str(entry["id"] - 1), "--no-follow")
    assert code == 0 and f"#{entry['id']}" in out and "tail me" in out


def feed_reads(served: ServedNode) -> int:
    """GET /v1/feed requests the node has answered 200 (its /metrics)."""
    request = urllib.request.Request(served.url + "/metrics", headers={"Authorization": f"Bearer {served.admin_token}"})
    with urllib.request.urlopen(request, timeout=10) as resp:
        text = resp.read().decode()
    line = 'bbs_http_requests_total{method="GET",route="/v1/feed",status="200"} '
    return sum(int(float(row[len(line) :])) for row in text.splitlines() if row.startswith(line))


def test_tail_receives_a_post_made_while_it_waits(served: ServedNode, alice: dict[str, str]) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO), "COLUMNS": "200"}
    before = feed_reads(served)
    tail = subprocess.Popen(
        [*BBS, "tail", "--count", "1"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=REPO
    )
    try:
        # The tail has read the head (a post before that would be history to it) and waits on the node; a fixed
        # sleep was too short for a loaded machine's Python start.
        deadline = time.monotonic() + 60
        while feed_reads(served) == before and tail.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert feed_reads(served) > before, tail.communicate()[1] if tail.poll() is not None else "no feed read"
        time.sleep(0.2)  # into its long-poll (a post before it is still found: the poll starts after the head)
        assert tail.poll() is None
        posted = subprocess.run(
            [*BBS, "post", "news while you wait", "--json"], capture_output=True, text=True, env=env, cwd=REPO
        )
        assert posted.returncode == 0, posted.stderr
        out, err = tail.communicate(timeout=30)
    finally:
        tail.kill()
    assert tail.returncode == 0, err
    assert "news while you wait" in out and f"#{json.loads(posted.stdout)['id']}" in out


def test_identity_file_signs_the_post(
    served: ServedNode, capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("BBS_API_KEY", raising=False)
    name = f"carol{time.monotonic_ns()}"
    created = served.create_agent(name)
    identity = tmp_path / "carol.id"
    assert main(["agent", "export", name, "--data", str(served.data), "--out", str(identity)]) == 0
    capsys.readouterr()
    code, out, err = bbs(capsys, "post", "signed by me", "--identity", str(identity), "--node", served.url, "--json")
    assert code == 0, err
    assert json.loads(out)["author_id"] == created["agent_id"]


def test_errors_are_one_line_with_code_detail_and_field(
    alice: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = bbs(capsys, "post", "x", "--type", "rumour")
    assert code == 1 and err.startswith("bbs: validation_error: ") and "(at $.entry_type)" in err
    assert len(err.strip().splitlines()) == 1
    code, _, err = bbs(capsys, "search", "--limit", "500")
    assert code == 1 and "(at $.limit)" in err
    code, _, err = bbs(capsys, "tail", "--wait-ms", "99999", "--no-follow")
    assert code == 1 and "(at $.wait_ms)" in err
    code, _, err = bbs(capsys, "search", "x", "--api-key", "not-a-key")
    assert code == 1 and err.startswith("bbs: unauthorized: ")


def test_missing_credentials_bad_url_and_unreachable_node(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("BBS_API_KEY", raising=False)
    monkeypatch.delenv("BBS_NODE", raising=False)
    code, _, err = bbs(capsys, "search", "x")
    assert code == 1 and "BBS_API_KEY" in err
    code, _, err = bbs(capsys, "search", "x", "--api-key", "k", "--node", "ftp://nowhere")
    assert code == 1 and "is not a node URL" in err
    code, _, err = bbs(capsys, "search", "x", "--api-key", "k", "--node", "http://127.0.0.1:9")
    assert code == 1 and err == "bbs: unreachable: no node answers at http://127.0.0.1:9 (set --node or BBS_NODE)\n"


def test_problem_line_names_code_detail_and_field() -> None:
    line = problem_line(BBSClientError(422, "validation_error", "too long", "$.content"), "http://n")
    assert line == "validation_error: too long (at $.content)"
    assert (
        problem_line(BBSClientError(404, "entry_not_found", "no entry 7"), "http://n") == "entry_not_found: no entry 7"
    )
