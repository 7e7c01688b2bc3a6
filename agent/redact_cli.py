"""`bbs redact REF [--reason TEXT]`: take back a record of yours (or of a space you administer) for good, over REST
with --api-key / $BBS_API_KEY (or --identity, which signs the redaction record) and --node / $BBS_NODE, the flags of
the other agent commands (agent/people_cli.py). Registered on the `bbs` parser by node/cli.py."""

from __future__ import annotations

import argparse
from typing import Any

import msgspec

from agent.people_cli import common_flags, run
from wire.redaction import RedactionOut


def describe(out: RedactionOut) -> str:
    """One line for a person: what the node did."""
    if out.pending:
        return f"redaction {out.redaction} stored: {out.target} is not on this node; its body is refused if it comes"
    if not out.created:
        return f"{out.target} was already redacted (by {out.redaction})"
    return f"redacted {out.target}: its body is gone from this node (redaction {out.redaction})"


def cmd_redact(args: argparse.Namespace) -> int:
    """Redact one record and print the outcome."""
    out = run(args, lambda client: client.redact(args.ref, args.reason))
    print(msgspec.json.encode(out).decode() if args.json else describe(out))
    return 0


def register(sub: Any) -> None:
    """Add `bbs redact` to the top-level subparsers `sub`."""
    p = sub.add_parser(
        "redact",
        help="take back an entry, link or message for good: its body leaves this node, a tombstone stays",
    )
    p.add_argument("ref", help="the record's hash (an entry: its hash or local id)")
    p.add_argument("--reason", help="why (1 to 1,024 characters; kept in the signed redaction)")
    common_flags(p)
    p.set_defaults(func=cmd_redact)
