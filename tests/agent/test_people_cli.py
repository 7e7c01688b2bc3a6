"""The people's commands (agent/people_cli.py: post, search, read, link, subscribe, inbox, ack, tail, tasks, message,
task) against a real `bbs serve` subprocess."""

from __future__ import annotations

import json
import os
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

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


def declare(served: ServedNode, api_key: str, body: dict[str, Any]) -> None:
    """Declare a task over REST (POST /v1/agent-workflows/tasks) as the agent of `api_key`."""
    request = urllib.request.Request(
        served.url + "/v1/agent-workflows/tasks",
        data=json.dumps(body).encode(),
        headers={"Authorization": f"Bearer {api_key}", "Content-Type": "application/json"},
        method="POST",
    )
    urllib.request.urlopen(request, timeout=10).close()


def test_tasks_ready_and_graph(served: ServedNode, alice: dict[str, str], capsys: pytest.CaptureFixture[str]) -> None:
    for body in ({"key": "build", "title": "Build it"}, {"key": "ship", "title": "Ship it", "depends_on": ["build"]}):
        declare(served, alice["api_key"], body)
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


# ---- link, subscribe, the bus, task leases; agents by did or local name -----------------------------------------


def posted(capsys: pytest.CaptureFixture[str], *argv: str) -> dict[str, Any]:
    """`bbs post ... --json`'s entry (the command must succeed)."""
    code, out, err = bbs(capsys, "post", *argv, "--json")
    assert code == 0, err
    entry: dict[str, Any] = json.loads(out)
    return entry


def refused(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    """The one line a failing command prints (it must exit 1 and print nothing on stdout)."""
    code, out, err = bbs(capsys, *argv)
    assert code == 1 and out == "" and len(err.strip().splitlines()) == 1, (code, out, err)
    assert err.startswith("bbs: ")
    return err.strip()


def test_link_two_entries_by_id_and_by_hash(alice: dict[str, str], capsys: pytest.CaptureFixture[str]) -> None:
    claim = posted(capsys, "the cache is cold after a deploy")
    evidence = posted(capsys, "hit rate 3% for ten minutes after each deploy")
    code, out, _ = bbs(capsys, "link", str(evidence["id"]), claim["record_hash"], "--type", "supports",
                       "--annotation", "measured", "--json")  # fmt: skip
    assert code == 0
    link = json.loads(out)
    assert (link["source"], link["target"], link["link_type"]) == (
        evidence["record_hash"],
        claim["record_hash"],
        "supports",
    )
    assert link["annotation"] == "measured" and link["author_id"] == alice["agent_id"]
    code, out, _ = bbs(capsys, "link", str(claim["id"]), str(evidence["id"]), "--type", "contradicts")
    assert code == 0 and "linked" in out and "contradicts" in out
    code, out, _ = bbs(capsys, "read", str(claim["id"]), "--json")
    assert {x["link_type"] for x in json.loads(out)["links"]} == {"supports", "contradicts"}

    assert "(at $.link_type)" in refused(capsys, "link", str(claim["id"]), str(evidence["id"]), "--type", "likes")
    assert refused(capsys, "link", "99999999", str(claim["id"]), "--type", "supports").startswith(
        "bbs: source_not_found: "
    )
    assert refused(capsys, "link", str(claim["id"]), str(claim["id"]), "--type", "supports").startswith(
        "bbs: self_link: "
    )


def test_subscribe_create_list_delete_and_its_notifications(
    served: ServedNode, alice: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    bob_name = f"bob{time.monotonic_ns()}"
    bob = served.create_agent(bob_name)
    code, out, _ = bbs(capsys, "subscribe", "create", "--tag", "deploys", "--author", bob_name, "--json")
    assert code == 0
    sub = json.loads(out)
    assert (sub["tags"], sub["authors"], sub["directed"]) == (["deploys"], [bob["agent_id"]], False)  # name -> did
    code, out, _ = bbs(capsys, "subscribe", "create", "--type", "question", "--performative", "request")
    assert code == 0 and "subscribed" in out and "question" in out and "request" in out
    code, out, _ = bbs(capsys, "subscribe", "list")
    assert code == 0 and "deploys" in out and "question" in out
    code, out, _ = bbs(capsys, "subscribe", "list", "--json")
    listed = json.loads(out)["subscriptions"]
    assert sub["id"] in [s["id"] for s in listed] and len(listed) == 2

    assert bbs(capsys, "post", "deploy 41 done", "--tag", "deploys", "--api-key", bob["api_key"])[0] == 0
    code, out, _ = bbs(capsys, "inbox", "--ack", "--json")
    assert [n["reason"] for n in json.loads(out)["notifications"]] == ["subscription"]

    for other in listed:
        code, out, _ = bbs(capsys, "subscribe", "delete", str(other["id"]), "--json")
        assert code == 0 and json.loads(out) == {"deleted": other["id"]}
    code, _, err = bbs(capsys, "subscribe", "list")
    assert code == 0 and "no subscriptions" in err
    assert bbs(capsys, "post", "deploy 42 done", "--tag", "deploys", "--api-key", bob["api_key"])[0] == 0
    code, _, err = bbs(capsys, "inbox")
    assert code == 0 and "inbox empty" in err

    assert "(at $.entry_types[0])" in refused(capsys, "subscribe", "create", "--type", "rumour")
    assert "(at $.authors[0])" in refused(capsys, "subscribe", "create", "--author", "Not A Name")
    assert refused(capsys, "subscribe", "create", "--author", "nobody-here").startswith("bbs: agent_not_found: ")
    assert refused(capsys, "subscribe", "delete", str(sub["id"])).startswith("bbs: subscription_not_found: ")


def test_agents_by_local_name_with_an_api_key_and_with_an_identity(
    served: ServedNode,
    alice: dict[str, str],
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    name = f"dora{time.monotonic_ns()}"
    dora = served.create_agent(name)
    entry = posted(capsys, "for dora, by name", "--to", name)
    assert entry["directed_to"] == [dora["agent_id"]]
    identity = tmp_path / "dora.id"
    assert main(["agent", "export", name, "--data", str(served.data), "--out", str(identity)]) == 0
    capsys.readouterr()
    assert refused(capsys, "post", "x", "--to", "nobody-here").startswith("bbs: agent_not_found: ")
    assert "(at $.author[0])" in refused(capsys, "search", "--author", "Not A Name")
    monkeypatch.delenv("BBS_API_KEY")  # from here on dora, with her own key: the client resolves names itself
    signed = posted(capsys, "back to alice", "--to", alice["name"], "--identity", str(identity))
    assert signed["author_id"] == dora["agent_id"] and signed["directed_to"] == [alice["agent_id"]]
    code, out, _ = bbs(capsys, "search", "--author", name, "--json", "--identity", str(identity))
    assert code == 0 and [e["id"] for e in json.loads(out)["entries"]] == [signed["id"]]
    line = refused(capsys, "post", "x", "--to", "nobody-here", "--identity", str(identity))
    assert line.startswith("bbs: agent_not_found: ") and "(at $.directed_to[0])" in line


def test_message_send_and_list_with_names_filters_and_pages(
    served: ServedNode, alice: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    name = f"erin{time.monotonic_ns()}"
    erin = served.create_agent(name)
    project = f"p{time.monotonic_ns()}"
    code, out, _ = bbs(capsys, "message", "send", "status", "build is green", "--to", name, "--project", project,
                       "--payload", '{"run": 7}', "--depends-on", "build", "--json")  # fmt: skip
    assert code == 0
    sent = json.loads(out)
    assert (sent["from_agent"], sent["to_agent"], sent["message_type"]) == (
        alice["agent_id"],
        erin["agent_id"],
        "status",
    )
    assert (sent["payload"], sent["dependency_ids"], sent["project"]) == ({"run": 7}, ["build"], project)
    code, out, _ = bbs(capsys, "message", "send", "note", "to everyone", "--project", project)
    assert code == 0 and "sent" in out and "everyone" in out

    code, out, err = bbs(capsys, "message", "list", "--project", project, "--limit", "1", "--json")
    first = json.loads(out)
    assert code == 0 and [m["body"] for m in first["messages"]] == ["to everyone"] and first["next_cursor"]
    code, out, err = bbs(capsys, "message", "list", "--project", project, "--limit", "1")
    assert code == 0 and "to everyone" in out and f"more: --cursor {first['next_cursor']}" in err
    code, out, _ = bbs(capsys, "message", "list", "--project", project, "--cursor", first["next_cursor"], "--json")
    assert [m["id"] for m in json.loads(out)["messages"]] == [sent["id"]]
    code, out, _ = bbs(capsys, "message", "list", "--agent", name, "--json", "--api-key", erin["api_key"])
    assert [m["id"] for m in json.loads(out)["messages"]] == [sent["id"]]  # by name: erin's messages only
    code, out, _ = bbs(capsys, "message", "list", "--project", project, "--type", "status", "--order", "oldest")
    assert code == 0 and "build is green" in out and "to everyone" not in out
    code, _, err = bbs(capsys, "message", "list", "--project", f"{project}-none")
    assert code == 0 and "no messages" in err

    assert "(at $.payload)" in refused(capsys, "message", "send", "status", "x", "--payload", "[1, 2]")
    assert "(at $.payload)" in refused(capsys, "message", "send", "status", "x", "--payload", "{nope")
    assert refused(capsys, "message", "send", "status", "x", "--to", "nobody-here").startswith("bbs: agent_not_found")
    assert "(at $.message_type)" in refused(capsys, "message", "send", "")
    assert "(at $.order)" in refused(capsys, "message", "list", "--order", "sideways")
    assert "(at $.limit)" in refused(capsys, "message", "list", "--limit", "0")
    assert "(at $.cursor)" in refused(capsys, "message", "list", "--cursor", "yesterday")


def test_task_lease_release_and_complete(
    served: ServedNode, alice: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    key = f"migrate{time.monotonic_ns()}"
    declare(served, alice["api_key"], {"key": key, "title": "Migrate the schema"})
    code, out, err = bbs(capsys, "task", "lease", key, "--seconds", "60")
    assert code == 0 and "processing" in out and f"bbs task complete {key} --lease " in err
    lease = err.split("--lease ")[1].split()[0]
    assert lease in out and alice["agent_id"] in out

    line = refused(capsys, "task", "complete", key)  # a held lease must be named (the fencing token)
    assert line.startswith("bbs: lease_required: ")
    code, out, _ = bbs(capsys, "task", "release", key, "--lease", lease, "--checkpoint", '{"step": 1}', "--json")
    released = json.loads(out)
    assert code == 0 and released["lease"] is None and released["checkpoint"] == {"step": 1}
    assert released["status"] != "processing"

    code, out, _ = bbs(capsys, "task", "lease", key, "--json")
    leased = json.loads(out)
    assert leased["lease"]["holder"] == alice["agent_id"] and leased["lease"]["lease_id"] != lease
    assert refused(capsys, "task", "complete", key, "--lease", lease).startswith("bbs: stale_lease: ")
    code, out, _ = bbs(capsys, "task", "complete", key, "--lease", leased["lease"]["lease_id"],
                       "--checkpoint", '{"step": 2, "done": true}', "--json")  # fmt: skip
    done = json.loads(out)
    assert code == 0 and done["status"] == "done" and done["checkpoint"] == {"step": 2, "done": True}
    assert done["lease"] is None

    assert "(at $.seconds)" in refused(capsys, "task", "lease", key, "--seconds", "5")
    assert refused(capsys, "task", "lease", f"{key}-none").startswith("bbs: task_not_found: ")
    assert "(at $.lease)" in refused(capsys, "task", "release", key, "--lease", "not-a-lease")
    assert "(at $.checkpoint)" in refused(capsys, "task", "complete", key, "--checkpoint", "7")


def test_messages_and_leases_signed_with_an_identity_file(
    served: ServedNode, capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("BBS_API_KEY", raising=False)
    monkeypatch.setenv("BBS_NODE", served.url)
    name, peer = f"fay{time.monotonic_ns()}", f"gus{time.monotonic_ns()}"
    fay, gus = served.create_agent(name), served.create_agent(peer)
    identity = tmp_path / "fay.id"
    assert main(["agent", "export", name, "--data", str(served.data), "--out", str(identity)]) == 0
    capsys.readouterr()
    me = ("--identity", str(identity))
    code, out, err = bbs(capsys, "message", "send", "handoff", "yours now", "--to", peer, *me, "--json")
    assert code == 0, err
    assert (json.loads(out)["from_agent"], json.loads(out)["to_agent"]) == (fay["agent_id"], gus["agent_id"])

    key = f"sign{time.monotonic_ns()}"
    declare(served, fay["api_key"], {"key": key, "title": "Signed work"})
    code, out, err = bbs(capsys, "task", "lease", key, *me, "--json")
    assert code == 0, err
    lease = json.loads(out)["lease"]["lease_id"]
    code, out, err = bbs(capsys, "task", "complete", key, "--lease", lease, "--checkpoint", '{"ok": true}', *me)
    assert code == 0 and "done" in out, err
    assert refused(capsys, "task", "release", key, *me).startswith("bbs: ")


def test_tasks_of_a_space_by_the_cli(
    served: ServedNode, alice: dict[str, str], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """`--space` on `bbs tasks` and `bbs task lease/complete`: a key names the space's task; a stranger sees none."""
    code, out, err = bbs(capsys, "space", "create", "household")
    assert code == 0, err
    space = out.strip()
    declare(served, alice["api_key"], {"key": "dishes", "title": "Wash up at home", "space": space})
    declare(served, alice["api_key"], {"key": "dishes", "title": "A public dishes"})
    code, out, _ = bbs(capsys, "tasks", "--space", space, "--json")
    assert [(t["key"], t["space"]) for t in json.loads(out)["tasks"]] == [("dishes", space)]
    code, out, _ = bbs(capsys, "tasks", "--graph", "--space", space, "--json")
    assert [n["title"] for n in json.loads(out)["nodes"]] == ["Wash up at home"]
    code, out, err = bbs(capsys, "task", "lease", "dishes", "--space", space, "--json")
    leased = json.loads(out)
    assert code == 0 and leased["space"] == space and leased["title"] == "Wash up at home"
    lease = leased["lease"]["lease_id"]
    code, out, _ = bbs(capsys, "task", "complete", "dishes", "--space", space, "--lease", lease, "--json")
    assert code == 0 and json.loads(out)["status"] == "done"
    public = json.loads(bbs(capsys, "tasks", "--json")[1])["tasks"]
    assert ("dishes", None) in {(t["key"], t["space"]) for t in public}  # the public task is another one
    stranger = served.create_agent(f"eve{time.monotonic_ns()}")
    monkeypatch.setenv("BBS_API_KEY", stranger["api_key"])
    assert refused(capsys, "tasks", "--space", space).startswith("bbs: unknown_space")
    assert refused(capsys, "task", "lease", str(leased["id"])).startswith("bbs: task_not_found")
    assert space not in bbs(capsys, "tasks", "--graph", "--json")[1]
