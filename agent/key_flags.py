"""The flags of `bbs agent rotate-signing-key`, `revoke` and `recover` with `--identity FILE` (agent/key_cli.py runs
them): kept apart so that building the `bbs` parser imports neither the REST client nor aiohttp."""

from __future__ import annotations

import argparse
from pathlib import Path


def add_flags(parser: argparse.ArgumentParser, *, recovery: bool) -> None:
    """The flags of a held identity's key command (`--identity` selects it)."""
    parser.add_argument("--identity", type=Path, help="the agent's identity file: change it through --node instead")
    parser.add_argument("--node", help="node URL for --identity (default: $BBS_NODE or http://127.0.0.1:8420)")
    parser.add_argument("--api-key", dest="api_key", default=None, help="with --identity: authenticate by API key")
    parser.add_argument("--passphrase-env", metavar="VAR", help="with --identity: the file's passphrase variable")
    if recovery:
        parser.add_argument("--recovery-key", type=Path, help="with --identity: the recovery key file"
                            " (default: the identity file's name + .recovery.key)")  # fmt: skip
