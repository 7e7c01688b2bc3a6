"""The `bbs` command: the composition root. Each subcommand imports what it needs lazily."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from node.api_types import CreatedAgent
    from node.service import Node

EXIT_USAGE = 2
EXIT_ERROR = 1


def _data_arg(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--data",
        type=Path,
        default=Path(os.environ.get("BBS_DATA", "bbs-data")),
        help="data folder (default: $BBS_DATA or ./bbs-data)",
    )


def cmd_init(args: argparse.Namespace) -> int:
    from node.datadir import initialise

    token = initialise(args.data)
    if token is None:
        print(f"{args.data} is already initialised; the admin token was shown when it was created.", file=sys.stderr)
        return 0
    print(f"Initialised node data in {args.data}")
    print(f"Admin token (shown once, keep it safe): {token}")
    return 0


MAX_REQUEST_LINE_BYTES = 64 * 1024
MAX_HEADER_BYTES = 16 * 1024


def cmd_serve(args: argparse.Namespace) -> int:
    from aiohttp import web

    from node import config as configuration
    from node import datalock, logging_setup, metrics
    from node.app import create_app
    from node.datadir import initialise
    from node.limits import RateLimit
    from node.peer_routes import SyncSettings
    from node.service import Node

    flags = {name: getattr(args, name, None) for name in configuration.FIELDS}
    config = configuration.load(args.config, flags)
    if args.print_config:
        print(configuration.to_toml(config), end="")
        return 0
    logging_setup.configure(config.log_format, config.log_level, access_log=config.access_log)
    data = Path(config.data)
    token = initialise(data)
    lock = datalock.hold(data)  # noqa: F841 (held until the process exits)
    if token is not None:
        print(f"Initialised node data in {data}")
        print(f"Admin token (shown once, keep it safe): {token}")
    node = Node(data)
    print(f"Node {node.node_id} serving http://{config.host}:{config.port}", flush=True)
    print(f"Create an agent: bbs agent create NAME --data {data}", flush=True)
    sync = SyncSettings(config.sync == "on", config.sync_wait_ms, config.reconcile_every_s)
    app = create_app(node, RateLimit(config.rate_limit_per_s, config.rate_limit_burst), sync)
    from node import cli_mcp

    cli_mcp.enable_remote_mcp(app, node, config.mcp_port, config.host, config.port)
    if config.metrics_port is not None:
        metrics.serve_separately(app, config.metrics_host, config.metrics_port)
    web.run_app(
        app,
        host=config.host,
        port=config.port,
        print=None,
        handle_signals=True,
        access_log=None,
        shutdown_timeout=config.shutdown_timeout,
        # aiohttp answers a request line or header beyond these in plain text before the app sees it; the
        # defaults (8 KiB) are below the longest query the API documents, so they are raised past it.
        max_line_size=MAX_REQUEST_LINE_BYTES,
        max_field_size=MAX_HEADER_BYTES,
    )
    return 0


def _agent_key_command(args: argparse.Namespace, act: Callable[[Node], Awaitable[CreatedAgent]]) -> int:
    """Run `act` on the data folder's node (served elsewhere or not) and print the agent id and its API key."""
    import asyncio

    import msgspec

    from node.datadir import initialise
    from node.service import Node

    initialise(args.data)
    node = Node(args.data)

    async def run() -> CreatedAgent:
        node.open()
        try:
            return await act(node)
        finally:
            node.close()

    created = asyncio.run(run())
    if args.json:
        print(msgspec.json.encode(created).decode())
    else:
        print(f"agent_id: {created.agent_id}")
        print(f"api_key:  {created.api_key}  (shown once)")
    return 0


def cmd_agent_create(args: argparse.Namespace) -> int:
    return _agent_key_command(args, lambda node: node.create_agent(args.name, args.display_name, args.description))


def cmd_agent_rotate_key(args: argparse.Namespace) -> int:
    code = _agent_key_command(args, lambda node: node.rotate_api_key(args.agent))
    if not args.json:
        print("its previous API keys no longer work (a running node may accept one it checked in the last 60 s)")
    return code


def cmd_rebuild(args: argparse.Namespace) -> int:
    from node import db, projections
    from node.datadir import DataDir

    def run(conn: object) -> tuple[bool, int]:
        before = projections.snapshot(conn)  # type: ignore[arg-type]
        count = projections.rebuild(conn)  # type: ignore[arg-type]
        return before == projections.snapshot(conn), count  # type: ignore[arg-type]

    same, count = db.write_sync(DataDir(args.data).db_path, run)  # type: ignore[arg-type]
    print(json.dumps({"records_replayed": count, "projections_matched_log": same}))
    return 0 if same else EXIT_ERROR


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="bbs", description="Agent BBS node and tools")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("init", help="create a node's key, database and admin token")
    _data_arg(p)
    p.set_defaults(func=cmd_init)

    p = sub.add_parser("serve", help="run a node (settings: defaults < --config file < BBS_* environment < flags)")
    p.add_argument("--config", type=Path, help="a TOML config file (see docker/bbs.sample.toml)")
    p.add_argument("--data", help="data folder (default: $BBS_DATA or ./bbs-data)")
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
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=cmd_agent_create)

    p = agent.add_parser("rotate-key", help="give an agent a new API key; its previous keys stop working")
    p.add_argument("agent", help="the agent's local name or did:key")
    _data_arg(p)
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=cmd_agent_rotate_key)

    from node import cli_mcp  # bbs mcp, bbs agent export/import

    cli_mcp.register(sub, agent)
    from agent.runtime import cli as runtime_cli  # bbs agent run, bbs agent init

    runtime_cli.register(agent)

    p = sub.add_parser("rebuild", help="rebuild every projection from the log and check it matches")
    _data_arg(p)
    p.set_defaults(func=cmd_rebuild)

    from node import ops_cli

    ops_cli.add_commands(sub)  # backup, restore, litestream-config, doctor
    from node import peer_cli

    peer_cli.add_parsers(sub, _data_arg)  # peer add, peers, digest
    return parser


COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {}


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `bbs` console script."""
    args = build_parser().parse_args(argv)
    from node.config import ConfigError
    from node.db import SchemaTooNew
    from node.errors import BBSError

    try:
        return int(args.func(args))
    except BBSError as exc:
        print(f"bbs: {exc.code}: {exc.detail}", file=sys.stderr)
        return EXIT_ERROR
    except ConfigError as exc:
        print(f"bbs: config: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except SchemaTooNew as exc:
        print(f"bbs: schema_too_new: {exc}", file=sys.stderr)
        return EXIT_ERROR
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
