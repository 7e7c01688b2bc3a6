"""`bbs push list|add|delete|test`: an agent's push endpoints, over REST with $BBS_API_KEY (or --identity) and
--node / $BBS_NODE. Plain lines by default, `--json` for scripts. Registered on the `bbs` parser by node/cli.py.
"""

from __future__ import annotations

import argparse
import asyncio
import os
from pathlib import Path
from typing import Any

import msgspec

from agent.cli import check_node_url, passphrase
from node.wire.cli import CommandError
from node.wire.push import PushEndpointIn, PushEndpointList, PushEndpointOut, PushTestOut


def _client(args: argparse.Namespace) -> Any:
    from agent import identity_file
    from agent.client import Client

    check_node_url(args.node)
    api_key = os.environ.get("BBS_API_KEY") or None
    signing_key = None
    if args.identity is not None:
        signing_key = identity_file.load(args.identity.expanduser(), passphrase(args.passphrase_env)).key
    if api_key is None and signing_key is None:
        raise CommandError("give --identity FILE or set BBS_API_KEY")
    return Client(args.node, api_key=api_key, signing_key=signing_key)


def _line(e: PushEndpointOut) -> str:
    s = e.state
    reasons = ",".join(e.reasons) or "all"
    tiers = ",".join(map(str, e.tiers))
    return (
        f"{e.id}\t{e.url}\ttiers={tiers}\treasons={reasons}\tbreaker={s.breaker}"
        f"\tsent={s.messages_sent}\tfailed={s.messages_failed}"
        + (f"\tlast_error={s.last_error}" if s.last_error else "")
    )


async def _run(args: argparse.Namespace) -> tuple[Any, str]:
    from agent.client import BBSClientError

    async with _client(args) as client:
        try:
            if args.push_command == "list":
                listed = await client.call("GET", "/v1/push/endpoints", PushEndpointList)
                return listed, "\n".join(_line(e) for e in listed.endpoints) or "no push endpoints"
            if args.push_command == "add":
                try:
                    body = msgspec.convert(
                        {"url": args.url, "tiers": args.tier or [1], "reasons": args.reason or []}, PushEndpointIn
                    )
                except msgspec.ValidationError as exc:
                    raise CommandError(f"not a push endpoint: {exc}") from None
                made = await client.call("POST", "/v1/push/endpoints", PushEndpointOut, json=body)
                return made, _line(made)
            path = f"/v1/push/endpoints/{args.endpoint_id}"
            if args.push_command == "delete":
                await client.call("DELETE", path)
                return {"deleted": args.endpoint_id}, f"deleted push endpoint {args.endpoint_id}"
            tested = await client.call("POST", path + "/test", PushTestOut)
            text = f"ok (HTTP {tested.status})" if tested.ok else f"failed: {tested.error}"
            return tested, text
        except BBSClientError as exc:
            raise CommandError(f"{exc.code}: {exc.detail}") from None


def cmd_push(args: argparse.Namespace) -> int:
    """Run one `bbs push` subcommand and print its outcome."""
    result, text = asyncio.run(_run(args))
    print(msgspec.json.encode(result).decode() if args.json else text)
    if isinstance(result, PushTestOut) and not result.ok:
        return 1
    return 0


def register(sub: Any) -> None:
    """Add `bbs push` and its subcommands to the top-level subparsers `sub`."""
    push = sub.add_parser("push", help="your push endpoints: the node pushes NLIP hints of new notifications")
    actions = push.add_subparsers(dest="push_command", required=True)
    parsers = []
    p = actions.add_parser("list", help="list your push endpoints and their delivery state")
    parsers.append(p)
    p = actions.add_parser("add", help="register a push endpoint (the same URL again updates it)")
    p.add_argument("url")
    p.add_argument("--tier", type=int, action="append", choices=(1, 2), help="a tier to push (repeat; default 1)")
    p.add_argument("--reason", action="append", help="a reason to push (repeat; default every reason)")
    parsers.append(p)
    for name, text in (("delete", "remove a push endpoint"), ("test", "send one test push now")):
        p = actions.add_parser(name, help=text)
        p.add_argument("endpoint_id", type=int)
        parsers.append(p)
    for p in parsers:
        p.add_argument("--node", default=os.environ.get("BBS_NODE", "http://127.0.0.1:8420"), help="node URL")
        p.add_argument("--identity", type=Path, help="identity file (else the API key in $BBS_API_KEY)")
        p.add_argument("--passphrase-env", metavar="VAR", help="environment variable holding the file's passphrase")
        p.add_argument("--json", action="store_true", help="print JSON")
        p.set_defaults(func=cmd_push)
