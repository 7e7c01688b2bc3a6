"""`bbs space` against a real `bbs serve` process: create, add, list, show, remove, and the refusals."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.agent.conftest import ServedNode

pytestmark = pytest.mark.slow


def bbs(node: ServedNode, key: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "BBS_API_KEY": key, "BBS_NODE": node.url}
    return subprocess.run([sys.executable, "-m", "node.cli", "space", *args], capture_output=True, text=True, env=env)


def test_spaces_from_the_command_line(served_node: ServedNode) -> None:
    owner, bob = served_node.create_agent("owner"), served_node.create_agent("bob")
    made = bbs(served_node, owner["api_key"], "create", "family", "--description", "our notes")
    assert made.returncode == 0, made.stderr
    space = made.stdout.strip()
    added = bbs(served_node, owner["api_key"], "add", space, bob["agent_id"], "--role", "writer")
    assert added.returncode == 0 and "is a writer" in added.stdout, added.stderr
    listed = json.loads(bbs(served_node, bob["api_key"], "list", "--json").stdout)
    assert [(s["space_id"], s["role"], s["name"]) for s in listed["spaces"]] == [(space, "writer", "family")]
    shown = bbs(served_node, bob["api_key"], "show", space)
    assert shown.returncode == 0 and f"{owner['agent_id']}\towner" in shown.stdout
    refused = bbs(served_node, bob["api_key"], "add", space, owner["agent_id"], "--role", "reader")
    assert refused.returncode != 0 and "owner_role_fixed" in refused.stderr  # nothing changes the owner
    leaving = bbs(served_node, bob["api_key"], "remove", space, bob["agent_id"])
    assert leaving.returncode == 0, leaving.stderr  # a member may leave on its own
    hidden = bbs(served_node, bob["api_key"], "show", space)
    assert hidden.returncode != 0 and "unknown_space" in hidden.stderr
    assert bbs(served_node, bob["api_key"], "list").stdout.strip() == "no spaces"


def test_hosting_nodes_from_the_command_line(served_node: ServedNode) -> None:
    """`bbs space host SPACE NODE [--remove]`, and `bbs space show` listing the hosts."""
    owner, bob = served_node.create_agent("owner"), served_node.create_agent("bob")
    key = owner["api_key"]
    space = bbs(served_node, key, "create", "family").stdout.strip()
    here = json.loads(bbs(served_node, key, "show", space, "--json").stdout)["hosts"]
    assert len(here) == 1  # the node it was created on
    other = "did:key:z6MkhaXgBZDvotDkL5257faiztiGiC2QtKLGpbnnEGta2doK"
    named = bbs(served_node, key, "host", space, other)
    assert named.returncode == 0 and f"{other} hosts {space}" in named.stdout, named.stderr
    assert f"  {other}\thost" in bbs(served_node, key, "show", space).stdout
    assert "no change" in bbs(served_node, key, "host", space, other).stdout
    removed = bbs(served_node, key, "host", space, other, "--remove")
    assert removed.returncode == 0 and "no longer hosts" in removed.stdout, removed.stderr
    assert json.loads(bbs(served_node, key, "show", space, "--json").stdout)["hosts"] == here
    bbs(served_node, key, "add", space, bob["agent_id"], "--role", "writer")
    refused = bbs(served_node, bob["api_key"], "host", space, other)
    assert refused.returncode != 0 and "not_a_space_admin" in refused.stderr


def people(node: ServedNode, key: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "BBS_API_KEY": key, "BBS_NODE": node.url}
    return subprocess.run([sys.executable, "-m", "node.cli", *args], capture_output=True, text=True, env=env)


def test_post_search_and_tail_in_a_space(served_node: ServedNode) -> None:
    """`--space` on `bbs post`, `bbs search` and `bbs tail`: members read what is posted there, others nothing."""
    owner, eve = served_node.create_agent("owner"), served_node.create_agent("eve")
    space = bbs(served_node, owner["api_key"], "create", "family").stdout.strip()
    posted = people(served_node, owner["api_key"], "post", "grandma's recipe: more butter", "--space", space, "--json")
    assert posted.returncode == 0, posted.stderr
    entry = json.loads(posted.stdout)
    assert entry["space"] == space
    found = people(served_node, owner["api_key"], "search", "butter", "--space", space, "--fresh", "--json")
    assert [e["id"] for e in json.loads(found.stdout)["entries"]] == [entry["id"]]
    tail = ["tail", "--after", "0", "--no-follow", "--json"]
    assert [json.loads(line)["id"] for line in people(served_node, owner["api_key"], *tail).stdout.splitlines()] == [
        entry["id"]
    ]
    assert people(served_node, eve["api_key"], *tail).stdout.strip() == ""  # not a member: nothing
    nothing = people(served_node, eve["api_key"], "search", "butter", "--fresh", "--json")
    assert json.loads(nothing.stdout)["entries"] == []
    refused = people(served_node, eve["api_key"], "post", "let me in", "--space", space)
    assert refused.returncode != 0 and "unknown_space" in refused.stderr
    refused = people(served_node, eve["api_key"], "tail", "--no-follow", "--space", space)
    assert refused.returncode != 0 and "unknown_space" in refused.stderr


def test_link_message_and_subscribe_in_a_space(served_node: ServedNode) -> None:
    """`--space` on `bbs link`, `bbs message send|list` and `bbs subscribe create`."""
    owner, eve = served_node.create_agent("owner"), served_node.create_agent("eve")
    key = owner["api_key"]
    space = bbs(served_node, key, "create", "family").stdout.strip()
    first = json.loads(people(served_node, key, "post", "first", "--space", space, "--json").stdout)
    second = json.loads(people(served_node, key, "post", "second", "--space", space, "--json").stdout)
    linked = people(served_node, key, "link", str(second["id"]), str(first["id"]), "--type", "supports",
                    "--space", space, "--json")  # fmt: skip
    assert linked.returncode == 0 and json.loads(linked.stdout)["space"] == space, linked.stderr
    sent = people(served_node, key, "message", "send", "note", "for the family", "--space", space, "--json")
    assert sent.returncode == 0 and json.loads(sent.stdout)["space"] == space, sent.stderr
    listed = json.loads(people(served_node, key, "message", "list", "--space", space, "--json").stdout)
    assert [m["body"] for m in listed["messages"]] == ["for the family"]
    refused = people(served_node, eve["api_key"], "message", "list", "--space", space)
    assert refused.returncode != 0 and "unknown_space" in refused.stderr
    sub = people(served_node, key, "subscribe", "create", "--tag", "x", "--space", space, "--json")
    assert sub.returncode == 0 and json.loads(sub.stdout)["spaces"] == [space], sub.stderr
