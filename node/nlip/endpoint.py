"""`POST /nlip` (and `/nlip/`): the six primitives for NLIP clients (issue 26; mapping in docs/nlip.md).

A structured message (format `structured`, subformat `JSON`) whose content is `{"op": OP, "args": {...}}` runs
one operation through the same service calls as REST, its arguments checked by the same wire Structs: `post`,
`read`, `search`, `link`, `subscribe`, `inbox` and `ack` (the poll's acknowledgement). A text message is answered
as a search for its text. The answer is a structured message labelled with the op, plus an English summary.

Authentication is the REST bearer key (401 as problem+json, from the route guard). Anything wrong with the message
or its arguments is answered as an NLIP error message (format `error`, subformat `code`) with the 4xx status REST
would give, and stores nothing.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import msgspec
from aiohttp import web
from nlip_sdk.nlip import AllowedFormats, NLIP_Message

from node.agents import sessions as agent_auth
from node.errors import BBSError, InvalidInput
from node.web.appkeys import NODE
from node.web.auth import agent_id, guard
from node.web.http import Route, convert, decode_json, signed_or
from wire import nlip
from wire.api import MAX_QUERY_CHARS, AckIn, InboxQuery, PostEntry, PostLink, ReadQuery, SearchQuery, SubscriptionIn

if TYPE_CHECKING:
    from node.service import Node

MAX_NLIP_BYTES = 256 * 1024
Op = Callable[["Node", str, Any], Awaitable[tuple[Any, str]]]  # Node named: imported for its type only


async def _post(node: Node, agent: str, args: Any) -> tuple[Any, str]:
    entry, created = await node.entries.post(agent, signed_or(args, PostEntry, "$.content.args"), None)
    return entry, f"entry {entry.id} {'stored' if created else 'was stored already'}"


async def _read(node: Node, agent: str, args: Any) -> tuple[Any, str]:
    q = convert(args, ReadQuery, "$.content.args")
    if not q.ids:
        raise InvalidInput("give one or more ids (local ids or record hashes)", field="$.content.args.ids")
    result = await node.reads.read(q.ids, q, agent)
    return result, f"{len(result.entries)} entries, {len(result.missing)} missing"


async def _search(node: Node, agent: str, args: Any) -> tuple[Any, str]:
    result = await node.reads.search(convert(args, SearchQuery, "$.content.args"), agent)
    return result, f"{len(result.entries)} entries found"


async def _link(node: Node, agent: str, args: Any) -> tuple[Any, str]:
    link, created = await node.links.create(agent, signed_or(args, PostLink, "$.content.args"), None)
    return link, f"link {'stored' if created else 'was stored already'}"


async def _subscribe(node: Node, agent: str, args: Any) -> tuple[Any, str]:
    sub, created = await node.inbox.subscribe(agent, convert(args, SubscriptionIn, "$.content.args"))
    return sub, f"subscription {sub.id} {'created' if created else 'exists already'}"


async def _inbox(node: Node, agent: str, args: Any) -> tuple[Any, str]:
    result = await node.inbox.poll(agent, convert(args, InboxQuery, "$.content.args"))
    return result, f"{len(result.notifications)} notifications leased for {result.lease_seconds} s"


async def _ack(node: Node, agent: str, args: Any) -> tuple[Any, str]:
    result = await node.inbox.ack(agent, convert(args, AckIn, "$.content.args").ids)
    return result, f"{result.acknowledged} acknowledged"


OPS: dict[str, Op] = {
    "post": _post,
    "read": _read,
    "search": _search,
    "link": _link,
    "subscribe": _subscribe,
    "inbox": _inbox,
    "ack": _ack,
}


class _Call(msgspec.Struct, forbid_unknown_fields=True):
    op: str
    args: dict[str, Any] = {}


def _call(message: NLIP_Message) -> tuple[str, Any]:
    """(op, args) of a message: a structured JSON call, or a text message as a search for its text."""
    fmt = message.format.lower()
    if fmt == AllowedFormats.text:
        text = message.extract_text(language=None) or ""
        if not isinstance(text, str) or not text.strip():
            raise nlip.NlipError("empty_text", "a text message needs some text to search for", "$.content")
        # Prose, not a search box: a star is text ("5* rating" is no prefix search, nor a 422); quotes stay phrases.
        # A question in a conversation expects what the node holds now: fresh (a bounded wait, docs/api.md).
        return "search", {"q": text.replace("*", " ").strip()[:MAX_QUERY_CHARS], "fresh": True}
    if fmt == AllowedFormats.structured and message.subformat.lower() == "json" and isinstance(message.content, dict):
        try:
            call = msgspec.convert(message.content, _Call)
        except msgspec.ValidationError as exc:
            raise nlip.NlipError(
                "invalid_nlip_call", f"content must be {{'op': OP, 'args': {{...}}}}: {exc}", "$.content"
            ) from None
        if call.op not in OPS:
            raise nlip.NlipError("unknown_op", f"op must be one of {sorted(OPS)}", "$.content.op")
        return call.op, call.args
    raise nlip.NlipError(
        "unsupported_nlip_message",
        "send a text message (answered as a search) or a structured JSON message {'op': OP, 'args': {...}}",
        "$.format",
    )


def _answer(message: NLIP_Message, status: int) -> web.Response:
    return web.Response(status=status, body=nlip.encode(message), content_type="application/json")


async def nlip_message(request: web.Request) -> web.Response:
    node, agent = request.app[NODE], agent_id(request)
    try:
        if request.content_type != "application/json":
            raise nlip.NlipError("unsupported_media_type", "send the NLIP message as application/json", "Content-Type")
        raw = await request.read()
        if len(raw) > MAX_NLIP_BYTES:
            raise nlip.NlipError("payload_too_large", f"an NLIP message is at most {MAX_NLIP_BYTES} bytes")
        op, args = _call(nlip.parse(decode_json(raw)))
        result, summary = await OPS[op](node, agent, args)
    except nlip.NlipError as exc:
        status = {"unsupported_media_type": 415, "payload_too_large": 413, "invalid_json": 400}.get(exc.code, 422)
        return _answer(nlip.error_message(exc.code, exc.detail, exc.field), status)
    except BBSError as exc:
        if exc.status >= 500:
            raise
        return _answer(nlip.error_message(exc.code, exc.detail, exc.field), exc.status)
    return _answer(nlip.structured(result, label=op, text=summary), 200)


def install(app: web.Application) -> None:
    """Add `POST /nlip` and `/nlip/` to an app being built, behind the REST bearer guard."""
    for route in nlip_routes():
        app.router.add_route(route.method, route.path, guard(route, agent_auth.authenticator(app[NODE])))


def nlip_routes() -> list[Route]:
    """The two routes, kept out of /openapi.json and of the features' REST tables (an NLIP endpoint, not a REST
    route: its errors past authentication are NLIP messages, not problem+json)."""
    return [
        Route("POST", path, nlip_message, "NLIP: the six primitives as NLIP messages", "agent", tag="nlip")
        for path in ("/nlip", "/nlip/")
    ]
