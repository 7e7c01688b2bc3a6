"""agent/key_flags.py: the flags of the key commands for an identity file, and a parser built without the REST
client (agent/key_cli.py runs the commands: tests/agent/test_key_cli.py)."""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import pytest

from agent.key_flags import add_flags


def test_recovery_adds_the_recovery_key_flag_and_only_then() -> None:
    rotate, recover = argparse.ArgumentParser(), argparse.ArgumentParser()
    add_flags(rotate, recovery=False)
    add_flags(recover, recovery=True)
    args = recover.parse_args(["--identity", "a.id", "--recovery-key", "r.key", "--passphrase-env", "PW"])
    assert (args.identity, args.recovery_key, args.passphrase_env, args.node) == (
        Path("a.id"),
        Path("r.key"),
        "PW",
        None,
    )
    with pytest.raises(SystemExit):
        rotate.parse_args(["--identity", "a.id", "--recovery-key", "r.key"])


def test_the_flags_import_neither_the_rest_client_nor_aiohttp() -> None:
    probe = "import sys, agent.key_flags; print(sorted(m for m in ('aiohttp', 'agent.client') if m in sys.modules))"
    found = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True)
    assert found.stdout.strip() == "[]", found.stdout + found.stderr
