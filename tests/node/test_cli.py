"""The `bbs` CLI contract scripts rely on: init, agent create (--json, BBS_DATA), one-line errors."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path


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
