"""REST edge of the default-mode runtime: parse, call DefaultMode, format. Paths under /v1/default-mode."""

from __future__ import annotations

from aiohttp import web

from node.default_mode.service import ADMIN, DefaultMode
from node.entries.queries import parse_since
from node.errors import InvalidInput
from node.web.appkeys import NODE
from node.web.auth import agent_id, principal
from node.web.http import Route, convert, decode_query, idempotency_header, json_response, read_json
from wire.default_mode import (
    CandidateList,
    CandidateOut,
    CandidateQuery,
    ConsolidateIn,
    CriticIn,
    CriticResult,
    EntryDraft,
    IncubateIn,
    PromoteIn,
    PromoteResult,
    ReflectIn,
    ReflectResult,
    ReviewIn,
    SimulateFutureIn,
    StakeholderIn,
    TemplateResult,
)

PREFIX = "/v1/default-mode"


def _rt(request: web.Request) -> DefaultMode:
    return request.app[NODE].default_mode


def _candidate_id(request: web.Request) -> int:
    raw = request.match_info["candidate_id"]
    if not (raw.isascii() and raw.isdigit()) or len(raw) > 18:
        raise InvalidInput("candidate id must be a positive integer", field="candidate_id")
    return int(raw)


async def reflect_session(request: web.Request) -> web.Response:
    body = convert(await read_json(request), ReflectIn)
    result, created = await _rt(request).reflect(agent_id(request), body, idempotency_header(request))
    return json_response(result, 201 if created else 200)


async def run_critic(request: web.Request) -> web.Response:
    body = convert(await read_json(request), CriticIn)
    result, _ = await _rt(request).critic(agent_id(request), body, idempotency_header(request))
    return json_response(result)


async def promote(request: web.Request) -> web.Response:
    cid = _candidate_id(request)
    body = convert(await read_json(request), PromoteIn) if request.can_read_body else PromoteIn()
    key = idempotency_header(request)
    if principal(request).is_admin:
        result = await _rt(request).promote_as_admin(cid, body, key)
    else:
        result = await _rt(request).promote(agent_id(request), cid, body, idempotency_key=key)
    return json_response(result, 201 if result.created else 200)


async def review(request: web.Request) -> web.Response:
    cid = _candidate_id(request)
    body = convert(await read_json(request), ReviewIn)
    who = principal(request)
    return json_response(await _rt(request).review(ADMIN if who.is_admin else agent_id(request), cid, body))


async def consolidate(request: web.Request) -> web.Response:
    body = convert(await read_json(request), ConsolidateIn) if request.can_read_body else ConsolidateIn()
    since_ms = parse_since(body.since, "$.since")
    result, created = await _rt(request).consolidate(agent_id(request), body, since_ms, idempotency_header(request))
    return json_response(result, 201 if created else 200)


async def simulate_future(request: web.Request) -> web.Response:
    body = convert(await read_json(request), SimulateFutureIn)
    result, created = await _rt(request).simulate_future(agent_id(request), body, idempotency_header(request))
    return json_response(result, 201 if created else 200)


async def stakeholder_simulation(request: web.Request) -> web.Response:
    body = convert(await read_json(request), StakeholderIn)
    result, created = await _rt(request).stakeholder_simulation(agent_id(request), body, idempotency_header(request))
    return json_response(result, 201 if created else 200)


async def incubate(request: web.Request) -> web.Response:
    body = convert(await read_json(request), IncubateIn)
    result, created = await _rt(request).incubate(agent_id(request), body, idempotency_header(request))
    return json_response(result, 201 if created else 200)


async def list_candidates(request: web.Request) -> web.Response:
    return json_response(
        await _rt(request).candidates(decode_query(request, CandidateQuery), principal(request).agent_id)
    )


async def get_candidate(request: web.Request) -> web.Response:
    return json_response(await _rt(request).candidate(_candidate_id(request), principal(request).agent_id))


async def get_draft(request: web.Request) -> web.Response:
    return json_response(await _rt(request).draft(_candidate_id(request), principal(request).agent_id))


def _route(method: str, path: str, handler: object, summary: str, auth: str, **kw: object) -> Route:
    return Route(method, PREFIX + path, handler, summary, auth, tag="default-mode", **kw)  # type: ignore[arg-type]


ROUTES: list[Route] = [
    _route("POST", "/reflect-session", reflect_session,
           "Score a transcript, or a session (tagged entries and/or a project's bus messages), for salience;"
           " store survivors as candidates, run the critic", "agent",
           body=ReflectIn, responses={201: ReflectResult, 200: ReflectResult}, idempotent=True),
    _route("POST", "/critic", run_critic, "Review candidates: risky or unevidenced ones go to needs_review",
           "agent", body=CriticIn, responses={200: CriticResult}, idempotent=True),
    _route("POST", "/promote/{candidate_id}", promote,
           "Promote an approved or needs_review candidate into a signed entry (a retry with its Idempotency-Key"
           " answers it again); the admin names the author", "any", body=PromoteIn,
           responses={201: PromoteResult, 200: PromoteResult}, idempotent=True),
    _route("POST", "/candidates/{candidate_id}/review", review,
           "A person's decision on a candidate: approve or reject (truth_state never changes)", "any",
           body=ReviewIn, responses={200: CandidateOut}),
    _route("POST", "/consolidate", consolidate,
           "Summarise recent entries into one needs_review hypothesis candidate", "agent",
           body=ConsolidateIn, responses={201: CandidateOut, 200: CandidateOut}, idempotent=True),
    _route("POST", "/simulate-future", simulate_future,
           "Fixed five-path checklist for a goal, stored as a simulation candidate", "agent",
           body=SimulateFutureIn, responses={201: TemplateResult, 200: TemplateResult},
           idempotent=True),
    _route("POST", "/stakeholder-simulation", stakeholder_simulation,
           "Fixed concerns and message adjustments for a stakeholder, labelled speculative", "agent",
           body=StakeholderIn, responses={201: TemplateResult, 200: TemplateResult},
           idempotent=True),
    _route("POST", "/incubate", incubate,
           "A problem crossed with six fixed reframing seeds, stored as a needs_review hypothesis", "agent",
           body=IncubateIn, responses={201: TemplateResult, 200: TemplateResult},
           idempotent=True),
    _route("GET", "/candidates", list_candidates, "List default-mode candidates (node-local)", "any",
           query=CandidateQuery, responses={200: CandidateList}),
    _route("GET", "/candidates/{candidate_id}", get_candidate, "One default-mode candidate", "any",
           responses={200: CandidateOut}),
    _route("GET", "/candidates/{candidate_id}/draft", get_draft,
           "The entry a promotable candidate becomes, for agents that sign their own records", "any",
           responses={200: EntryDraft}),
]  # fmt: skip
