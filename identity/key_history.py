"""An identity's key history, decided from the key events a node holds (docs/format-v3.md, section 3).

`resolve` takes every key event of one identity that a node holds (records already verified: signature against
their named key, schema of `identity.schema_v3.KeyEventRecord`) and returns the winning chain, the key state at its
end and what happened to every event and key. `key_verdict` then decides a record of that identity from the key that
signed it. Both are pure functions of the set of events and pages given, in any order: the reference the node's
authority cache (docs/format-v3.md, 7.4) must agree with.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from identity import vouching

Role = Literal["recovery", "next", "current"]
KeyVerdict = Literal["valid", "void", "undecided"]
ROLE_RANK: dict[str, int] = {"recovery": 0, "next": 1, "current": 2}
ALLOWED_ROLES: dict[str, tuple[Role, ...]] = {
    "rotate": ("next", "current"),
    "revoke": ("recovery", "current"),
    "recover": ("recovery",),
}


@dataclass(frozen=True)
class KeyState:
    """What may sign for an identity after some event: its key (None after a revoke that installed none), the
    pre-rotation commitment, the recovery key, and every key the chain has installed so far (its first included)."""

    key: str | None
    next: str | None
    recovery: str | None
    used: frozenset[str]


@dataclass(frozen=True)
class History:
    """The outcome of `resolve` for one identity."""

    author: str
    chain: tuple[str, ...]  # addresses of the winning chain's events, seq 1 first
    state: KeyState  # the state at the chain's end
    removed_by: dict[str, str]  # key of the chain -> address of the chain's event that took authority from it
    vouched_by: dict[str, str]  # key of a replaced branch -> address of the latest chain event vouching for it
    losing_keys: frozenset[str]  # keys installed only by allowed events outside the chain
    refused: dict[str, str]  # address -> reason, for events that can never count
    waiting: frozenset[str]  # events whose prior is not held
    kept: frozenset[str]  # what a node stores: the chain, and at each of its places the best other allowed event
    events: dict[str, dict[str, Any]] = field(repr=False)  # every event given, by address
    states: dict[str, KeyState] = field(default_factory=dict, repr=False)  # allowed event -> the state after it


def initial_state(author_id: str) -> KeyState:
    """The state of an identity with no key event: its first key signs, no commitment, no recovery key."""
    return KeyState(author_id, None, None, frozenset({author_id}))


def commitment(did: str) -> str:
    """A pre-rotation commitment to a key: lowercase hex SHA-256 of its did:key string."""
    return hashlib.sha256(did.encode("ascii")).hexdigest()


def signer_of(record: dict[str, Any]) -> str:
    """The key that signed a record: its `signing_key`, else its author's first key."""
    return str(record.get("signing_key", record["author_id"]))


def role_of(state: KeyState, event: dict[str, Any]) -> Role | None:
    """The role the event's signer holds in `state` (roles are disjoint: keys are never reused)."""
    signer = signer_of(event)
    if state.recovery is not None and signer == state.recovery:
        return "recovery"
    if state.next is not None and commitment(signer) == state.next and event.get("key") == signer:
        return "next"
    if state.key is not None and signer == state.key:
        return "current"
    return None


def refusal(state: KeyState, event: dict[str, Any]) -> str | None:
    """Why `event` may not follow `state` (a stable word), or None when it may (docs/format-v3.md, 3.2 and 3.3)."""
    role = role_of(state, event)
    kind = event["event"]
    if role not in ALLOWED_ROLES[kind] or (role == "current" and state.next is not None):
        return "unauthorized_key_event"
    key = event.get("key")
    if key is not None and (key in state.used or key in (state.recovery, event.get("recovery"))):
        return "key_reused"
    new_recovery = event.get("recovery")
    if new_recovery is not None and state.recovery not in (None, new_recovery) and role != "recovery":
        return "unauthorized_recovery_change"
    subjects = {v["subject"] for v in event["vouches"]}
    if state.key is not None and state.key not in subjects:
        return "missing_vouch"
    return None


def apply(state: KeyState, event: dict[str, Any]) -> KeyState:
    """The state after an allowed event."""
    key = event.get("key")
    recovery = event.get("recovery", state.recovery)
    used = state.used | {key} if key is not None else state.used
    return KeyState(key, event.get("next"), recovery, used)


def resolve(author_id: str, events: Iterable[tuple[str, dict[str, Any]]]) -> History:
    """The key history of `author_id` from the (address, record) of every key event of it a node holds.

    Each event is judged in the state its own `prior` leads to; among allowed events with one prior the winner has
    the best role (recovery, next, current), then the smaller address; the winning chain follows winners from the
    initial state. Events of another author are ignored.
    """
    by_address = {address: record for address, record in events if record.get("author_id") == author_id}
    places = _judge_places(author_id, by_address)
    reachable = set(places.states) - {None}
    for address in by_address:
        unjudged = address not in reachable and address not in places.refused
        if unjudged and _refused_ancestor(address, by_address, places.refused):
            places.refused[address] = "prior_refused"
    waiting = frozenset(a for a in by_address if a not in reachable and a not in places.refused)
    return _follow_winners(author_id, by_address, places, waiting)


@dataclass
class _Places:
    """What judging every place of the event tree found: states after allowed events, winners, runners-up."""

    states: dict[str | None, KeyState]
    refused: dict[str, str]
    allowed_keys: set[str]
    winners: dict[str | None, str]
    runners_up: dict[str | None, str]


def _judge_places(author_id: str, by_address: Mapping[str, dict[str, Any]]) -> _Places:
    """Judge every event in the state its prior leads to, breadth first from the initial state."""
    children: dict[str | None, list[str]] = {}
    for address, record in by_address.items():
        children.setdefault(record.get("prior"), []).append(address)
    places = _Places({None: initial_state(author_id)}, {}, set(), {}, {})
    level: list[tuple[str | None, int]] = [(None, 0)]  # (parent address, parent seq), breadth first
    while level:
        following: list[tuple[str | None, int]] = []
        for parent, parent_seq in level:
            state = places.states[parent]
            ranked: list[tuple[int, str]] = []
            for address in sorted(children.get(parent, [])):
                record = by_address[address]
                reason = "bad_seq" if record["seq"] != parent_seq + 1 else refusal(state, record)
                if reason is not None:
                    places.refused[address] = reason
                    continue
                role = role_of(state, record)
                assert role is not None  # refusal() returned None
                ranked.append((ROLE_RANK[role], address))
                places.states[address] = apply(state, record)
                if record.get("key") is not None:
                    places.allowed_keys.add(record["key"])
                following.append((address, record["seq"]))
            ranked.sort()
            if ranked:
                places.winners[parent] = ranked[0][1]
            if len(ranked) > 1:
                places.runners_up[parent] = ranked[1][1]
        level = following
    return places


def _follow_winners(
    author_id: str, by_address: dict[str, dict[str, Any]], places: _Places, waiting: frozenset[str]
) -> History:
    """The winning chain from the initial state, what it removed and vouched for, and what a node keeps."""
    chain: list[str] = []
    removed_by: dict[str, str] = {}
    vouched_by: dict[str, str] = {}
    kept: set[str] = set()
    cursor: str | None = None
    while cursor in places.winners:
        before = places.states[cursor]
        if cursor in places.runners_up:
            kept.add(places.runners_up[cursor])
        cursor = places.winners[cursor]
        chain.append(cursor)
        if before.key is not None:
            removed_by[before.key] = cursor
        for vouch in by_address[cursor]["vouches"]:
            if vouch["subject"] != before.key:
                vouched_by[vouch["subject"]] = cursor
    final = places.states[cursor]
    chain_keys = final.used
    return History(
        author=author_id,
        chain=tuple(chain),
        state=final,
        removed_by=removed_by,
        vouched_by={k: v for k, v in vouched_by.items() if k not in chain_keys},
        losing_keys=frozenset(places.allowed_keys - chain_keys),
        refused=places.refused,
        waiting=waiting,
        kept=frozenset(kept | set(chain)),
        events=by_address,
        states={a: state for a, state in places.states.items() if a is not None},
    )


def _refused_ancestor(address: str, by_address: Mapping[str, dict[str, Any]], refused: Mapping[str, str]) -> bool:
    """True if some held ancestor of `address` was refused (then it can never count either)."""
    seen: set[str] = set()
    prior = by_address[address].get("prior")
    while prior is not None and prior in by_address and prior not in seen:
        if prior in refused:
            return True
        seen.add(prior)
        prior = by_address[prior].get("prior")
    return False


def key_order(history: History) -> dict[str, int]:
    """Each key of the winning chain by its place: the identity's first key 0, the key the chain's n-th event
    installs n (docs/format-v3.md 3.6 and 3.8: between two valid records, the one by the later key wins). A key
    the chain never installed (a replaced branch's, vouched for by a `recover`) is absent: it ranks before all."""
    order = {history.author: 0}
    for place, address in enumerate(history.chain, start=1):
        key = history.events[address].get("key")
        if key is not None:
            order[key] = place
    return order


DocumentRank = tuple[bool, int, int, str]


def document_rank(order: Mapping[str, int], signer: str, created_ms: int, address: str, verdict: str) -> DocumentRank:
    """The rank of an agent document among its author's (docs/format-v3.md 3.8), larger is newer: valid ones before
    every other, then the key latest in the winning chain (`key_order`; a key outside it before every key of it),
    then `(created_at, hash)` among documents of one key. A thief's forward-dated document signed by a revoked key
    is void and never outranks a valid one; one vouched for ranks by its older key."""
    return (verdict == "valid", order.get(signer, -1), created_ms, address)


def key_verdict(
    history: History, signing_key: str, version: str, pages: Mapping[tuple[str, str], Mapping[int, Sequence[str]]]
) -> KeyVerdict:
    """The verdict on the identity's record of `version` signed by `signing_key` (docs/format-v3.md, 3.5).

    `pages` maps (event address, subject) to the verified vouch pages held of that event's vouch for that subject.
    """
    if signing_key == history.state.key:
        return "valid"
    removal = history.removed_by.get(signing_key) or history.vouched_by.get(signing_key)
    if removal is not None:
        answer = vouching.decide(version, history.events[removal], signing_key, pages.get((removal, signing_key), {}))
        return "valid" if answer == "vouched" else answer
    if signing_key in history.losing_keys:
        return "void"
    return "undecided"


def request_key_verdict(history: History, signing_key: str) -> KeyVerdict:
    """The verdict on something an identity signed that is not a record (a node's signed sync request, RFC 9421):
    `valid` only for the key the history's chain ends with; `void` for a key the chain removed, a replaced branch's
    or a losing branch's (a request is in no vouched set, so `key_verdict`'s vouch decides nothing here); and
    `undecided` for a key no held event installs (its rotation has not arrived)."""
    if signing_key == history.state.key:
        return "valid"
    if signing_key in history.removed_by or signing_key in history.vouched_by or signing_key in history.losing_keys:
        return "void"
    return "undecided"
