"""MCP tools for governed memory: reflect writes candidates (from a session, or consolidating recent entries);
review lists them, runs the critic, records a person's approve/reject and promotes one.

Their output stays a candidate (node-local, hidden from read and search) until an explicit promote.
Listed in `TOOLS`, which `agent.mcp_server.TOOLS` includes.
"""

from __future__ import annotations

import uuid
from typing import Any

from mcp.server.mcpserver import Context

from agent.mcp_common import ToolDef, client_of, domain_errors, out, pick, tool
from agent.mcp_schema import Action, action_argument, arguments, described_object
from wire.default_mode import (
    CandidateList,
    CandidateOut,
    CandidateQuery,
    ConsolidateIn,
    CriticIn,
    CriticResult,
    PromoteIn,
    ProposedCandidate,
    ReflectIn,
    ReflectResult,
    ReviewIn,
    SalienceWeights,
)

PREFIX = "/v1/default-mode"
RETRY_KEY = {"idempotency_key": {"type": "string", "minLength": 1, "maxLength": 128}}
SINCE = "ISO 8601"


def _once(key: str | None) -> str:
    """The call's idempotency key: the caller's, or a fresh one the client reuses across its own retries."""
    return key or uuid.uuid4().hex


REFLECT_ACTIONS = {
    "session": Action(frozenset(ReflectIn.__struct_fields__) | {"idempotency_key"}),
    "consolidate": Action(frozenset(ConsolidateIn.__struct_fields__) | {"idempotency_key"}),
}


@tool(
    "Write candidates, not memories. session: a transcript, or entries tagged session:<session_id> and/or"
    " project's messages; consolidate: the newest `limit` entries.",
    arguments(
        ReflectIn,
        ConsolidateIn,
        extra={"action": action_argument(REFLECT_ACTIONS, "session"), **RETRY_KEY},
        describe={"since": SINCE, "until": SINCE},
        shown={"weights": described_object(SalienceWeights, "salience weights 0..1")},
        actions=REFLECT_ACTIONS,
    ),
    rest=(f"POST {PREFIX}/reflect-session", f"POST {PREFIX}/consolidate"),
)
async def reflect(ctx: Context, args: dict[str, Any]) -> str:
    key = _once(args.get("idempotency_key"))
    async with domain_errors():
        client = await client_of(ctx)
        if args.get("action") == "consolidate":
            body: Any = pick(args, ConsolidateIn)
            return out(await client.call("POST", f"{PREFIX}/consolidate", CandidateOut, json=body, idempotency_key=key))
        body = pick(args, ReflectIn)
        result = await client.call("POST", f"{PREFIX}/reflect-session", ReflectResult, json=body, idempotency_key=key)
        return out({"candidates": result.candidates, "lines_scored": result.lines_scored, "dropped": result.dropped})


REVIEW_ACTIONS = {
    "list": Action(frozenset({"status", "limit", "offset"})),
    "critic": Action(frozenset({"candidate_ids", "candidates", "idempotency_key"})),
    "approve": Action(frozenset({"candidate_id", "note"}), frozenset({"candidate_id"})),
    "reject": Action(frozenset({"candidate_id", "note"}), frozenset({"candidate_id"})),
    "promote": Action(frozenset({"candidate_id", "scope", "idempotency_key"}), frozenset({"candidate_id"})),
}


@tool(
    "Candidates: list; critic (ids, new proposals or all proposed); approve/reject (a person's call); promote"
    " approved/needs_review into your entry.",
    arguments(
        CandidateQuery,
        CriticIn,
        ReviewIn,
        PromoteIn,
        skip=("decision", "record", "author"),
        extra={
            "action": action_argument(REVIEW_ACTIONS, "list"),
            "candidate_id": {"type": "integer", "minimum": 1},
            **RETRY_KEY,
        },
        shown={"candidates": described_object(ProposedCandidate, "proposals", array=True)},
        required=[],
        actions=REVIEW_ACTIONS,
    ),
    destructive=True,
    rest=(
        f"GET {PREFIX}/candidates",
        f"POST {PREFIX}/critic",
        f"POST {PREFIX}/candidates/{{candidate_id}}/review",
        f"POST {PREFIX}/promote/{{candidate_id}}",
    ),
    renames={"decision": "action"},
)
async def review(ctx: Context, args: dict[str, Any]) -> str:
    action, key = args.get("action", "list"), args.get("idempotency_key")
    async with domain_errors():
        client = await client_of(ctx)
        if action == "list":
            query: CandidateQuery = pick(args, CandidateQuery)
            params = [("status", s) for s in query.status] + [
                ("limit", str(query.limit)),
                ("offset", str(query.offset)),
            ]
            return out(await client.call("GET", f"{PREFIX}/candidates", CandidateList, params=params))
        if action == "critic":
            body = pick(args, CriticIn)
            return out(
                await client.call("POST", f"{PREFIX}/critic", CriticResult, json=body, idempotency_key=_once(key))
            )
        if action == "promote":
            scope = pick(args, PromoteIn).scope
            return out(await client.promote_candidate(args["candidate_id"], scope, idempotency_key=key))
        decision = pick({"decision": action, "note": args.get("note")}, ReviewIn)
        path = f"{PREFIX}/candidates/{args['candidate_id']}/review"
        return out(await client.call("POST", path, CandidateOut, json=decision))


TOOLS: list[ToolDef] = [reflect, review]
