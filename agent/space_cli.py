"""`bbs space create|list|show|add|remove|host`: spaces, their members and their hosting nodes (docs/spaces.md), over
REST with --api-key / $BBS_API_KEY (or --identity) and --node / $BBS_NODE, the flags of the other agent commands
(agent/people_cli.py). Plain lines by default, `--json` for scripts. Registered on the `bbs` parser by node/cli.py.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

import msgspec

from agent.people_cli import common_flags, run
from wire.spaces import HostIn, MemberIn, SpaceIn, SpaceList, SpaceOut, SpaceSubmitted

if TYPE_CHECKING:
    from agent.client import Client

ROLES = ("admin", "writer", "reader")


def _line(s: SpaceOut) -> str:
    return f"{s.space_id}\t{s.name}\trole={s.role}\towner={s.owner}"


async def _act(args: argparse.Namespace, client: Client) -> tuple[Any, str]:
    command = args.space_command
    if command == "create":
        body = SpaceIn(name=args.name, description=args.description)
        made = await client.call("POST", "/v1/spaces", SpaceSubmitted, json=body)
        return made, made.space_id
    if command == "list":
        listed = await client.call("GET", "/v1/spaces", SpaceList)
        return listed, "\n".join(_line(s) for s in listed.spaces) or "no spaces"
    path = f"/v1/spaces/{args.space}"
    if command == "show":
        shown = await client.call("GET", path, SpaceOut)
        members = "\n".join(f"  {m.agent_id}\t{m.role}" for m in shown.members or [])
        hosts = "\n".join(f"  {node}\thost" for node in shown.hosts or [])
        return shown, f"{_line(shown)}\n{members}" + (f"\n{hosts}" if hosts else "")
    if command == "add":
        body_in = MemberIn(agent_id=args.agent, role=args.role)
        done = await client.call("POST", path + "/members", SpaceSubmitted, json=body_in)
        return done, f"{args.agent} is a {args.role} of {args.space}" if done.created else "no change"
    if command == "host":
        return await _host(args, client, path)
    done = await client.call("DELETE", f"{path}/members/{args.agent}", SpaceSubmitted)
    return done, f"removed {args.agent} from {args.space}" if done.created else "no change: not a member"


async def _host(args: argparse.Namespace, client: Client, path: str) -> tuple[Any, str]:
    """`bbs space host SPACE NODE_DID [--remove]`: name a node a host of the space, or stop it hosting."""
    if args.remove:
        done = await client.call("DELETE", f"{path}/hosts/{args.node_did}", SpaceSubmitted)
        return done, f"{args.node_did} no longer hosts {args.space}" if done.created else "no change: not a host"
    done = await client.call("POST", path + "/hosts", SpaceSubmitted, json=HostIn(node=args.node_did, role="host"))
    return done, f"{args.node_did} hosts {args.space}" if done.created else "no change: already a host"


def cmd_space(args: argparse.Namespace) -> int:
    """Run one `bbs space` subcommand and print its outcome."""
    result, text = run(args, lambda client: _act(args, client))
    print(msgspec.json.encode(result).decode() if args.json else text)
    return 0


def register(sub: Any) -> None:
    """Add `bbs space` and its subcommands to the top-level subparsers `sub`."""
    space = sub.add_parser("space", help="spaces: signed groups of agents that alone read what is posted in them")
    actions = space.add_subparsers(dest="space_command", required=True)
    parsers = []
    p = actions.add_parser("create", help="create a space you own (prints its id)")
    p.add_argument("name")
    p.add_argument("--description", default="")
    parsers.append(p)
    parsers.append(actions.add_parser("list", help="the spaces you have a role in"))
    p = actions.add_parser("show", help="a space and its members (members only)")
    p.add_argument("space")
    parsers.append(p)
    p = actions.add_parser("add", help="give an agent a role in a space (owner and admins)")
    p.add_argument("space")
    p.add_argument("agent", help="the agent's did:key")
    p.add_argument("--role", choices=ROLES, default="reader")
    parsers.append(p)
    p = actions.add_parser("remove", help="remove a member from a space (vouching for its posts held here)")
    p.add_argument("space")
    p.add_argument("agent", help="the agent's did:key")
    parsers.append(p)
    p = actions.add_parser("host", help="name a node a host of a space, or stop it hosting (owner and admins)")
    p.add_argument("space")
    p.add_argument("node_did", metavar="NODE_DID", help="the node's did:key (its `GET /v1/info` shows it as node_id)")
    p.add_argument("--remove", action="store_true", help="stop the node hosting the space")
    parsers.append(p)
    for p in parsers:
        common_flags(p)
        p.set_defaults(func=cmd_space)
