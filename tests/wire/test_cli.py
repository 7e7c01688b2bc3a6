"""wire.cli: CommandError, the one-line error every `bbs` subcommand raises (node side and agent side alike),
which node.cli.main prints as `bbs: <message>` with exit status 1, changing nothing."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent import cli as agent_cli
from node import cli
from node.ops import datadir
from wire.cli import CommandError


def test_a_command_error_is_an_exception_carrying_its_message() -> None:
    error = CommandError("the data folder is missing")
    assert isinstance(error, Exception)
    assert str(error) == "the data folder is missing"
    with pytest.raises(CommandError, match="missing"):
        raise error


def test_the_node_and_agent_sides_raise_the_same_class() -> None:
    """node.ops.datadir re-exports it and agent.cli raises it: node.cli.main catches one class for both."""
    assert datadir.CommandError is CommandError
    assert agent_cli.CommandError is CommandError
    with pytest.raises(CommandError, match="not a node URL"):
        agent_cli.check_node_url("ftp://example.org")
    with pytest.raises(CommandError, match="BBS_TEST_NO_SUCH_VARIABLE"):
        agent_cli.passphrase("BBS_TEST_NO_SUCH_VARIABLE")


def test_main_prints_one_line_and_exits_1(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    code = cli.main(["agent", "create", "alice", "--data", str(empty)])
    captured = capsys.readouterr()
    assert code == cli.EXIT_ERROR == 1
    assert captured.out == ""
    assert (
        captured.err
        == f"bbs: {empty} holds no node; run 'bbs init --data {empty}' (or 'bbs serve --data {empty}') first\n"
    )
    assert not (empty / "bbs.db").exists() and not (empty / "node.key").exists()  # changed nothing


def test_explain_maps_a_command_error_to_its_message_and_status_1() -> None:
    assert cli.explain(CommandError("no such agent: bob")) == ("no such agent: bob", 1)
