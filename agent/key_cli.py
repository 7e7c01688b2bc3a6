"""`bbs agent rotate-signing-key`, `revoke` and `recover` with `--identity FILE`: the same changes for an agent
that holds its own identity file, made through a node's REST API by `agent.client.Client` (agent/key_lifecycle.py
builds the events). The commands without `--identity` work on a node's data folder (node/agents/cli.py).

`rotate-signing-key --identity FILE` writes `FILE.recovery.key` beside the file at the identity's first rotation
(move it offline); `revoke` and `recover` read the recovery key from `--recovery-key` (default: that file). Each
rewrites the identity file atomically with the new key.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from collections.abc import Callable
from pathlib import Path

import msgspec

from agent import identity_file, key_lifecycle
from agent.cli import check_node_url, passphrase
from agent.client import BBSClientError, Client
from identity import key_files, keys
from wire.api import KeyEventOut

DEFAULT_NODE = "http://127.0.0.1:8420"


class KeyCommandError(Exception):
    """A held-identity key command could not run; the message is one line for `bbs: ...`."""


def _recovery_key(args: argparse.Namespace, identity: Path) -> keys.SigningKey:
    path = args.recovery_key or key_lifecycle.recovery_key_path(identity)
    if not path.exists():
        raise KeyCommandError(f"no recovery key at {path}: give --recovery-key FILE (the key you keep offline)")
    return key_files.load_key(path)


def _confirm(what: str, count: int, yes: bool, ask: Callable[[str], str]) -> bool:
    print(f"vouches for {count} records of the key the node holds; every other record that key signed is void",
          file=sys.stderr)  # fmt: skip
    if yes:
        return True
    if not sys.stdin.isatty():
        print(f"bbs: not a terminal: give --yes to {what} without asking", file=sys.stderr)
        return False
    return ask(f"{what}? [y/N] ").strip().lower() in ("y", "yes")


def run_held(args: argparse.Namespace, action: str, ask: Callable[[str], str] = input) -> int:
    """Rotate, revoke or recover the identity of `args.identity` through the node at `args.node`."""
    identity = args.identity.expanduser()
    secret = passphrase(args.passphrase_env)
    identity_file.load(identity, secret)  # a bad file or passphrase: one line, before any request
    node = check_node_url(args.node or os.environ.get("BBS_NODE") or DEFAULT_NODE)
    recovery = _recovery_key(args, identity) if action in ("revoke", "recover") else None

    def confirm(count: int) -> bool:
        return _confirm(action, count, args.yes, ask)

    async def go() -> KeyEventOut:
        async with Client(node, identity_file=identity, passphrase=secret, api_key=args.api_key) as client:
            if action == "rotate":
                return await client.rotate_signing_key()
            assert recovery is not None
            if action == "revoke":
                current = client.signing_key
                if args.key is not None and args.key != current:
                    raise KeyCommandError(f"--key {args.key} is not the identity file's signing key ({current})")
                return await client.revoke_signing_key(recovery, confirm)
            return await client.recover(recovery, confirm)

    try:
        out: KeyEventOut | None = asyncio.run(go())
    except BBSClientError as exc:
        if exc.code != "not_confirmed":
            raise KeyCommandError(f"{exc.code}: {exc.detail}") from None
        out = None
    if out is None:
        print("nothing was signed", file=sys.stderr)
        return 1
    if args.json:
        print(msgspec.json.encode(out).decode())
    else:
        print(f"agent_id:    {identity_file.load(identity, secret).did}")
        print(f"signing_key: {out.key_history.current_key}  (written to {identity})")
        print(f"key_event:   {out.address}")
        if action == "rotate" and key_lifecycle.recovery_key_path(identity).exists():
            print(f"recovery:    {key_lifecycle.recovery_key_path(identity)}  (move it offline)")
    return 0
