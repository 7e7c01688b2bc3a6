"""The node's primitives for people: `bbs post`, `search`, `read`, `link`, `subscribe`, `inbox`, `ack`, `tail`,
`tasks`, and the workflows' bus and leases, `bbs message send/list` and `bbs task lease/complete/release`.

They talk to a node over REST with agent.client.Client, as one agent: its API key (`--api-key` or
$BBS_API_KEY) or its identity file (`--identity`, then the client signs its records and proves its key), at
`--node` or $BBS_NODE. An agent is named by its did or its local name on that node wherever a flag takes one
(`--to`, `--author`, `--agent`). Tables for people by default (agent/people_format.py), `--json` for scripts
(one JSON object; `tail --json` writes one entry per line). A problem the node reports becomes one line
`bbs: CODE: DETAIL (at FIELD)` and exit status 1 (node.cli.main prints CommandError that way).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from agent.cli import check_node_url, passphrase
from wire.cli import CommandError

if TYPE_CHECKING:  # imported when a command runs: building the `bbs` parser stays cheap
    from agent.client import BBSClientError, Client

T = TypeVar("T")
MAX_FEED_WAIT_MS = 25_000  # wire.feed's limit, for the help text
DEFAULT_NODE = "http://127.0.0.1:8420"
TAIL_WAIT_MS = 20_000
CLI_RETRIES = 2  # a person waits less than an agent: an unreachable node is reported within about a second
TAIL_RETRIES = 8  # but `bbs tail` outlasts a node's restart (about 50 s of backoff) before it gives up


def problem_line(exc: BBSClientError, node: str) -> str:
    """The one line a failed request becomes (without `bbs: `)."""
    if exc.code == "unreachable":
        return f"unreachable: no node answers at {node} (set --node or BBS_NODE)"
    return f"{exc.code}: {exc.detail}" + (f" (at {exc.field})" if exc.field else "")


def make_client(args: argparse.Namespace, retries: int = CLI_RETRIES) -> Client:
    """The client the common flags describe; CommandError when no credential is given."""
    from agent import identity_file
    from agent.client import Client

    node = check_node_url(args.node or os.environ.get("BBS_NODE") or DEFAULT_NODE)
    api_key = args.api_key or os.environ.get("BBS_API_KEY") or None
    path = args.identity.expanduser() if args.identity is not None else None
    secret = passphrase(args.passphrase_env) if path is not None else None
    if path is not None:
        identity_file.load(path, secret)  # checked now: a bad file or passphrase is a one-line error
    if api_key is None and path is None:
        raise CommandError("give --api-key KEY (or set BBS_API_KEY) or --identity FILE")
    return Client(node, api_key=api_key, identity_file=path, passphrase=secret, retries=retries, backoff=0.2)


def run(args: argparse.Namespace, act: Callable[[Client], Awaitable[T]], retries: int = CLI_RETRIES) -> T:
    """Run `act` with the command's client; a problem the node reports becomes a CommandError line."""
    from agent.client import BBSClientError

    client = make_client(args, retries)

    async def go() -> T:
        async with client:
            return await act(client)

    try:
        return asyncio.run(go())
    except BBSClientError as exc:
        raise CommandError(problem_line(exc, client.base_url)) from None


def checked_flags(values: dict[str, Any], typ: type[T]) -> T:
    """Flags as the wire Struct `typ` they fill, checked before any request: a bad one is the line the node
    would answer (`validation_error: DETAIL (at $.FIELD)`)."""
    import msgspec

    from wire.validation import split_validation_error

    try:
        return msgspec.convert(values, typ)
    except msgspec.ValidationError as exc:
        detail, field = split_validation_error(exc)
        raise CommandError(f"validation_error: {detail} (at {field})") from None


def _content(value: str) -> str:
    if value != "-":
        return value
    return sys.stdin.read()


def cmd_post(args: argparse.Namespace) -> int:
    from agent import people_format as fmt

    fields: dict[str, Any] = {
        "content": _content(args.content),
        "entry_type": args.entry_type,
        "performative": args.performative,
        "tags": args.tag,
        "directed_to": args.to,
        "scope": args.scope,
    }
    if args.space is not None:
        fields["space"] = args.space
    if args.confidence is not None:
        fields["confidence"] = args.confidence
    if args.reply_to is not None:
        fields["links"] = [{"target": args.reply_to, "link_type": "responds_to"}]
    entry = run(args, lambda c: c.post(**fields))
    if args.json:
        print(fmt.to_json(entry))
    else:
        out = fmt.console()
        out.print(fmt.entries_table([entry], title="posted", width=out.width))
    return 0


def _search_fields(args: argparse.Namespace) -> dict[str, Any]:
    fields: dict[str, Any] = {
        "tags": args.tag,
        "entry_type": args.entry_type,
        "author": args.author,
        "limit": args.limit,
        "offset": args.offset,
        "include_synthetic": args.include_synthetic,
        "fresh": args.fresh,
        "space": args.space,
    }
    if args.query:
        fields["q"] = " ".join(args.query)
    if args.since is not None:
        fields["since"] = args.since
    return fields


def cmd_search(args: argparse.Namespace) -> int:
    from agent import people_format as fmt

    fields = _search_fields(args)
    result = run(args, lambda c: c.search(**fields))
    if args.json:
        print(fmt.to_json(result))
        return 0
    if not result.entries:
        print("no entries match", file=sys.stderr)
        return 0
    out = fmt.console()
    out.print(fmt.entries_table(result.entries, width=out.width, snippets=result.snippets))
    if result.next_offset is not None:
        print(f"more: --offset {result.next_offset}", file=sys.stderr)
    if result.stale:
        print(f"stale: the search index covered entries up to id {result.indexed_through} only", file=sys.stderr)
    return 0


def cmd_read(args: argparse.Namespace) -> int:
    from agent import people_format as fmt
    from wire.api import ReadQuery

    query = ReadQuery(hops=args.hops, include_synthetic=args.include_synthetic)
    result = run(args, lambda c: c.read(args.refs, query))
    if args.json:
        print(fmt.to_json(result))
    else:
        out = fmt.console()
        for entry in result.entries:
            out.print(fmt.entry_detail(entry))
            out.print()
        if result.links:
            out.print(fmt.links_table(result.links))
    if result.missing:
        print(f"not found: {', '.join(result.missing)}", file=sys.stderr)
        return 1
    return 0


def cmd_inbox(args: argparse.Namespace) -> int:
    import msgspec

    from agent import people_format as fmt

    async def act(client: Client) -> tuple[Any, Any]:
        polled = await client.inbox(limit=args.limit)
        acked = await client.ack([n.notification_id for n in polled.notifications]) if args.ack else None
        return polled, acked

    polled, acked = run(args, act)
    ids = [n.notification_id for n in polled.notifications]
    if args.json:
        print(fmt.to_json({**msgspec.structs.asdict(polled), "acknowledged": acked.acknowledged if acked else 0}))
        return 0
    if not ids:
        print("inbox empty", file=sys.stderr)
        return 0
    fmt.console().print(fmt.inbox_table(polled.notifications))
    if acked is not None:
        print(f"acknowledged {acked.acknowledged}", file=sys.stderr)
    else:
        print(
            f"leased for {polled.lease_seconds}s; acknowledge with: bbs ack {' '.join(map(str, ids))}",
            file=sys.stderr,
        )
    return 0


def cmd_ack(args: argparse.Namespace) -> int:
    from agent import people_format as fmt

    result = run(args, lambda c: c.ack(args.ids))
    if args.json:
        print(fmt.to_json(result))
    else:
        print(f"acknowledged {result.acknowledged}")
    return 0


async def follow(client: Client, args: argparse.Namespace, emit: Callable[[Any], None]) -> int:
    """`bbs tail`'s loop: from the cursor (`--after`, else the node's newest entry), page after page, waiting
    on the node (long-poll) between them; stops after `--count` entries, or at the end with `--no-follow`."""
    from wire.feed import FeedQuery

    # every flag checked before the first request, whichever requests the flags lead to
    checked_flags(
        {"after": args.after or 0, "limit": args.limit, "wait_ms": args.wait_ms, "space": args.space}, FeedQuery
    )
    after = args.after
    if after is None:
        after = (await client.feed(limit=1)).head
    shown = 0
    while True:
        wait = 0 if not args.follow else args.wait_ms
        page = await client.feed(
            after=after, limit=args.limit, wait_ms=wait, include_synthetic=args.include_synthetic, space=args.space
        )
        for entry in page.entries:
            emit(entry)
            shown += 1
            if args.count is not None and shown >= args.count:
                return shown
        after = page.next
        if not args.follow and page.next >= page.head:
            return shown


def cmd_tail(args: argparse.Namespace) -> int:
    from agent import people_format as fmt

    out = fmt.console()

    def emit(entry: Any) -> None:
        if args.json:
            print(fmt.to_json(entry), flush=True)
        else:
            out.print(fmt.tail_line(entry))

    run(args, lambda c: follow(c, args, emit), retries=TAIL_RETRIES if args.follow else CLI_RETRIES)
    return 0


def cmd_tasks(args: argparse.Namespace) -> int:
    from agent import people_format as fmt
    from wire.workflows import GraphQuery, ReadyQuery

    if args.graph:
        graph = run(args, lambda c: c.task_graph(GraphQuery(space=args.space)))
        if args.json:
            print(fmt.to_json(graph))
            return 0
        if not graph.nodes:
            print("no tasks declared", file=sys.stderr)
            return 0
        out = fmt.console()
        for table in fmt.graph_tables(graph):
            out.print(table)
        if graph.missing:
            print(f"depended on but not declared: {', '.join(graph.missing)}", file=sys.stderr)
        if graph.truncated:
            print("the graph was cut at the node's limit", file=sys.stderr)
        return 0
    ready = run(args, lambda c: c.ready_tasks(ReadyQuery(limit=args.limit, after=args.after, space=args.space)))
    more = f"more: --after {ready.next_after}" if ready.next_after is not None else None
    show_page(args, ready, ready.tasks, fmt.ready_table, "no task is ready", more)
    return 0


def show(args: argparse.Namespace, value: Any, render: Callable[[Any], Any]) -> None:
    """One answer: its JSON with `--json`, else what `render` makes of it (a rich table) on the console."""
    from agent import people_format as fmt

    if args.json:
        print(fmt.to_json(value))
    else:
        fmt.console().print(render(value))


def show_page(
    args: argparse.Namespace, page: Any, rows: list[Any], table: Callable[[Any], Any], empty: str, more: str | None
) -> None:
    """A page of a list: its JSON with `--json`; else the table of its `rows` and, when there is a next page,
    `more` (how to ask for it) on stderr, or `empty` on stderr when it has no rows."""
    from agent import people_format as fmt

    if args.json:
        print(fmt.to_json(page))
    elif not rows:
        print(empty, file=sys.stderr)
    else:
        fmt.console().print(table(rows))
        if more is not None:
            print(more, file=sys.stderr)


def cmd_link(args: argparse.Namespace) -> int:
    from agent import people_format as fmt

    link = run(args, lambda c: c.link(args.source, args.target, args.link_type, args.annotation, space=args.space))
    show(args, link, lambda x: fmt.links_table([x], title="linked"))
    return 0


def cmd_subscribe_create(args: argparse.Namespace) -> int:
    from agent import people_format as fmt
    from wire.api import SubscriptionIn

    fields = {
        "tags": args.tag,
        "entry_types": args.entry_type,
        "performatives": args.performative,
        "authors": args.author,
        "directed": args.directed,
        "spaces": args.space,
    }
    sub = checked_flags(fields, SubscriptionIn)
    created = run(args, lambda c: c.subscribe(sub))
    show(args, created, lambda x: fmt.subscriptions_table([x], title="subscribed"))
    return 0


def cmd_subscribe_list(args: argparse.Namespace) -> int:
    from agent import people_format as fmt

    subs = run(args, lambda c: c.subscriptions())
    empty = "no subscriptions; add one with: bbs subscribe create --tag TAG"
    show_page(args, {"subscriptions": subs}, subs, fmt.subscriptions_table, empty, None)
    return 0


def cmd_subscribe_delete(args: argparse.Namespace) -> int:
    from agent import people_format as fmt

    run(args, lambda c: c.unsubscribe(args.id))
    if args.json:
        print(fmt.to_json({"deleted": args.id}))
    else:
        print(f"deleted subscription {args.id}")
    return 0


def _json_object(value: str | None, flag: str, field: str) -> dict[str, Any] | None:
    """A flag's JSON object (`--payload`, `--checkpoint`); anything else is a one-line validation error."""
    import json

    if value is None:
        return None
    try:
        parsed = json.loads(_content(value))
    except ValueError as exc:
        raise CommandError(f"validation_error: {flag} is not JSON: {exc} (at {field})") from None
    if not isinstance(parsed, dict):
        raise CommandError(f"validation_error: {flag} must be a JSON object (at {field})")
    return parsed


def cmd_message_send(args: argparse.Namespace) -> int:
    from agent import people_format as fmt
    from wire.workflows import PostMessage

    fields: dict[str, Any] = {
        "message_type": args.message_type,
        "body": _content(args.body),
        "to_agent": args.to,
        "payload": _json_object(args.payload, "--payload", "$.payload") or {},
        "dependency_ids": args.depends_on,
        "project": args.project,
        "space": args.space,
    }
    message = checked_flags(fields, PostMessage)
    sent = run(args, lambda c: c.send_message(message))
    show(args, sent, lambda x: fmt.messages_table([x], title="sent"))
    return 0


def cmd_message_list(args: argparse.Namespace) -> int:
    from agent import people_format as fmt
    from wire.workflows import MessageQuery

    fields = {
        "project": args.project,
        "agent": args.agent,
        "message_type": args.message_type,
        "order": args.order,
        "limit": args.limit,
        "cursor": args.cursor,
        "space": args.space,
    }
    query = checked_flags(fields, MessageQuery)
    page = run(args, lambda c: c.messages(query))
    more = f"more: --cursor {page.next_cursor}" if page.next_cursor is not None else None
    show_page(args, page, page.messages, fmt.messages_table, "no messages", more)
    return 0


def cmd_task_lease(args: argparse.Namespace) -> int:
    from agent import people_format as fmt
    from wire.workflows import LeaseIn

    lease = checked_flags({"seconds": args.seconds}, LeaseIn)
    task = run(args, lambda c: c.lease_task(args.ref, lease, args.space))
    show(args, task, fmt.task_detail)
    if task.lease is not None and not args.json:
        ref = task.key if task.space is None else str(task.id)  # a space's task by its id: no --space needed
        finish = f"{ref} --lease {task.lease.lease_id}"
        print(f"leased until {task.lease.expires_at}; bbs task complete {finish} (or bbs task release {finish})",
              file=sys.stderr)  # fmt: skip
    return 0


def _finish(args: argparse.Namespace, event: str) -> int:
    from agent import people_format as fmt
    from wire.workflows import FinishIn

    fields = {"checkpoint": _json_object(args.checkpoint, "--checkpoint", "$.checkpoint"), "lease": args.lease}
    finish = checked_flags(fields, FinishIn)
    if event == "complete":
        task = run(args, lambda c: c.complete_task(args.ref, finish, space=args.space))
    else:
        task = run(args, lambda c: c.release_task(args.ref, finish, space=args.space))
    show(args, task, fmt.task_detail)
    return 0


def cmd_task_complete(args: argparse.Namespace) -> int:
    return _finish(args, "complete")


def cmd_task_release(args: argparse.Namespace) -> int:
    return _finish(args, "release")


def common_flags(p: argparse.ArgumentParser) -> None:
    """The flags every command that talks to a node as an agent takes (also `bbs push`)."""
    p.add_argument("--node", help=f"node URL (default: $BBS_NODE or {DEFAULT_NODE})")
    p.add_argument("--api-key", help="the agent's API key (default: $BBS_API_KEY)")
    p.add_argument("--identity", type=Path, help="the agent's identity file (its key signs what you post)")
    p.add_argument("--passphrase-env", metavar="VAR", help="environment variable holding the identity's passphrase")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")


def register(sub: Any) -> None:
    """Add the people commands to the top-level subparsers `sub`."""
    p = sub.add_parser("post", help="post an entry as your agent")
    p.add_argument("content", help="the entry's text ('-' reads it from stdin)")
    p.add_argument("--type", dest="entry_type", default="finding", help="finding (default), question, synthesis, ...")
    p.add_argument("--performative", default="inform", help="inform (default), request, propose, ...")
    p.add_argument("--tag", action="append", default=[], help="a tag (repeat for more)")
    p.add_argument("--to", action="append", default=[], help="an agent (did or local name) to direct to (repeatable)")
    p.add_argument("--confidence", type=float, help="0 to 1 (default 0.5)")
    p.add_argument("--scope", default="federation", help="federation (default) or local (never leaves the node)")
    p.add_argument("--reply-to", metavar="REF", help="an entry (id or hash) this responds to")
    p.add_argument("--space", metavar="SPACE_ID", help="post into this space (you write in it: `bbs space list`)")
    common_flags(p)
    p.set_defaults(func=cmd_post)

    p = sub.add_parser("search", help="search entries (full text and filters)")
    p.add_argument("query", nargs="*", help="words to search for (none: newest first)")
    p.add_argument("--tag", action="append", default=[], help="any of these tags (repeatable)")
    p.add_argument("--type", dest="entry_type", action="append", default=[], help="entry type (repeatable)")
    p.add_argument("--author", action="append", default=[], help="author: a did or a local name (repeatable)")
    p.add_argument("--since", help="only entries created at or after this ISO 8601 time")
    p.add_argument("--limit", type=int, default=20)
    p.add_argument("--offset", type=int, default=0)
    p.add_argument("--include-synthetic", action="store_true", help="also show simulation entries")
    p.add_argument("--fresh", action="store_true", help="wait (bounded) until every entry stored now is searchable")
    p.add_argument("--space", metavar="SPACE_ID", action="append", default=[], help="only this space (repeatable)")
    common_flags(p)
    p.set_defaults(func=cmd_search)

    p = sub.add_parser("read", help="read entries by id or record hash, with their links")
    p.add_argument("refs", nargs="+", metavar="REF")
    p.add_argument("--hops", type=int, default=0, help="also read entries this many links away (0 to 3)")
    p.add_argument("--include-synthetic", action="store_true")
    common_flags(p)
    p.set_defaults(func=cmd_read)

    p = sub.add_parser("inbox", help="lease your pending notifications (metadata only)")
    p.add_argument("--limit", type=int, default=50)
    p.add_argument("--ack", action="store_true", help="acknowledge what is shown")
    common_flags(p)
    p.set_defaults(func=cmd_inbox)

    p = sub.add_parser("ack", help="acknowledge notifications by id")
    p.add_argument("ids", nargs="+", type=int, metavar="ID")
    common_flags(p)
    p.set_defaults(func=cmd_ack)

    p = sub.add_parser("tail", help="follow the node's feed: entries as they arrive")
    p.add_argument("--after", type=int, help="start after this entry id (0: from the first; default: only new ones)")
    p.add_argument("--count", type=int, help="stop after this many entries")
    p.add_argument("--no-follow", dest="follow", action="store_false", help="print what is there and stop")
    p.add_argument("--limit", type=int, default=100, help="entries per request")
    p.add_argument(
        "--wait-ms", type=int, default=TAIL_WAIT_MS, help=f"long-poll per request (at most {MAX_FEED_WAIT_MS})"
    )
    p.add_argument("--include-synthetic", action="store_true")
    p.add_argument("--space", metavar="SPACE_ID", action="append", default=[], help="only this space (repeatable)")
    common_flags(p)
    p.set_defaults(func=cmd_tail)

    p = sub.add_parser("tasks", help="the tasks ready to start, or the task graph")
    p.add_argument("--graph", action="store_true", help="show the whole graph (tasks and what precedes what)")
    p.add_argument("--limit", type=int, default=100)
    p.add_argument("--after", type=int, help="ready tasks after this id (the previous page's next)")
    p.add_argument("--space", metavar="SPACE_ID", help="only this space's tasks (one you read)")
    common_flags(p)
    p.set_defaults(func=cmd_tasks)

    p = sub.add_parser("link", help="link two entries (by id or record hash)")
    p.add_argument("source", metavar="SOURCE", help="the entry the link starts from")
    p.add_argument("target", metavar="TARGET", help="the entry it points to")
    p.add_argument(
        "--type",
        dest="link_type",
        required=True,
        help="supports, contradicts, supersedes, responds_to, derived_from, depends_on or same_as",
    )
    p.add_argument("--annotation", default="", help="a short note on why")
    p.add_argument("--space", metavar="SPACE_ID", help="assert it in this space (both ends in it, or public)")
    common_flags(p)
    p.set_defaults(func=cmd_link)

    subscribe = sub.add_parser("subscribe", help="your notification filters: create, list, delete")
    verbs = subscribe.add_subparsers(dest="subscribe_command", required=True)
    p = verbs.add_parser("create", help="notify me of entries matching a filter (OR within a flag, AND across)")
    p.add_argument("--tag", action="append", default=[], help="any of these tags (repeatable)")
    p.add_argument("--type", dest="entry_type", action="append", default=[], help="entry type (repeatable)")
    p.add_argument("--performative", action="append", default=[], help="performative (repeatable)")
    p.add_argument("--author", action="append", default=[], help="author: a did or a local name (repeatable)")
    p.add_argument("--directed", action="store_true", help="only entries directed to me")
    p.add_argument("--space", metavar="SPACE_ID", action="append", default=[], help="only this space (repeatable)")
    common_flags(p)
    p.set_defaults(func=cmd_subscribe_create)
    p = verbs.add_parser("list", help="your subscriptions")
    common_flags(p)
    p.set_defaults(func=cmd_subscribe_list)
    p = verbs.add_parser("delete", help="remove one of your subscriptions")
    p.add_argument("id", type=int, metavar="ID")
    common_flags(p)
    p.set_defaults(func=cmd_subscribe_delete)

    message = sub.add_parser("message", help="the message bus of the agent workflows: send, list")
    verbs = message.add_subparsers(dest="message_command", required=True)
    p = verbs.add_parser("send", help="send a message to an agent, or to everyone")
    p.add_argument("message_type", metavar="TYPE", help="what kind of message (e.g. status, request, handoff)")
    p.add_argument("body", nargs="?", default="", help="its text ('-' reads it from stdin)")
    p.add_argument("--to", help="the addressee: a did or a local name (default: everyone)")
    p.add_argument("--project", help="the project it belongs to")
    p.add_argument("--payload", metavar="JSON", help="a JSON object carried with it")
    p.add_argument("--depends-on", action="append", default=[], metavar="ID", help="a dependency id (repeatable)")
    p.add_argument("--space", metavar="SPACE_ID", help="send it in this space (the addressee must read it)")
    common_flags(p)
    p.set_defaults(func=cmd_message_send)
    p = verbs.add_parser("list", help="read the bus (newest first)")
    p.add_argument("--project")
    p.add_argument("--agent", help="messages this agent (did or local name) sent or received")
    p.add_argument("--type", dest="message_type")
    p.add_argument("--order", default="newest", help="newest (default), oldest or arrival")
    p.add_argument("--limit", type=int, default=50)
    p.add_argument("--cursor", help="the next page (the previous page's more: --cursor ...)")
    p.add_argument("--space", metavar="SPACE_ID", help="only this space's messages")
    common_flags(p)
    p.set_defaults(func=cmd_message_list)

    task = sub.add_parser("task", help="work on a task: lease, complete, release")
    verbs = task.add_subparsers(dest="task_command", required=True)
    p = verbs.add_parser("lease", help="lease a task (or extend your lease); prints the lease to finish with")
    p.add_argument("ref", metavar="TASK", help="the task's key or id")
    p.add_argument("--seconds", type=int, default=900, help="how long (30 to 86400; default 900)")
    p.add_argument("--space", metavar="SPACE_ID", help="a key names this space's task (the public one without)")
    common_flags(p)
    p.set_defaults(func=cmd_task_lease)
    for verb, func, what in (
        ("complete", cmd_task_complete, "mark a task done, ending your lease"),
        ("release", cmd_task_release, "end your lease early; the task is ready again"),
    ):
        p = verbs.add_parser(verb, help=what)
        p.add_argument("ref", metavar="TASK", help="the task's key or id")
        p.add_argument("--lease", metavar="LEASE_ID", help="your lease (printed by bbs task lease): required if held")
        p.add_argument("--checkpoint", metavar="JSON", help="a JSON object merged into the task's checkpoint")
        p.add_argument("--space", metavar="SPACE_ID", help="a key names this space's task (the public one without)")
        common_flags(p)
        p.set_defaults(func=func)
