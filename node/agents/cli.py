"""`bbs agent revoke` and `bbs agent recover`: a node-kept agent's revocation and recovery on its data folder
(node/agents/recovery.py does the work, as the admin routes `POST /v1/agents/{agent_id}/revocation` and
`/recovery` do on a serving node).

With `--identity FILE` (and `--node URL`) they change an identity the agent holds instead, through that node's
REST API (agent/key_cli.py, passed in by the composition root `node.cli`).

Like `bbs agent rotate-signing-key`, they refuse a folder a node serves (its writer caches the key histories and
the agent's key: rotate through its REST routes). Each first says what it would sign (the key it takes authority
from, how many of that key's records it vouches for: every other record of that key becomes void on every node)
and asks for confirmation; `--yes` skips the question (scripts).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

import msgspec

if TYPE_CHECKING:
    from node.service import Node
    from wire.api import KeyChange

T = TypeVar("T")

REVOKE_HELP = """\
Revoke a node-kept agent's current signing key and install a new one the node keeps; the agent's id stays.
No date is given: the revocation vouches for every record of the key this node holds (shown before it signs),
and every other record signed by that key is void on every node that stores the revocation, whatever date it
claims. It is signed by the node's agent recovery key (agent-recovery.key in the data folder; keep a copy
offline). An agent whose history has no recovery key yet is revoked by its current key, which sets the node's
recovery key: without a recovery key (or a next-key commitment) the owner ties with a thief holding that key
on rank, and the smaller hash of the two events decides (docs/format-v3.md 3.4). Rotate early
(bbs agent rotate-signing-key) so the recovery key is set before a key is ever stolen."""

RECOVER_HELP = """\
Take a node-kept agent back with the node's agent recovery key: a recover event after the key event that
installed the key this node keeps replaces every key event after it (a thief's rotation included) and installs
a new key; records of the keys those events installed become void."""


def _refuse_served(data: Path, route: str, agent: str) -> None:
    from node.ops import datalock
    from node.ops.datadir import CommandError

    if data.is_dir() and datalock.in_use(data):
        raise CommandError(
            f"a node serves {data}: use its route instead (POST /v1/agents/{agent}/{route} with the admin token)"
        )


def _with_node(data: Path, act: Callable[[Node], Awaitable[T]]) -> T:
    from node.ops.datadir import require_node
    from node.service import Node

    require_node(data)
    node = Node(data)

    async def run() -> T:
        node.open(search_index=False)
        try:
            return await act(node)
        finally:
            node.close()

    return asyncio.run(run())


def _confirm(plan: KeyChange, yes: bool, ask: Callable[[str], str]) -> bool:
    what = "revoke" if plan.event_kind == "revoke" else "recover"
    print(f"agent:      {plan.name} ({plan.agent_id})", file=sys.stderr)
    print(f"removes:    {plan.removed_key}", file=sys.stderr)
    print(f"vouches for {plan.vouched} records of that key this node holds; every other record it signed is void",
          file=sys.stderr)  # fmt: skip
    if plan.replaced_events:
        print(f"replaces:   {plan.replaced_events} key events after that key", file=sys.stderr)
    print(f"signed by:  {plan.signer} ({plan.role} key)", file=sys.stderr)
    if plan.role == "current":
        print(
            "warning:    no recovery key yet: a thief holding the current key ties with this revocation on rank and"
            " the smaller hash decides; this event sets the node's recovery key",
            file=sys.stderr,
        )
    if yes:
        return True
    if not sys.stdin.isatty():
        print(f"bbs: not a terminal: give --yes to {what} without asking", file=sys.stderr)
        return False
    return ask(f"{what}? [y/N] ").strip().lower() in ("y", "yes")


Held = Callable[[argparse.Namespace, str], int]  # runs a command for an identity file (agent/key_cli.py)


def _change_command(
    args: argparse.Namespace, route: str, act: Callable[[Node, bool], Awaitable[KeyChange]], ask: Callable[[str], str]
) -> int:
    from node.ops.datadir import CommandError

    if getattr(args, "identity", None) is not None:
        held: Held = args.held
        return held(args, "revoke" if route == "revocation" else "recover")
    if args.agent is None:
        raise CommandError("give the agent's NAME (a node-kept agent) or --identity FILE (an agent holding its key)")
    _refuse_served(args.data, route, args.agent)

    async def run(node: Node) -> KeyChange | None:
        plan = await act(node, True)
        if not _confirm(plan, args.yes, ask):
            return None
        return await act(node, False)

    done = _with_node(args.data, run)
    if done is None:
        print("nothing was signed", file=sys.stderr)
        return 1
    if args.json:
        print(msgspec.json.encode(done).decode())
    else:
        print(f"agent_id:    {done.agent_id}")
        print(f"signing_key: {done.signing_key}  (kept by this node)")
        print(f"key_event:   {done.event}  ({done.event_kind}, vouches for {done.vouched} records)")
    return 0


def cmd_agent_revoke(args: argparse.Namespace, ask: Callable[[str], str] = input) -> int:
    """`bbs agent revoke NAME [--key K] [--yes]` (see REVOKE_HELP)."""
    return _change_command(
        args, "revocation", lambda node, dry: node.recovery.revoke(args.agent, args.key, dry_run=dry), ask
    )


def cmd_agent_recover(args: argparse.Namespace, ask: Callable[[str], str] = input) -> int:
    """`bbs agent recover NAME [--yes]` (see RECOVER_HELP)."""
    return _change_command(args, "recovery", lambda node, dry: node.recovery.recover(args.agent, dry_run=dry), ask)


def add_parsers(
    agent: argparse._SubParsersAction,
    data_arg: Callable[[argparse.ArgumentParser], None],
    held_flags: Callable[[argparse.ArgumentParser, bool], None] | None = None,
    held: Held | None = None,
) -> None:
    """Add `revoke` and `recover` to `bbs agent`; with `held_flags` and `held` (given by the `bbs` composition root,
    which alone may import the agent side) also their `--identity FILE` form."""
    p = agent.add_parser(
        "revoke",
        help="revoke a node-kept agent's signing key and install a new one (recovery key; no date)",
        description=REVOKE_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("agent", nargs="?", help="the agent's local name or did:key (a node-kept agent)")
    data_arg(p)
    p.add_argument("--key", help="the key to revoke: must be the agent's current signing key (a check)")
    p.add_argument("--yes", action="store_true", help="do not ask for confirmation")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    if held_flags is not None:
        held_flags(p, True)
    p.set_defaults(func=cmd_agent_revoke, held=held)

    p = agent.add_parser(
        "recover",
        help="take a node-kept agent back with the node's recovery key; a new key, the thief's events replaced",
        description=RECOVER_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("agent", nargs="?", help="the agent's local name or did:key (a node-kept agent)")
    data_arg(p)
    p.add_argument("--yes", action="store_true", help="do not ask for confirmation")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    if held_flags is not None:
        held_flags(p, True)
    p.set_defaults(func=cmd_agent_recover, held=held)
