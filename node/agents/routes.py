"""REST routes of key-proof authentication (POST /v1/auth/challenge, /v1/auth/session): parse, call
node/agents/sessions.py, format."""

from __future__ import annotations

from aiohttp import web

from node.agents.sessions import issue_challenge, open_session
from node.web.appkeys import NODE
from node.web.http import Route, convert, json_response, read_json
from wire.api import ChallengeIn, ChallengeOut, SessionIn, SessionOut


async def post_challenge(request: web.Request) -> web.Response:
    body = convert(await read_json(request), ChallengeIn)
    return json_response(await issue_challenge(request.app[NODE], body.agent_id), 201)


async def post_session(request: web.Request) -> web.Response:
    body = convert(await read_json(request), SessionIn)
    return json_response(await open_session(request.app[NODE], body), 201)


ROUTES: list[Route] = [
    Route(
        "POST",
        "/v1/auth/challenge",
        post_challenge,
        "Get a one-time challenge to prove an agent key",
        "none",
        body=ChallengeIn,
        responses={201: ChallengeOut},
        tag="auth",
    ),
    Route(
        "POST",
        "/v1/auth/session",
        post_session,
        "Exchange a signed challenge for a session token",
        "none",
        body=SessionIn,
        responses={201: SessionOut},
        tag="auth",
    ),
]
