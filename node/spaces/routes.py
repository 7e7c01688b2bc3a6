"""REST routes of spaces (issues 37 and 38; docs/spaces.md, docs/api.md "Spaces"): create, list, show, change and
remove members, name and remove hosting nodes. Handlers parse and render; the work is `node.spaces.service.Spaces`'."""

from __future__ import annotations

import re

from aiohttp import web

from identity import keys
from node.agents import refs as agent_refs
from node.errors import InvalidInput, NotFound
from node.spaces.service import Spaces
from node.web.appkeys import NODE
from node.web.auth import agent_id
from node.web.http import Route, convert, json_response, read_json
from wire.spaces import HostIn, MemberIn, SpaceIn, SpaceList, SpaceOut, SpaceSubmitted

_SPACE_ID = re.compile(r"[0-9a-f]{64}")


def _spaces(request: web.Request) -> Spaces:
    return request.app[NODE].spaces


def space_id_of(request: web.Request) -> str:
    """The path's space id; one that cannot be a space's is as unknown as a space the caller may not read."""
    raw = request.match_info["space_id"]
    if not _SPACE_ID.fullmatch(raw):
        raise NotFound("no such space here", field="space_id", code="unknown_space")
    return raw


def _status(out: SpaceSubmitted) -> int:
    return 201 if out.created else 200


async def post_space(request: web.Request) -> web.Response:
    body = convert(await read_json(request), SpaceIn)
    caller = agent_id(request)
    if body.record is not None:
        if body.name is not None:
            raise InvalidInput("send either a signed record or a name, not both", field="$.name")
        return json_response(out := await _spaces(request).submit(caller, body.record), _status(out))
    if body.name is None:
        raise InvalidInput("a space needs a name (or a signed `space` record)", field="$.name")
    out = await _spaces(request).create(caller, body.name, body.description)
    return json_response(out, _status(out))


async def list_spaces(request: web.Request) -> web.Response:
    return json_response(await _spaces(request).list_of(agent_id(request)))


async def get_space(request: web.Request) -> web.Response:
    return json_response(await _spaces(request).show(agent_id(request), space_id_of(request)))


async def post_member(request: web.Request) -> web.Response:
    space_id = space_id_of(request)
    body = convert(await read_json(request), MemberIn)
    caller = agent_id(request)
    if body.record is not None:
        if body.agent_id is not None or body.role is not None:
            raise InvalidInput("send either a signed record or agent_id and role, not both", field="$.agent_id")
        if body.record.get("space") != space_id:
            raise InvalidInput("the record is of another space", field="$.record.space", code="space_mismatch")
        out = await _spaces(request).submit(caller, body.record, body.pages)
        return json_response(out, _status(out))
    if body.pages:
        raise InvalidInput("pages come with the signed record they page", field="$.pages")
    if body.agent_id is None or not agent_refs.is_did(body.agent_id):
        raise InvalidInput("agent_id must be an agent's did:key", field="$.agent_id")
    if body.role is None:
        raise InvalidInput("role is one of admin, writer, reader, none", field="$.role")
    out = await _spaces(request).set_role(caller, space_id, body.agent_id, body.role)
    return json_response(out, _status(out))


async def delete_member(request: web.Request) -> web.Response:
    space_id = space_id_of(request)
    member = request.match_info["agent_id"]
    if not agent_refs.is_did(member):
        raise InvalidInput("the member must be an agent's did:key", field="agent_id")
    out = await _spaces(request).set_role(agent_id(request), space_id, member, "none")
    return json_response(out, _status(out))


async def post_host(request: web.Request) -> web.Response:
    space_id = space_id_of(request)
    body = convert(await read_json(request), HostIn)
    caller = agent_id(request)
    if body.record is not None:
        if body.node is not None or body.role is not None:
            raise InvalidInput("send either a signed record or node and role, not both", field="$.node")
        if body.record.get("kind") != "space_host":
            raise InvalidInput("the record must be a space_host record", field="$.record.kind", code="record_malformed")
        if body.record.get("space") != space_id:
            raise InvalidInput("the record is of another space", field="$.record.space", code="space_mismatch")
        out = await _spaces(request).submit(caller, body.record)
        return json_response(out, _status(out))
    if body.node is None or not keys.is_did(body.node):
        raise InvalidInput("node must be a node's did:key", field="$.node")
    if body.role is None:
        raise InvalidInput("role is host or none", field="$.role")
    out = await _spaces(request).set_host(caller, space_id, body.node, body.role)
    return json_response(out, _status(out))


async def delete_host(request: web.Request) -> web.Response:
    space_id = space_id_of(request)
    node = request.match_info["node_id"]
    if not keys.is_did(node):
        raise InvalidInput("the node must be a node's did:key", field="node_id")
    out = await _spaces(request).set_host(agent_id(request), space_id, node, "none")
    return json_response(out, _status(out))


ROUTES: list[Route] = [
    Route(
        "POST",
        "/v1/spaces",
        post_space,
        "Create a space: a name (the node signs the `space` record for a node-kept agent) or a signed `space`"
        " record; the caller owns it",
        "agent",
        body=SpaceIn,
        responses={201: SpaceSubmitted, 200: SpaceSubmitted},
        tag="spaces",
    ),
    Route(
        "GET",
        "/v1/spaces",
        list_spaces,
        "The spaces the caller has a role in",
        "agent",
        responses={200: SpaceList},
        tag="spaces",
    ),
    Route(
        "GET",
        "/v1/spaces/{space_id}",
        get_space,
        "A space, its members and its hosting nodes, to its members (404 unknown_space to anyone else)",
        "agent",
        responses={200: SpaceOut},
        tag="spaces",
    ),
    Route(
        "POST",
        "/v1/spaces/{space_id}/members",
        post_member,
        "Give an agent a role in the space (admin, writer, reader, none), or store a signed space_member or"
        " space_admin record (a lowering with the vouch pages of its vouch, `pages`): 403 not_a_space_admin, 409"
        " prior_conflict, unknown_prior, 422 bad_vouch_page, page_not_of_event",
        "agent",
        body=MemberIn,
        responses={201: SpaceSubmitted, 200: SpaceSubmitted},
        tag="spaces",
    ),
    Route(
        "DELETE",
        "/v1/spaces/{space_id}/members/{agent_id}",
        delete_member,
        "Remove a member (role none), vouching for its posts in the space the node holds",
        "agent",
        responses={201: SpaceSubmitted, 200: SpaceSubmitted},
        tag="spaces",
    ),
    Route(
        "POST",
        "/v1/spaces/{space_id}/hosts",
        post_host,
        "Name a node a host of the space (role host) or no longer (none), or store a signed space_host record"
        " (owner and admins): 403 not_a_space_admin, 409 prior_conflict, unknown_prior",
        "agent",
        body=HostIn,
        responses={201: SpaceSubmitted, 200: SpaceSubmitted},
        tag="spaces",
    ),
    Route(
        "DELETE",
        "/v1/spaces/{space_id}/hosts/{node_id}",
        delete_host,
        "Stop a node hosting the space (role none; owner and admins): it receives nothing new of it",
        "agent",
        responses={201: SpaceSubmitted, 200: SpaceSubmitted},
        tag="spaces",
    ),
]
