"""`bbs mcp` and the checks the agent side's commands share (agent/cli.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent import identity_file
from agent.cli import check_node_url, passphrase
from node.cli import main
from tests.agent.test_identity_file import make_identity
from wire.cli import CommandError


def test_bbs_mcp_refuses_to_start_without_a_usable_credential(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("BBS_API_KEY", raising=False)
    assert main(["mcp", "--node", "http://127.0.0.1:9"]) == 1
    assert "BBS_API_KEY" in capsys.readouterr().err
    path = tmp_path / "sealed.id"
    identity_file.save(path, make_identity(), "right")
    monkeypatch.setenv("PW", "wrong")
    assert main(["mcp", "--identity", str(path), "--passphrase-env", "PW"]) == 1
    err = capsys.readouterr().err
    assert "wrong passphrase" in err and "right" not in err


def test_bbs_mcp_refuses_a_memory_file_that_does_not_exist(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("BBS_API_KEY", "bbs_0123456789abcdef_secret")
    missing = tmp_path / "memory.sqlite"
    assert main(["mcp", "--node", "http://127.0.0.1:9", "--memory", str(missing)]) == 1
    assert "--memory" in capsys.readouterr().err and not missing.exists()


def test_check_node_url_names_the_setting_and_its_file() -> None:
    assert check_node_url("https://bbs.example.org/base") == "https://bbs.example.org/base"
    assert check_node_url("http://127.0.0.1:8420") == "http://127.0.0.1:8420"
    with pytest.raises(CommandError, match=r"^node.url 'ftp://x' in agent-config.yaml is not a node URL"):
        check_node_url("ftp://x", "node.url", "agent-config.yaml")
    with pytest.raises(CommandError, match="user name or password") as refused:
        check_node_url("http://me:hunter2@127.0.0.1:8420")
    assert "hunter2" not in str(refused.value)


def test_passphrase_comes_from_a_set_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    assert passphrase(None) is None
    monkeypatch.setenv("BBS_TEST_PW", "s3cret")
    assert passphrase("BBS_TEST_PW") == "s3cret"
    monkeypatch.setenv("BBS_TEST_PW", "")
    with pytest.raises(CommandError, match="BBS_TEST_PW"):
        passphrase("BBS_TEST_PW")
