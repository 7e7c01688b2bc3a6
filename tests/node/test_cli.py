"""The `bbs` CLI contract scripts rely on: init, agent create (--json, BBS_DATA), one-line errors.

Only `bbs init` and `bbs serve` create a node; every other command refuses a folder that holds none.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.request
from pathlib import Path

from tests.agent.conftest import start_node, stop_node


def bbs(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "node.cli", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**os.environ, **(env or {})},
    )


def test_init_prints_the_admin_token_once(tmp_path: Path) -> None:
    data = tmp_path / "d"
    first = bbs("init", "--data", str(data))
    assert first.returncode == 0 and "Admin token" in first.stdout and "bbs_" in first.stdout
    second = bbs("init", "--data", str(data))
    assert second.returncode == 0 and "bbs_" not in second.stdout + second.stderr
    assert (data / "node.key").stat().st_mode & 0o077 == 0


def test_agent_create_json_and_bbs_data(tmp_path: Path) -> None:
    data = tmp_path / "d"
    assert bbs("init", "--data", str(data)).returncode == 0
    created = bbs("agent", "create", "research", "--display-name", "Research", "--json", env={"BBS_DATA": str(data)})
    assert created.returncode == 0, created.stderr
    body = json.loads(created.stdout)
    assert set(body) == {"name", "agent_id", "api_key"}
    assert body["name"] == "research" and body["agent_id"].startswith("did:key:z")
    plain = bbs("agent", "create", "second", "--data", str(data))
    assert plain.returncode == 0 and "agent_id: did:key:" in plain.stdout and "api_key:" in plain.stdout
    again = bbs("agent", "create", "research", "--data", str(data))
    assert again.returncode == 1
    assert again.stderr.strip().startswith("bbs: agent_exists:") and "Traceback" not in again.stderr


def test_agent_create_refuses_bad_input_in_one_line(tmp_path: Path) -> None:
    data = tmp_path / "d"
    assert bbs("init", "--data", str(data)).returncode == 0
    cases = [
        (["Bad Name"], "validation_error"),
        (["-x"], None),  # argparse: looks like an option
        (["ok", "--display-name", "d" * 129], "record_schema"),
        (["ok", "--description", "d" * 2049], "record_schema"),
        (["x" * 65], "validation_error"),
    ]
    for args, code in cases:
        result = bbs("agent", "create", *args, "--data", str(data))
        assert result.returncode != 0, args
        assert "Traceback" not in result.stderr, result.stderr
        if code is not None:
            assert result.returncode == 1
            assert result.stderr.strip().startswith(f"bbs: {code}:"), result.stderr
    listed = bbs("agent", "create", "fine", "--data", str(data), "--json")
    assert listed.returncode == 0


def test_only_init_and_serve_create_a_node(tmp_path: Path) -> None:
    """A mistyped --data is refused by every other command, and nothing is created there."""
    typo = tmp_path / "typo" / "dir"
    empty = tmp_path / "empty"
    empty.mkdir()
    for folder in (typo, empty):
        for command in (
            ["agent", "create", "x"],
            ["agent", "rotate-key", "x"],
            ["agent", "export", "x", "--out", str(tmp_path / "x.key")],
            ["peer", "add", "http://127.0.0.1:9", "--key", "did:key:z6MkhaXgBZDvotDkL5257faiztiGiC2QtKLGpbnnEGta2doK"],
            ["peers"],
            ["digest"],
            ["rebuild"],
            ["backup", "--out", str(tmp_path / "b.tar")],
            ["litestream-config", "--replica", str(tmp_path / "replica")],
            ["processes"],
            ["restore", "--by-hand"],
        ):
            result = bbs(*command, "--data", str(folder))
            assert result.returncode == 1, (command, result.stderr)
            assert result.stderr == (
                f"bbs: {folder} holds no node; run 'bbs init --data {folder}' (or 'bbs serve --data {folder}') first\n"
            ), (command, result.stderr)
            assert result.stdout == ""
    assert not typo.parent.exists()
    assert list(empty.iterdir()) == []
    assert not (tmp_path / "x.key").exists() and not (tmp_path / "b.tar").exists()


def test_agent_create_works_on_an_initialised_folder_whether_or_not_served(tmp_path: Path) -> None:
    data = tmp_path / "d"
    init = bbs("init", "--data", str(data))
    assert init.returncode == 0 and init.stdout.count("Admin token") == 1
    created = bbs("agent", "create", "research", "--data", str(data), "--json")
    assert created.returncode == 0, created.stderr
    assert json.loads(created.stdout)["agent_id"].startswith("did:key:z")
    digest = bbs("digest", "--data", str(data))
    assert digest.returncode == 0 and digest.stdout.split()[0] == "1"


def test_a_start_imports_no_library_it_does_not_use_yet() -> None:
    """Every `bbs` command builds the whole parser, and every node builds its app: neither imports what only some
    commands, pages or engines use (aiohttp's client and the REST client for the parser; for the app networkx, about
    0.3 s of CPU, which draws the dashboard's graphs and orders trust components, and psycopg, about 0.15 s, for a
    node on PostgreSQL: node.ops.datadir, which every command opens a folder through, reads a PostgreSQL store's
    mark of a move without it)."""
    probe = (
        "import sys; from node.cli import build_parser; build_parser();"
        " parser = sorted(m for m in ('aiohttp', 'agent.client', 'networkx') if m in sys.modules);"
        " import node.app, node.ops.datadir; print(parser, sorted(m for m in LATER if m in sys.modules))"
    ).replace("LATER", repr(LATER_IMPORTS))
    found = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=True)
    assert found.stdout.split() == ["[]", "[]"], found.stdout + found.stderr


LATER_IMPORTS = ("networkx", "psycopg")


def test_a_node_served_on_sqlite_loads_no_psycopg(tmp_path: Path) -> None:
    """A `bbs serve` on SQLite that took a post and a search has loaded neither psycopg's compiled library nor libpq
    (its memory map names every shared object it loaded): psycopg is imported where a PostgreSQL connection is
    opened."""
    node = start_node(tmp_path / "node")
    try:
        agent = node.create_agent("writer")
        headers = {"Authorization": f"Bearer {agent['api_key']}", "Content-Type": "application/json"}
        body = json.dumps({"entry_type": "finding", "performative": "inform", "content": "the roof leaks"}).encode()
        post = urllib.request.Request(node.url + "/v1/entries", data=body, headers=headers, method="POST")
        with urllib.request.urlopen(post, timeout=10) as resp:
            assert resp.status == 201
        search = urllib.request.Request(node.url + "/v1/search?q=roof&fresh=true", headers=headers)
        with urllib.request.urlopen(search, timeout=10) as resp:
            assert json.loads(resp.read())["entries"]
        maps = Path(f"/proc/{node.process.pid}/maps").read_text()
    finally:
        stop_node(node)
    assert "site-packages/psycopg" not in maps and "libpq" not in maps
    assert "site-packages/aiohttp" in maps  # the map is the server's: it holds aiohttp's compiled parser
