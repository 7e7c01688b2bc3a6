"""The `bbs` command: the composition root. Each subcommand imports what it needs lazily."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import sys
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

if TYPE_CHECKING:
    import sqlite3

    from aiohttp import web

    from node.service import Node
    from wire.api import CreatedAgent

EXIT_USAGE = 2
EXIT_ERROR = 1
T = TypeVar("T")


def _data_arg(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--data",
        type=Path,
        default=Path(os.environ.get("BBS_DATA", "bbs-data")),
        help="data folder (default: $BBS_DATA or ./bbs-data)",
    )


def _store_arg(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--store",
        default=os.environ.get("BBS_STORE") or None,
        help="the node's PostgreSQL database, a postgresql:// URL (default: $BBS_STORE, else bbs.db in the folder)",
    )


def cmd_init(args: argparse.Namespace) -> int:
    from node.ops.datadir import initialise, join

    if args.join is not None:
        node_id = join(args.data, args.join, args.store)
        print(f"Joined {args.data} to node {node_id}, whose database {args.join}/store.url names")
        print(f"Serve it with 'bbs serve --data {args.data}'; the node's admin token is the one it was made with")
        return 0
    token = initialise(args.data, args.store)
    if token is None:
        print(f"{args.data} is already initialised; the admin token was shown when it was created.", file=sys.stderr)
        return 0
    print(f"Initialised node data in {args.data}")
    print(f"Admin token (shown once, keep it safe): {token}")
    return 0


MAX_REQUEST_LINE_BYTES = 64 * 1024
MAX_HEADER_BYTES = 16 * 1024


def _check_listen(host: str, port: int, what: str) -> None:
    """Refuse an address `bbs serve` could not listen on before anything starts (so no "serving" line first).

    A bind test, as asyncio's server binds (SO_REUSEADDR, IPv6 only on IPv6 sockets); the socket is closed
    again at once. Another process could still take the port before the node binds it: that failure is
    reported the same way by main().
    """
    import socket

    from node.ops.datadir import CommandError

    try:
        infos = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except (socket.gaierror, UnicodeError, OverflowError) as exc:
        reason = exc.strerror if isinstance(exc, socket.gaierror) else str(exc)
        raise CommandError(f"cannot listen on {host}:{port} ({what}): {reason}") from None
    for family, kind, proto, _name, address in infos:
        with socket.socket(family, kind, proto) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                probe.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            try:
                probe.bind(address)
            except OSError as exc:
                raise CommandError(f"cannot listen on {host}:{port} ({what}): {exc.strerror or exc}") from None


def _check_ports(host: str, port: int, metrics_host: str, metrics_port: int | None, mcp_port: int | None) -> None:
    """Refuse two listeners on one address: MCP shares the REST host; metrics only when the hosts can overlap.

    A configuration error (exit 2), whether the ports came from flags, BBS_* variables or the config file."""
    from node.ops.config import ConfigError

    wildcard = ("", "0.0.0.0", "::")
    listeners = [("--port", host, port), ("--mcp-port", host, mcp_port), ("--metrics-port", metrics_host, metrics_port)]
    for i, (flag, at, value) in enumerate(listeners):
        for other_flag, other_at, other in listeners[:i]:
            overlap = at == other_at or at in wildcard or other_at in wildcard
            if value and value == other and overlap:
                raise ConfigError(
                    f"{flag} and {other_flag} (or their BBS_* variables or config keys) are both {value};"
                    " each listener needs its own port"
                )


def _enable_remote_mcp(app: web.Application, node: Node, mcp_port: int | None, host: str, port: int) -> str | None:
    """Serve the agent tools over streamable HTTP on `mcp_port` while `app` runs (agent/mcp_http.py), the node
    authenticating each bearer token. Returns the line to print once the node serves (None without an mcp_port)."""
    if mcp_port is None:
        return None
    from agent import mcp_http
    from node.agents import sessions as agent_auth

    rest_host = "127.0.0.1" if host in ("0.0.0.0", "::", "") else host
    mcp_http.enable(
        app,
        authenticate=agent_auth.agent_authenticator(node),
        rest_url=f"http://{rest_host}:{port}",
        host=host,
        port=mcp_port,
    )
    return f"MCP (streamable HTTP) at http://{host}:{mcp_port}{mcp_http.MCP_PATH}"


def event_loop() -> asyncio.AbstractEventLoop:
    """The event loop `bbs serve` runs on: uvloop's where it is installed (every platform but Windows), else
    asyncio's. uvloop gave single posts 3-49% more per second in six alternating pairs (docs/decisions.md)."""
    try:
        import uvloop
    except ImportError:  # Windows, or an install without it
        return asyncio.new_event_loop()
    return uvloop.new_event_loop()


def cmd_serve(args: argparse.Namespace) -> int:
    from aiohttp import web

    from node.app import create_app
    from node.errors import Conflict
    from node.federation.routes import SyncSettings
    from node.ops import config as configuration
    from node.ops import datalock, logging_setup, metrics
    from node.ops.datadir import CommandError, initialise
    from node.push import routes as push_routes
    from node.service import Node
    from node.web.limits import RateLimit

    flags = {name: getattr(args, name, None) for name in configuration.FIELDS}
    config = configuration.load(args.config, flags)
    if args.print_config:
        print(configuration.to_toml(config), end="")
        return 0
    logging_setup.configure(config.log_format, config.log_level, access_log=config.access_log)
    data = Path(config.data)
    # Everything that can be refused is refused before the folder is created or changed.
    if data.is_dir() and datalock.in_use(data):
        raise Conflict(f"another bbs serve is running on {data}", code="data_in_use")
    _check_ports(config.host, config.port, config.metrics_host, config.metrics_port, config.mcp_port)
    _check_listen(config.host, config.port, "--port")
    if config.mcp_port is not None:
        _check_listen(config.host, config.mcp_port, "--mcp-port")
    if config.metrics_port is not None:
        _check_listen(config.metrics_host, config.metrics_port, "--metrics-port")
    # creates the node on first start (on PostgreSQL with `store`), else checks that node.key belongs to its database
    token = initialise(data, config.store or None)
    lock = datalock.hold(data)  # noqa: F841 (held until the process exits)
    if token is not None:
        print(f"Initialised node data in {data}")
        print(f"Admin token (shown once, keep it safe): {token}", flush=True)
    node = Node(data)
    node.reads.fresh_timeout_s = config.search_fresh_timeout_ms / 1000
    node.redactions.grace_s = config.redaction_grace_s
    node.retention_days = {
        "delivered_notifications": config.retain_delivered_notifications_days,
        "rejected_candidates": config.retain_rejected_candidates_days,
    }
    sync = SyncSettings(config.sync == "on", config.sync_wait_ms, config.reconcile_every_s, config.sync_min_poll_ms)
    limit = RateLimit(
        config.rate_limit_per_s, config.rate_limit_burst, config.anon_rate_limit_per_s, config.anon_rate_limit_burst
    )
    app = create_app(node, limit, sync)
    push_routes.configure(app, config.push_allowlist, config.host, (config.port, config.mcp_port, config.metrics_port))
    mcp_line = _enable_remote_mcp(app, node, config.mcp_port, config.host, config.port)
    if config.metrics_port is not None:
        metrics.serve_separately(app, config.metrics_host, config.metrics_port)

    def announce(_: str) -> None:
        """Called by aiohttp once the node is open and every listener is bound."""
        print(f"Node {node.node_id} serving http://{config.host}:{config.port}", flush=True)
        if mcp_line is not None:
            print(mcp_line, flush=True)
        print(f"Create an agent: bbs agent create NAME --data {data}", flush=True)

    try:
        web.run_app(
            app,
            loop=event_loop(),
            host=config.host,
            port=config.port,
            print=announce,
            handle_signals=True,
            access_log=None,
            shutdown_timeout=config.shutdown_timeout,
            # aiohttp answers a request line or header beyond these in plain text before the app sees it; the
            # defaults (8 KiB) are below the longest query the API documents, so they are raised past it.
            max_line_size=MAX_REQUEST_LINE_BYTES,
            max_field_size=MAX_HEADER_BYTES,
        )
    except RuntimeError as exc:  # e.g. the MCP port taken between _check_listen and the bind
        from agent.mcp_http import McpStartError  # loaded already if it is one: only --mcp-port imports it

        if not isinstance(exc, McpStartError):
            raise
        raise CommandError(str(exc)) from None
    return 0


def _on_node(data: Path, act: Callable[[Node], Awaitable[T]]) -> T:
    """Run `act` on the data folder's node (served elsewhere or not); never creates a node: only init and serve do.

    The node is opened without its search index: `act` searches nothing, and a serving node holds the index."""

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


def _agent_key_command(args: argparse.Namespace, act: Callable[[Node], Awaitable[CreatedAgent]]) -> int:
    """Run `act` on the data folder's node (served elsewhere or not) and print the agent id and its API key."""
    import msgspec

    created = _on_node(args.data, act)
    if args.json:
        print(msgspec.json.encode(created).decode())
    else:
        print(f"agent_id: {created.agent_id}")
        print(f"api_key:  {created.api_key}  (shown once)")
    return 0


def cmd_agent_create(args: argparse.Namespace) -> int:
    return _agent_key_command(
        args, lambda node: node.agents.create(args.name, args.display_name, args.description, args.agent_type)
    )


def cmd_agent_list(args: argparse.Namespace) -> int:
    """The agents the data folder's node knows, a page at a time: GET /v1/agents's read (node/agents/service.py
    `list_agents`) on the database alone, safe beside a running node, as `bbs peers` reads."""
    from agent import people_format as fmt
    from agent.people_cli import checked_flags, show_page
    from node.agents import service as agents
    from node.ops.datadir import DataDir, require_node
    from node.store import db
    from wire.api import AgentListQuery

    query = checked_flags({"local": args.local, "limit": args.limit, "after": args.after}, AgentListQuery)
    require_node(args.data)
    page = db.read_sync(DataDir(args.data).store, lambda c: agents.list_agents(c, query))
    empty = f"no agents; create one with: bbs agent create NAME --data {args.data}"
    more = f"more: --after {page.next_after}" if page.next_after is not None else None
    show_page(args, page, page.agents, fmt.agents_table, empty, more)
    return 0


def cmd_agent_rotate_key(args: argparse.Namespace) -> int:
    code = _agent_key_command(args, lambda node: node.agents.rotate_api_key(args.agent))
    if not args.json:
        print("its previous API keys no longer work (a running node may accept one it checked in the last 60 s)")
    return code


def _held_flags(parser: argparse.ArgumentParser, recovery: bool) -> None:
    from agent import key_flags

    key_flags.add_flags(parser, recovery=recovery)


def _held_key_command(args: argparse.Namespace, action: str) -> int:
    """A key command for an identity file (`--identity`), made through a node's REST API (agent/key_cli.py)."""
    from agent import key_cli
    from node.ops.datadir import CommandError

    try:
        return key_cli.run_held(args, action)
    except key_cli.KeyCommandError as exc:
        raise CommandError(str(exc)) from None


def cmd_agent_rotate_signing_key(args: argparse.Namespace) -> int:
    """Rotate a node-kept agent's signing key (`POST /v1/agents/{agent_id}/signing-key`'s work) on a data folder no
    node serves: a serving node keeps the agent's key and its key histories in memory, so it must make the change.
    With `--identity FILE`, rotate the key of an identity the agent holds through a node's REST API instead."""
    import msgspec

    from node.ops import datalock
    from node.ops.datadir import CommandError

    if args.identity is not None:
        return _held_key_command(args, "rotate")
    if args.agent is None:
        raise CommandError("give the agent's NAME (a node-kept agent) or --identity FILE (an agent holding its key)")

    if args.data.is_dir() and datalock.in_use(args.data):  # its writer's key histories must see every key event
        raise CommandError(
            f"a node serves {args.data}: rotate through it (POST /v1/agents/{args.agent}/signing-key with the admin"
            " token), so it signs with the new key at once"
        )
    rotated = _on_node(args.data, lambda node: node.key_events.rotate(args.agent))
    if args.json:
        print(msgspec.json.encode(rotated).decode())
    else:
        print(f"agent_id:    {rotated.agent_id}")
        print(f"signing_key: {rotated.signing_key}  (kept by this node; the previous key no longer signs)")
        print(f"key_event:   {rotated.event}  (vouches for {rotated.vouched} records of the previous key)")
    return 0


def cmd_agent_export(args: argparse.Namespace) -> int:
    """Write an agent's identity file (private key included, mode 0600)."""
    from agent import identity_file
    from agent.cli import passphrase
    from node.agents.portable import export_identity
    from node.ops.datadir import CommandError

    if args.out.is_dir():
        raise CommandError(f"--out {args.out} is a folder; give the identity file's name")
    secret = passphrase(args.passphrase_env)
    out = _on_node(args.data, lambda node: export_identity(node, args.name))
    record = out.record
    ident = identity_file.Identity(
        key=out.key,
        display_name=record["display_name"],
        description=record.get("description", ""),
        home_node=record.get("home_node"),
        identity_record=record,
        agent_id=out.agent_id,
        key_history=out.key_history,
        vouch_pages=out.vouch_pages,
    )
    identity_file.save(args.out, ident, secret)
    rotated = f", signing key {out.key.did}" if out.key_history else ""
    print(f"Wrote {args.out} (mode 0600) for {out.agent_id}{rotated}{' (encrypted)' if secret else ''}")
    return 0


def _default_name(display_name: str) -> str:
    slug = re.sub(r"[^a-z0-9_-]+", "-", display_name.lower()).strip("-_")[:64]
    return slug or "agent"


def cmd_agent_import(args: argparse.Namespace) -> int:
    """Register an identity file's agent on this node; print its new API key."""
    import msgspec

    from agent import identity_file
    from agent.cli import passphrase
    from node.agents.portable import import_identity
    from node.agents.service import AGENT_NAME
    from node.ops import datalock
    from node.ops.datadir import CommandError

    ident = identity_file.load(args.file, passphrase(args.passphrase_env))
    if ident.key_history and args.data.is_dir() and datalock.in_use(args.data):  # as rotate-signing-key (record 55)
        raise CommandError(
            f"a node serves {args.data} and this identity has a key history: its writer must see every key event"
            " it stores, so stop the node to import the identity, then start it again"
        )
    name = args.name or _default_name(ident.display_name)
    if not AGENT_NAME.fullmatch(name):
        raise CommandError(f"--name must match {AGENT_NAME.pattern}")
    created = _on_node(
        args.data,
        lambda node: import_identity(
            node,
            name,
            ident.key,
            ident.identity_record,
            keep_key=args.keep_key,
            agent_id=ident.did,
            history=ident.key_history,
            pages=ident.vouch_pages,
        ),
    )
    if args.json:
        print(msgspec.json.encode(created).decode())
    else:
        print(f"name:     {created.name}")
        print(f"agent_id: {created.agent_id}")
        print(f"api_key:  {created.api_key}  (shown once)")
        print("key:      " + ("kept by this node" if args.keep_key else "held by the agent (identity file)"))
    return 0


def cmd_purge(args: argparse.Namespace) -> int:
    """`bbs purge REF | --author DID`: remove records from this node alone (node/redaction/service.py `purge`), safe
    beside a running node; prints the addresses purged, one a line (or JSON)."""
    import msgspec

    from node.ops.datadir import CommandError

    if (args.ref is None) == (args.author is None):
        raise CommandError("name a record hash or --author DID, not both")
    out = _on_node(args.data, lambda node: node.redactions.purge(args.ref, args.author, args.reason))
    if args.json:
        print(msgspec.json.encode(out).decode())
    else:
        print("\n".join(out.purged) if out.purged else "nothing of it is held here")
    return 0


def cmd_rebuild(args: argparse.Namespace) -> int:
    from node.features import LOG
    from node.ops.datadir import DataDir, require_node
    from node.ops.progress import Reporter
    from node.search_index import indexer as search_indexer
    from node.store import db, projections

    require_node(args.data)

    with Reporter() as progress:  # bars on a terminal, plain lines on stderr otherwise

        def run(conn: sqlite3.Connection) -> tuple[bool, int]:
            before = projections.snapshot(conn)
            count = projections.rebuild(conn, progress)
            return before == projections.snapshot(conn), count

        same, count = db.write_sync(DataDir(args.data).store, run, log=LOG)
        rebuilt = db.read_sync(DataDir(args.data).store, lambda conn: search_indexer.rebuild(args.data, conn))
    if rebuilt.repaired is not None:
        print(f"search index: {rebuilt.repaired}", file=sys.stderr)
    if rebuilt.status != "ok" or rebuilt.entries is None:
        print(f"search index: {rebuilt.detail}", file=sys.stderr)
    report = {
        "records_replayed": count,
        "projections_matched_log": same,
        "search_index_entries": rebuilt.entries,
        "search_index": rebuilt.status,
    }
    print(json.dumps(report))
    return 0 if same and rebuilt.status != "fail" else EXIT_ERROR


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="bbs", description="Agent BBS node and tools")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("init", help="create a node's key, database and admin token")
    _data_arg(p)
    _store_arg(p)
    p.add_argument(
        "--join",
        type=Path,
        metavar="FOLDER",
        help="instead, make --data the folder of another serving process of the node in FOLDER (PostgreSQL only):"
        " copies its store.url, node.key, agent-recovery.key and key-fence.json",
    )
    p.set_defaults(func=cmd_init)

    p = sub.add_parser("serve", help="run a node (settings: defaults < --config file < BBS_* environment < flags)")
    p.add_argument("--config", type=Path, help="a TOML config file (see docker/bbs.sample.toml)")
    p.add_argument("--data", help="data folder (default: $BBS_DATA or ./bbs-data)")
    p.add_argument("--store", help="the node's PostgreSQL database, a postgresql:// URL (default: bbs.db in --data)")
    p.add_argument("--host", help="listen address (default 127.0.0.1)")
    p.add_argument("--port", help="listen port (default 8420)")
    p.add_argument("--log-format", dest="log_format", help="text or json")
    p.add_argument("--log-level", dest="log_level", help="debug, info, warning or error")
    p.add_argument("--metrics-host", dest="metrics_host", help="address of the unauthenticated metrics listener")
    p.add_argument("--metrics-port", dest="metrics_port", help="port of the unauthenticated metrics listener")
    p.add_argument("--shutdown-timeout", dest="shutdown_timeout", help="seconds in-flight requests get on SIGTERM")
    p.add_argument("--mcp-port", dest="mcp_port", help="also serve MCP over streamable HTTP on this port (path /mcp)")
    p.add_argument("--print-config", action="store_true", help="print the effective configuration and exit")
    p.set_defaults(func=cmd_serve)

    agent = sub.add_parser("agent", help="manage agents").add_subparsers(dest="agent_command", required=True)
    p = agent.add_parser("create", help="create an agent whose key this node keeps; prints its id and API key")
    p.add_argument("name")
    _data_arg(p)
    p.add_argument("--display-name")
    p.add_argument("--description", default="")
    p.add_argument("--type", dest="agent_type", help="the agent's kind, written into its identity document")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=cmd_agent_create)

    p = agent.add_parser("list", help="list the agents this node knows (local names, dids, who keeps each key)")
    _data_arg(p)
    p.add_argument("--local", action="store_true", help="only agents registered on this node")
    p.add_argument("--limit", type=int, default=50, help="agents per page (at most 200)")
    p.add_argument("--after", metavar="DID", help="the page after this did (the previous page's last)")
    p.add_argument("--json", action="store_true", help="print one JSON object (GET /v1/agents's answer)")
    p.set_defaults(func=cmd_agent_list)

    p = agent.add_parser("rotate-key", help="give an agent a new API key; its previous keys stop working")
    p.add_argument("agent", help="the agent's local name or did:key")
    _data_arg(p)
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=cmd_agent_rotate_key)

    p = agent.add_parser(
        "rotate-signing-key",
        help="give a node-kept agent a new signing key (a key event signed by the old one); its id stays",
    )
    p.add_argument("agent", nargs="?", help="the agent's local name or did:key (a node-kept agent)")
    _data_arg(p)
    p.add_argument("--json", action="store_true", help="print one JSON object")
    _held_flags(p, False)
    p.set_defaults(func=cmd_agent_rotate_signing_key)
    from node.agents import cli as agents_cli  # bbs agent revoke, bbs agent recover

    agents_cli.add_parsers(agent, _data_arg, _held_flags, _held_key_command)

    from agent import cli as agent_cli  # bbs mcp
    from agent import people_cli  # bbs post, search, read, link, subscribe, inbox, ack, tail, tasks, message, task

    agent_cli.register(sub)
    people_cli.register(sub)
    from agent import push_cli  # bbs push

    push_cli.register(sub)
    from agent import space_cli  # bbs space

    space_cli.register(sub)
    from agent import redact_cli  # bbs redact

    redact_cli.register(sub)

    p = agent.add_parser(
        "export",
        help="write an agent's identity file (its current signing key and key history; mode 0600)",
        description="Write a node-kept agent's identity file: its current signing key (the rotated one after a key"
        " event), its identity document, and its key history with the vouch pages a node needs to check it"
        " (docs/format-v3.md 3). Another node imports it with bbs agent import.",
    )
    p.add_argument("name", help="the agent's local name (a node-kept agent)")
    _data_arg(p)
    p.add_argument("--out", type=Path, required=True, help="the identity file to write")
    p.add_argument("--passphrase-env", metavar="VAR", help="encrypt the key with the passphrase in this variable")
    p.set_defaults(func=cmd_agent_export)

    p = agent.add_parser(
        "import",
        help="register an identity file's agent on this node (with its key history)",
        description="Register an identity file's agent on this node under the same id: its key history and vouch"
        " pages are stored first, so a rotated identity signs with its current key; a file older than the history"
        " this node holds is refused (identity_key_outdated). With a key history, stop the node first.",
    )
    p.add_argument("file", type=Path, help="the identity file (bbs agent export, or the agent's own)")
    _data_arg(p)
    p.add_argument("--name", help="local name (default: from the display name)")
    p.add_argument("--keep-key", action="store_true", help="let this node keep the key and sign for the agent")
    p.add_argument("--passphrase-env", metavar="VAR", help="the environment variable holding the file's passphrase")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=cmd_agent_import)

    from agent.runtime import cli as runtime_cli  # bbs agent run, bbs agent init

    runtime_cli.register(agent)

    p = sub.add_parser(
        "purge",
        help="remove a record (or every entry, link and message of an author) from this node alone, for good",
    )
    p.add_argument("ref", nargs="?", help="the record's hash")
    p.add_argument("--author", help="purge every entry, link and bus message of this agent (did:key)")
    p.add_argument("--reason", help="why (kept on this node only; bbs doctor counts purges)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    _data_arg(p)
    p.set_defaults(func=cmd_purge)

    p = sub.add_parser("rebuild", help="rebuild every projection from the log and check it matches")
    _data_arg(p)
    p.set_defaults(func=cmd_rebuild)

    from node.ops import cli as ops_cli

    ops_cli.add_commands(sub)  # backup, restore, litestream-config, doctor, migrate-store, processes
    from node.federation import cli as peer_cli

    peer_cli.add_parsers(sub, _data_arg)  # peer add, peers, digest
    return parser


COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {}


def _one_line(text: str) -> str:
    return "; ".join(part.strip() for part in str(text).splitlines() if part.strip())


def _os_error(exc: OSError) -> str:
    """`<what> (<path>)` for an OSError, without Python's `[Errno n]` prefix."""
    what = exc.strerror or str(exc) or type(exc).__name__
    if exc.filename is None:
        return what
    where = str(exc.filename) if exc.filename2 is None else f"{exc.filename} -> {exc.filename2}"
    return f"{what} ({where})"


def explain(exc: BaseException, args: argparse.Namespace | None = None) -> tuple[str, int] | None:
    """The one-line message (without `bbs: `) and exit status for an error a command let through, or None.

    Messages are built from the error's kind and the paths involved, never from file contents, so no secret
    (a key, a token) can be printed.
    """
    import sqlite3

    from agent.identity_file import IdentityFileError
    from identity import keys
    from node.errors import BBSError
    from node.ops.config import ConfigError
    from node.ops.datadir import CommandError, DataDir
    from node.store.db import SchemaTooNew

    data = getattr(args, "data", None)
    if isinstance(exc, BBSError):
        return f"{exc.code}: {exc.detail}", EXIT_ERROR
    if isinstance(exc, ConfigError):
        return f"config: {exc}", EXIT_USAGE
    if isinstance(exc, SchemaTooNew):
        return f"schema_too_new: {exc}", EXIT_ERROR
    if isinstance(exc, CommandError):
        return str(exc), EXIT_ERROR
    if isinstance(exc, IdentityFileError):
        return f"identity_file: {exc}", EXIT_ERROR
    if isinstance(exc, keys.KeyError_):
        return "a key file is not an ed25519 key file" + (f" (in {data})" if data else ""), EXIT_ERROR
    if isinstance(exc, sqlite3.DatabaseError):  # PostgreSQL's errors too (node/store/pg_conn.py's neutral ones)
        where = ""
        if data:
            folder = DataDir(Path(data))
            named = folder.store_url_path  # never the URL itself: it may hold a password
            on_postgresql = os.path.exists(named)  # False, not an error, for a folder it may not enter
            store = f"the PostgreSQL database named in {named}" if on_postgresql else str(folder.db_path)
            where = f" ({store}; 'bbs doctor --data {data}' checks it)"
        return f"database error: {exc}{where}", EXIT_ERROR
    if isinstance(exc, UnicodeDecodeError):  # a damaged database (text columns) or a file that is not text
        where = f" (in {data}; 'bbs doctor --data {data}' checks its database)" if data else ""
        return f"read text that is not UTF-8{where}", EXIT_ERROR
    if isinstance(exc, OSError):
        return _os_error(exc), EXIT_ERROR
    return None


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `bbs` console script."""
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args))
    except KeyboardInterrupt:
        return 130
    except Exception as exc:
        found = explain(exc, args)
        if found is None:
            raise
        message, code = found
        print(f"bbs: {_one_line(message)}", file=sys.stderr)
        return code


if __name__ == "__main__":
    sys.exit(main())
