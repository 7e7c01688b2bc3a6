"""node.agents.cli: `bbs agent revoke` and `bbs agent recover` on a real data folder through `bbs`'s own main()."""

from __future__ import annotations

import argparse
import io
import json
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from node import cli
from node.agents import cli as agents_cli
from node.ops import datalock
from node.ops.datadir import DataDir
from node.store import db


def key_events(data: Path) -> list[dict[str, Any]]:
    def run(conn: sqlite3.Connection) -> list[dict[str, Any]]:
        return [json.loads(bytes(r[0])) for r in conn.execute("SELECT body FROM records WHERE kind = 'key_event'")]

    return db.read_sync(DataDir(data).store, run)


class Tty(io.StringIO):
    """A stdin that says it is a terminal, so the command asks (the answer comes from `ask`)."""

    def isatty(self) -> bool:
        return True


def made(tmp_path: Path, capsys: pytest.CaptureFixture[str], store_url: str | None = None) -> tuple[Path, str]:
    """A node folder (its database at `store_url`: `node_store`) holding the agent `keeper`; its id."""
    data = tmp_path / "node"
    assert cli.main(["init", "--data", str(data), *(["--store", store_url] if store_url else [])]) == 0
    capsys.readouterr()
    assert cli.main(["agent", "create", "keeper", "--data", str(data), "--json"]) == 0
    agent_id = json.loads(capsys.readouterr().out)["agent_id"]
    return data, agent_id


def test_bbs_agent_revoke_shows_the_count_asks_and_installs_a_new_key(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    node_store: Callable[[], str | None],
) -> None:
    data, agent_id = made(tmp_path, capsys, node_store())
    # not a terminal and no --yes: nothing is signed
    assert cli.main(["agent", "revoke", "keeper", "--data", str(data)]) == 1
    err = capsys.readouterr().err
    assert "vouches for 1 records" in err and "--yes" in err and "ties with this revocation" in err
    assert key_events(data) == []
    # answered no at the prompt: nothing is signed
    args = cli.build_parser().parse_args(["agent", "revoke", "keeper", "--data", str(data)])
    monkeypatch.setattr("sys.stdin", Tty())
    assert agents_cli.cmd_agent_revoke(args, ask=lambda _prompt: "n") == 1
    assert key_events(data) == []
    assert agents_cli.cmd_agent_revoke(args, ask=lambda _prompt: "y") == 0
    (first,) = key_events(data)
    assert first["event"] == "revoke" and first["author_id"] == agent_id and "recovery" in first
    capsys.readouterr()
    assert cli.main(["agent", "revoke", "keeper", "--data", str(data), "--key", first["key"], "--yes", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["role"] == "recovery" and out["removed_key"] == first["key"] and out["signer"] == first["recovery"]
    assert len(key_events(data)) == 2
    assert cli.main(["agent", "revoke", "keeper", "--data", str(data), "--key", agent_id, "--yes"]) == 1
    assert "key_not_current" in capsys.readouterr().err


def test_bbs_agent_recover_needs_a_recovery_key_then_takes_the_agent_back(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], node_store: Callable[[], str | None]
) -> None:
    data, _ = made(tmp_path, capsys, node_store())
    assert cli.main(["agent", "recover", "keeper", "--data", str(data), "--yes"]) == 1
    assert "no_recovery_key" in capsys.readouterr().err
    assert cli.main(["agent", "rotate-signing-key", "keeper", "--data", str(data), "--json"]) == 0
    rotated = json.loads(capsys.readouterr().out)
    assert cli.main(["agent", "recover", "keeper", "--data", str(data), "--yes", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["event_kind"] == "recover" and out["removed_key"] == rotated["signing_key"]
    assert out["key_history"]["current_key"] == out["signing_key"]
    assert [e["event"] for e in key_events(data)] == ["rotate", "recover"]


def test_revoke_and_recover_refuse_a_folder_a_node_serves(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], node_store: Callable[[], str | None]
) -> None:
    data, _ = made(tmp_path, capsys, node_store())
    lock = datalock.hold(data)
    try:
        assert cli.main(["agent", "revoke", "keeper", "--data", str(data), "--yes"]) != 0
        assert "/revocation" in capsys.readouterr().err
        assert cli.main(["agent", "recover", "keeper", "--data", str(data), "--yes"]) != 0
        assert "/recovery" in capsys.readouterr().err
    finally:
        lock.close()
    assert key_events(data) == []


def _subparser(parser: Any, *path: str) -> Any:
    for name in path:
        action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        parser = action.choices[name]
    return parser


@pytest.mark.parametrize(
    "path",
    [
        ("agent", "rotate-signing-key"),
        ("agent", "revoke"),
        ("agent", "recover"),
        ("agent", "export"),
        ("agent", "import"),
        ("node", "rotate-key"),
        ("mcp",),
    ],
)
def test_every_argument_of_the_identity_lifecycle_commands_says_what_it_is(path: tuple[str, ...]) -> None:
    """Issue 36's interfaces: each argument of these commands has its help text (`bbs agent export --help` named
    neither `name` nor `--out`)."""
    parser = _subparser(cli.build_parser(), *path)
    silent = [a.dest for a in parser._actions if not a.help]
    assert silent == [], f"bbs {' '.join(path)}: arguments without help: {silent}"
    usage = parser.format_help()
    if path[-1] in ("export", "import"):
        assert "key history" in usage  # an identity file carries the current key and the history
