"""`bbs push list|add|delete|test`: an agent's push endpoints, over REST with --api-key / $BBS_API_KEY (or
--identity) and --node / $BBS_NODE, the flags of the other agent commands (agent/people_cli.py). Plain lines by
default, `--json` for scripts. Registered on the `bbs` parser by node/cli.py.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

import msgspec

from agent.people_cli import common_flags, run
from wire.cli import CommandError
from wire.push import PushEndpointIn, PushEndpointList, PushEndpointOut, PushTestOut

if TYPE_CHECKING:
    from agent.client import Client


def _line(e: PushEndpointOut) -> str:
    s = e.state
    reasons = ",".join(e.reasons) or "all"
    tiers = ",".join(map(str, e.tiers))
    return (
        f"{e.id}\t{e.url}\ttiers={tiers}\treasons={reasons}\tbreaker={s.breaker}"
        f"\tsent={s.messages_sent}\tfailed={s.messages_failed}"
        + (f"\tlast_error={s.last_error}" if s.last_error else "")
    )


async def _act(args: argparse.Namespace, client: Client) -> tuple[Any, str]:
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
    return tested, f"ok (HTTP {tested.status})" if tested.ok else f"failed: {tested.error}"


def cmd_push(args: argparse.Namespace) -> int:
    """Run one `bbs push` subcommand and print its outcome."""
    result, text = run(args, lambda client: _act(args, client))
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
        common_flags(p)
        p.set_defaults(func=cmd_push)
