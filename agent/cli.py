"""`bbs mcp` and what the agent side's commands share: the node URL check and the passphrase variable.

Registered on the `bbs` parser by node/cli.py (the composition root). Errors are raised, never printed: a
CommandError or an IdentityFileError becomes one `bbs: ...` line with exit status 1 in node.cli.main.
"""

from __future__ import annotations

import argparse
import asyncio
import os
from pathlib import Path
from typing import Any

from wire.cli import CommandError


def check_node_url(url: str, what: str = "--node", where: str = "") -> str:
    """Refuse a node URL the client could not call: it must be http(s)://host[:port][/path], nothing more.

    Returns the URL; raises CommandError naming `what` (the flag or config key it came from) and `where` (its file).
    """
    from yarl import URL

    problem = None
    try:
        parsed = URL(url)
        port = parsed.port
    except (ValueError, UnicodeError, TypeError):
        parsed, port, problem = None, None, "it cannot be parsed"
    if parsed is not None:
        if parsed.scheme not in ("http", "https") or not parsed.raw_host:
            problem = "it must look like http://HOST:PORT or https://HOST"
        elif parsed.user is not None or parsed.password is not None:
            problem = "it cannot carry a user name or password"
        elif not port:
            problem = "its port must be 1 to 65535"
        elif parsed.raw_query_string or parsed.raw_fragment:
            problem = "it cannot have a query or a fragment"
    if problem is not None:
        shown = "" if "@" in url else f" {url!r}"  # a URL with user info may hold a password: never echoed
        raise CommandError(f"{what}{shown}{f' in {where}' if where else ''} is not a node URL: {problem}")
    return url


def passphrase(var: str | None) -> str | None:
    """The passphrase held in the environment variable `var` (None without one); CommandError if it is unset."""
    if var is None:
        return None
    value = os.environ.get(var)
    if not value:
        raise CommandError(f"the environment variable {var} (the passphrase) is not set")
    return value


def cmd_mcp(args: argparse.Namespace) -> int:
    """Run the stdio MCP server for one agent."""
    from agent import identity_file
    from agent.client import Client
    from agent.mcp_server import run_stdio

    check_node_url(args.node)
    api_key = os.environ.get("BBS_API_KEY") or None
    path = args.identity.expanduser() if args.identity is not None else None
    secret = passphrase(args.passphrase_env) if path is not None else None
    if path is not None:
        identity_file.load(path, secret)  # checked now: a bad file or passphrase is a one-line error, not a crash
    if api_key is None and path is None:
        raise CommandError("give --identity FILE or set BBS_API_KEY")
    memory = args.memory.expanduser() if args.memory is not None else None
    if memory is not None and not memory.is_file():
        raise CommandError(f"--memory {memory}: no such file (the reference runtime's memory file)")
    # the client signs with the file's current key and re-reads the file when it is rotated (its mtime changes)
    client = Client(args.node, api_key=api_key, identity_file=path, passphrase=secret)
    asyncio.run(run_stdio(client, memory))
    return 0


def register(sub: Any) -> None:
    """Add `bbs mcp` to the top-level subparsers `sub`."""
    p = sub.add_parser("mcp", help="run the MCP server (stdio) for one agent")
    p.add_argument("--node", default=os.environ.get("BBS_NODE", "http://127.0.0.1:8420"), help="node URL")
    p.add_argument("--identity", type=Path, help="identity file (else the API key in $BBS_API_KEY)")
    p.add_argument("--passphrase-env", metavar="VAR", help="environment variable holding the file's passphrase")
    p.add_argument("--memory", type=Path, metavar="PATH", help="the reference runtime's working-memory file")
    p.set_defaults(func=cmd_mcp)
