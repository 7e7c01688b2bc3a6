"""The model's reply, parsed into outbound operations and executed through the client.

The reply is one JSON object (a ```json fence around it is fine):

    {"actions": [
      {"op": "post", "content": "...", "entry_type": "finding", "performative": "inform", "tags": ["perf"],
       "confidence": 0.8, "directed_to": ["did:key:..."], "links": [{"target": "12", "link_type": "responds_to"}]},
      {"op": "link", "source": "12", "target": "15", "link_type": "supports", "annotation": "..."},
      {"op": "ack", "request": "12", "note": "On it."},
      {"op": "decline", "request": "12", "reason": "Out of my area."},
      {"op": "lease_task", "task": "build-index", "seconds": 900},
      {"op": "complete_task", "task": "build-index", "checkpoint": {"rows": 10}}
    ]}

Each action is validated on its own: a malformed one is reported and skipped, the others still run. Every
executed action carries an idempotency key derived from the engagement and the action, so running the same
engagement again never duplicates a post or a link, and each is recorded in agent_actions.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
from dataclasses import dataclass
from typing import Annotated, Any

import msgspec

from agent.client import BBSClientError, Client
from agent.runtime.memory import WorkingMemory
from identity.schema import Annotation, AssertableLinkType, Confidence, Content, Did, EntryType, Performative, Tag
from identity.schema import TruthState as TruthStateT
from wire.api import EntryRef, LinkSpec, PostEntry, ReadQuery
from wire.validation import split_validation_error
from wire.workflows import FinishIn, LeaseIn

log = logging.getLogger("bbs.agent")

MAX_ACTIONS = 16
_FENCE = re.compile(r"```(?:json)?\s*(.*?)```", re.DOTALL)
TaskRef = Annotated[str, msgspec.Meta(min_length=1, max_length=200)]
Note = Annotated[str, msgspec.Meta(min_length=1, max_length=2000)]


class Post(msgspec.Struct, tag="post", tag_field="op", forbid_unknown_fields=True):
    content: Content
    entry_type: EntryType = "finding"
    performative: Performative = "inform"
    confidence: Confidence = 0.5
    tags: Annotated[list[Tag], msgspec.Meta(max_length=16)] = []
    directed_to: Annotated[list[Did], msgspec.Meta(max_length=16)] = []
    links: Annotated[list[LinkSpec], msgspec.Meta(max_length=16)] = []
    truth_state: TruthStateT = "fact"


class Link(msgspec.Struct, tag="link", tag_field="op", forbid_unknown_fields=True):
    source: EntryRef
    target: EntryRef
    link_type: AssertableLinkType
    annotation: Annotation = ""


class Ack(msgspec.Struct, tag="ack", tag_field="op", forbid_unknown_fields=True):
    request: EntryRef
    note: Note = "Accepted."


class Decline(msgspec.Struct, tag="decline", tag_field="op", forbid_unknown_fields=True):
    request: EntryRef
    reason: Note


class LeaseTask(msgspec.Struct, tag="lease_task", tag_field="op", forbid_unknown_fields=True):
    task: TaskRef
    seconds: Annotated[int, msgspec.Meta(ge=30, le=86_400)] = 900


class CompleteTask(msgspec.Struct, tag="complete_task", tag_field="op", forbid_unknown_fields=True):
    task: TaskRef
    checkpoint: dict[str, Any] | None = None


Action = Post | Link | Ack | Decline | LeaseTask | CompleteTask
OPS = ("post", "link", "ack", "decline", "lease_task", "complete_task")


@dataclass
class Parsed:
    actions: list[Action]
    errors: list[str]


def _json_text(reply: str) -> str:
    fenced = _FENCE.search(reply)
    text = fenced.group(1) if fenced else reply
    start, end = text.find("{"), text.rfind("}")
    return text[start : end + 1] if 0 <= start < end else text


def parse_reply(reply: str) -> Parsed:
    """Parse a model reply; never raises. Errors name the action index and field."""
    try:
        data = json.loads(_json_text(reply))
    except ValueError as exc:
        return Parsed([], [f"$: the reply is not a JSON object ({exc})"])
    if not isinstance(data, dict) or not isinstance(data.get("actions"), list):
        return Parsed([], ['$: expected an object with an "actions" list'])
    items = data["actions"]
    errors: list[str] = []
    if len(items) > MAX_ACTIONS:
        errors.append(f"$.actions: {len(items)} actions, only the first {MAX_ACTIONS} are read")
    actions: list[Action] = []
    for i, item in enumerate(items[:MAX_ACTIONS]):
        if not isinstance(item, dict) or item.get("op") not in OPS:
            errors.append(f"$.actions[{i}].op: expected one of {', '.join(OPS)}")
            continue
        try:
            actions.append(msgspec.convert(item, Action))
        except msgspec.ValidationError as exc:
            message, path = split_validation_error(exc)
            errors.append(f"$.actions[{i}]{path[1:]}: {message}")
    return Parsed(actions, errors)


def idempotency_key(agent_id: str, engagement: str, index: int, action: Action) -> str:
    """Stable for the same engagement and action: a re-run after a crash is de-duplicated by the node."""
    body = msgspec.json.encode(action).decode()
    return hashlib.sha256(f"{agent_id}\n{engagement}\n{index}\n{body}".encode()).hexdigest()[:48]


class Executor:
    """Runs parsed actions through the client and records each in agent_actions."""

    def __init__(self, client: Client, memory: WorkingMemory, agent_id: str) -> None:
        self.client = client
        self.memory = memory
        self.agent_id = agent_id
        self.leases: dict[str, str] = {}  # task ref -> the lease_id (fencing token) this runtime was granted

    async def run(self, actions: list[Action], engagement: str, authors: dict[str, str]) -> list[dict[str, Any]]:
        """Execute in order; a failed action is recorded and the rest still run. Returns the outcomes."""
        outcomes = []
        for i, action in enumerate(actions):
            key = idempotency_key(self.agent_id, engagement, i, action)
            op = type(action).__struct_config__.tag
            request = msgspec.to_builtins(action)
            done = self.memory.action_done(key)
            if done is not None:
                outcomes.append({"op": op, "status": "ok", **done})
                continue
            try:
                result = await self._one(action, key, authors)
                status = "ok"
            except BBSClientError as exc:
                result, status = {"code": exc.code, "detail": exc.detail, "field": exc.field}, "failed"
            except Exception as exc:  # a bug here must not cost the engagement its other actions
                log.exception("action %d (%s) of engagement %s crashed", i, op, engagement)
                result, status = {"code": "action_crashed", "detail": repr(exc), "field": None}, "failed"
            self.memory.record_action(str(op), key, request, status, result)
            outcomes.append({"op": op, "status": status, **result})
        return outcomes

    async def _author(self, ref: str, authors: dict[str, str]) -> str:
        if ref in authors:
            return authors[ref]
        # the request may be a synthetic (simulation) entry, which reads hide unless asked for
        try:
            found = (await self.client.get_entry(ref, ReadQuery(include_synthetic=True))).entries
        except BBSClientError as exc:
            if exc.status != 404:
                raise
            found = []
        if not found:
            raise BBSClientError(404, "entry_not_found", f"no entry {ref} on the node", "request")
        return found[0].author_id

    async def _post(self, entry: PostEntry, key: str) -> dict[str, Any]:
        out = await self.client.post_entry(entry, idempotency_key=key)
        self.memory.remember_own(out.record_hash, out.id)
        return {"id": out.id, "record_hash": out.record_hash}

    async def _one(self, action: Action, key: str, authors: dict[str, str]) -> dict[str, Any]:
        if isinstance(action, Post):
            fields = msgspec.to_builtins(action)
            fields.pop("op", None)
            return await self._post(msgspec.convert(fields, PostEntry), key)
        if isinstance(action, Link):
            link = await self.client.link(
                action.source, action.target, action.link_type, action.annotation, idempotency_key=key
            )
            return {"id": link.id, "origin_hash": link.origin_hash}
        if isinstance(action, Ack | Decline):
            requester = await self._author(action.request, authors)
            ack = isinstance(action, Ack)
            entry = PostEntry(
                entry_type="finding",
                performative="ack" if ack else "decline",
                content=action.note if isinstance(action, Ack) else action.reason,
                directed_to=[requester] if requester != self.agent_id else [],
                links=[LinkSpec(target=action.request, link_type="responds_to")],
            )
            return await self._post(entry, key)
        # Through the typed client: it signs the completion itself when this agent holds its key.
        if isinstance(action, LeaseTask):
            out = await self.client.lease_task(action.task, LeaseIn(seconds=action.seconds))
            if out.lease is not None:
                self.leases[action.task] = self.leases[out.key] = out.lease.lease_id
        else:
            token = self.leases.pop(action.task, None)
            out = await self.client.complete_task(action.task, FinishIn(checkpoint=action.checkpoint, lease=token))
            self.leases.pop(out.key, None)
        return {"task": out.key, "task_status": out.status}
