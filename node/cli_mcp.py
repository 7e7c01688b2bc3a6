"""`bbs mcp`, `bbs agent export`, `bbs agent import` and the remote MCP switch of `bbs serve`.

Kept beside node/cli.py so the composition root only registers them.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import os
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from node.agents import AGENT_NAME
from node.datadir import CommandError

EXIT_ERROR = 1


def _fail(message: str) -> int:
    print(f"bbs: {message}", file=sys.stderr)
    return EXIT_ERROR


def _friendly(fn: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
    """Report identity file problems as `bbs: identity_file: ...` lines with exit status 1.

    Every other error a command lets through (CommandError, BBSError, OSError, ...) is reported by node.cli.main.
    """

    @functools.wraps(fn)
    def run(args: argparse.Namespace) -> int:
        from agent.identity_file import IdentityFileError

        try:
            return fn(args)
        except IdentityFileError as exc:
            return _fail(f"identity_file: {exc}")

    return run


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


def _passphrase(var: str | None) -> str | None:
    if var is None:
        return None
    value = os.environ.get(var)
    if not value:
        raise CommandError(f"the environment variable {var} (the passphrase) is not set")
    return value


@_friendly
def cmd_mcp(args: argparse.Namespace) -> int:
    """Run the stdio MCP server for one agent."""
    from agent import identity_file
    from agent.client import Client
    from agent.mcp_server import run_stdio

    check_node_url(args.node)
    api_key = os.environ.get("BBS_API_KEY") or None
    signing_key = None
    if args.identity is not None:
        signing_key = identity_file.load(args.identity.expanduser(), _passphrase(args.passphrase_env)).key
    if api_key is None and signing_key is None:
        return _fail("give --identity FILE or set BBS_API_KEY")
    asyncio.run(run_stdio(Client(args.node, api_key=api_key, signing_key=signing_key)))
    return 0


@_friendly
def cmd_agent_export(args: argparse.Namespace) -> int:
    """Write an agent's identity file (private key included, mode 0600)."""
    from agent import identity_file
    from node.datadir import require_node
    from node.portable import export_identity
    from node.service import Node

    if args.out.is_dir():
        raise CommandError(f"--out {args.out} is a folder; give the identity file's name")
    passphrase = _passphrase(args.passphrase_env)
    require_node(args.data)
    node = Node(args.data)

    async def run() -> tuple[Any, dict[str, Any]]:
        node.open()
        try:
            return await export_identity(node, args.name)
        finally:
            node.close()

    key, record = asyncio.run(run())
    ident = identity_file.Identity(
        key=key,
        display_name=record["display_name"],
        description=record.get("description", ""),
        home_node=record.get("home_node"),
        identity_record=record,
    )
    identity_file.save(args.out, ident, passphrase)
    print(f"Wrote {args.out} (mode 0600) for {key.did}{' (encrypted)' if passphrase else ''}")
    return 0


def _default_name(display_name: str) -> str:
    slug = re.sub(r"[^a-z0-9_-]+", "-", display_name.lower()).strip("-_")[:64]
    return slug or "agent"


@_friendly
def cmd_agent_import(args: argparse.Namespace) -> int:
    """Register an identity file's agent on this node; print its new API key."""
    from agent import identity_file
    from node.datadir import require_node
    from node.portable import import_identity
    from node.service import Node

    ident = identity_file.load(args.file, _passphrase(args.passphrase_env))
    name = args.name or _default_name(ident.display_name)
    if not AGENT_NAME.fullmatch(name):
        return _fail(f"--name must match {AGENT_NAME.pattern}")
    require_node(args.data)  # never creates a node: only init and serve do
    node = Node(args.data)

    async def run() -> Any:
        node.open()
        try:
            return await import_identity(node, name, ident.key, ident.identity_record, keep_key=args.keep_key)
        finally:
            node.close()

    created = asyncio.run(run())
    if args.json:
        import msgspec

        print(msgspec.json.encode(created).decode())
    else:
        print(f"name:     {created.name}")
        print(f"agent_id: {created.agent_id}")
        print(f"api_key:  {created.api_key}  (shown once)")
        print("key:      " + ("kept by this node" if args.keep_key else "held by the agent (identity file)"))
    return 0


def register(sub: Any, agent: Any) -> None:
    """Add the subcommands to `bbs` (sub: the top-level subparsers; agent: `bbs agent`'s subparsers)."""
    data_default = Path(os.environ.get("BBS_DATA", "bbs-data"))

    p = sub.add_parser("mcp", help="run the MCP server (stdio) for one agent")
    p.add_argument("--node", default=os.environ.get("BBS_NODE", "http://127.0.0.1:8420"), help="node URL")
    p.add_argument("--identity", type=Path, help="identity file (else the API key in $BBS_API_KEY)")
    p.add_argument("--passphrase-env", metavar="VAR", help="environment variable holding the file's passphrase")
    p.set_defaults(func=cmd_mcp)

    p = agent.add_parser("export", help="write an agent's identity file (private key; mode 0600)")
    p.add_argument("name")
    p.add_argument("--data", type=Path, default=data_default)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--passphrase-env", metavar="VAR", help="encrypt the key with the passphrase in this variable")
    p.set_defaults(func=cmd_agent_export)

    p = agent.add_parser("import", help="register an identity file's agent on this node")
    p.add_argument("file", type=Path)
    p.add_argument("--data", type=Path, default=data_default)
    p.add_argument("--name", help="local name (default: from the display name)")
    p.add_argument("--keep-key", action="store_true", help="let this node keep the key and sign for the agent")
    p.add_argument("--passphrase-env", metavar="VAR")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_agent_import)


def enable_remote_mcp(app: Any, node: Any, mcp_port: int | None, host: str, port: int) -> str | None:
    """Called by `bbs serve` after building the app: start remote MCP if the config names an mcp_port.

    Returns the line to print once the node serves (None without remote MCP).
    """
    if mcp_port is None:
        return None
    from node import agent_auth, mcp_http

    rest_host = "127.0.0.1" if host in ("0.0.0.0", "::", "") else host
    mcp_http.enable(
        app,
        authenticate=agent_auth.authenticator(node),
        rest_url=f"http://{rest_host}:{port}",
        host=host,
        port=mcp_port,
    )
    return f"MCP (streamable HTTP) at http://{host}:{mcp_port}{mcp_http.MCP_PATH}"
