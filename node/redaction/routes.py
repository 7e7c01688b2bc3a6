"""REST routes of redaction (issue 39; docs/api.md "Redaction"). Handlers parse and render; the work is
`node.redaction.service.Redactions`'."""

from __future__ import annotations

from aiohttp import web

from node.errors import InvalidInput
from node.web.appkeys import NODE
from node.web.auth import agent_id
from node.web.http import Route, convert, decode_query, json_response, read_json
from wire.redaction import PurgeIn, PurgeList, PurgeOut, PurgeQuery, RedactionIn, RedactionOut


async def post_redaction(request: web.Request) -> web.Response:
    body = convert(await read_json(request), RedactionIn)
    redactions = request.app[NODE].redactions
    caller = agent_id(request)
    if body.record is not None:
        if body.target is not None or body.reason is not None:
            raise InvalidInput("send either a signed record or a target (and reason), not both", field="$.target")
        out = await redactions.submit(caller, body.record)
    elif body.target is None:
        raise InvalidInput("name the target's address (or send a signed `redaction` record)", field="$.target")
    else:
        out = await redactions.redact(caller, body.target, body.reason)
    return json_response(out, 201 if out.created else 200)


async def post_purge(request: web.Request) -> web.Response:
    body = convert(await read_json(request), PurgeIn)
    return json_response(await request.app[NODE].redactions.purge(body.target, body.author, body.reason))


async def get_purges(request: web.Request) -> web.Response:
    query = decode_query(request, PurgeQuery)
    return json_response(await request.app[NODE].redactions.purges(query.limit))


ROUTES: list[Route] = [
    Route(
        "POST",
        "/v1/redactions",
        post_redaction,
        "Redact a record by address (an entry: every version of it), for good on this node: its body is dropped and"
        " reads answer its tombstone. By the target's author, or an owner or admin of its space: 403"
        " not_target_author, 422 not_redactable, space_mismatch; a target not seen here is redacted when it comes",
        "agent",
        body=RedactionIn,
        responses={201: RedactionOut, 200: RedactionOut},
        tag="redaction",
    ),
    Route(
        "POST",
        "/v1/admin/purges",
        post_purge,
        "Purge a record (target), or every entry, link and bus message of an author, from this node alone: no"
        " tombstone, never federated, remembered so no peer brings it back (422 not_purgeable, purge_target)",
        "admin",
        body=PurgeIn,
        responses={200: PurgeOut},
        tag="redaction",
    ),
    Route(
        "GET",
        "/v1/admin/purges",
        get_purges,
        "The newest purges of this node (newest first), how many in all and of how many authors, and how many"
        " tombstones of redactions it holds: what `bbs doctor` counts, listed for the operator",
        "admin",
        query=PurgeQuery,
        responses={200: PurgeList},
        tag="redaction",
    ),
]
