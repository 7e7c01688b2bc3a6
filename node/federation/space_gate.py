"""What a node takes of a space's records from a peer (issue 38; docs/sync.md, "Spaces"): only those of a space it
hosts, and only those `identity.spaces.resolve` finds valid.

A peer's batch is split by space. The records of one space are judged together with the ones the log holds of it
(`identity.spaces.resolve`), so a batch that brings a space's creation, its hosting chains and its posts at once is
decided at once: this node takes them when it is a host of the space by that judgement
(`identity.space_rules.hosting`; the node a space was created on hosts it implicitly) and each record is valid.
Everything else is refused with a stable reason, counted against the peer and never remembered, so reconciliation
offers it again once it can count (the space's creation, or this node's hosting record, arrived meanwhile):

- `filtered`: the operator's filter of this peer leaves the space out (`bbs peer add --spaces`);
- `not_hosted`: this node does not host the space (nothing of it is stored: docs/spaces.md), but for a valid
  hosting record naming this node of a space it holds: the one that removes it, which it takes to stop hosting;
- `space_undecided`: the record waits for what it depends on (`Decision.waits_for`: the creation, a prior, the
  author's addition, a key, the pages of a vouch), which a later batch or reconciliation brings;
- the reason `resolve` gives a void record (`not_a_member`, `not_a_writer`, `unauthorized_membership`, ...).

A refused hosting record naming this node a host (a late host's feed brings it before the backlog it cannot decide
alone) asks the puller to reconcile with that peer at once (`Authority.wake`, at most once per `WAKE_EVERY_S`: 10 s),
which brings the whole backlog.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from identity import spaces
from identity.space_rules import hosting
from node.spaces import store as space_store
from node.store.conn import Conn
from node.store.projections import space_of
from sync.store import Invalid, Verified

NOT_HOSTED = "not_hosted"
UNDECIDED = "space_undecided"
FILTERED = "filtered"


class Gated(NamedTuple):
    """A peer's batch split: the records to store, the refused ones of spaces, and whether a refused one names this
    node a host (`joining`: the peer has the space's backlog for it, which a reconciliation brings at once)."""

    now: list[Verified]
    refused: list[Invalid]
    joining: bool


def gate_spaces_txn(conn: Conn, records: list[Verified], allowed: frozenset[str] | None = None) -> Gated:
    """Split a peer's batch into the records to store (public ones, and valid ones of a space this node hosts, in
    the batch's order) and the refused ones of spaces, each with its reason. `allowed`: the operator's filter of the
    peer (`bbs peer add --spaces`): a space outside it is refused `filtered`. (A database no node was initialised on
    hosts no space.)"""
    by_space: dict[str, list[Verified]] = {}
    for v in records:
        space = space_of(v.record, v.hash)
        if space is not None:
            by_space.setdefault(space, []).append(v)
    if not by_space:
        return Gated(records, [], False)
    node_id = space_store.this_node(conn) or ""
    refused: dict[str, Invalid] = {}
    joining = False
    for space, items in sorted(by_space.items()):
        if allowed is not None and space not in allowed:
            refused.update({v.version: Invalid(v.hash, FILTERED, "the operator's filter of this peer") for v in items})
            continue
        for v, reason, detail in _judge_space(conn, node_id, space, items):
            refused[v.version] = Invalid(v.hash, reason, detail)
            joining = joining or _names_host(v.record, node_id)
    return Gated([v for v in records if v.version not in refused], list(refused.values()), joining)


def _names_host(record: dict[str, Any], node_id: str) -> bool:
    """Whether `record` is a hosting record making `node_id` a host."""
    return record.get("kind") == "space_host" and record.get("node") == node_id and record.get("role") == "host"


def _judge_space(conn: Conn, node_id: str, space: str, items: list[Verified]) -> list[tuple[Verified, str, str]]:
    """The refused records of one space's part of a batch, with reason and detail."""
    held = space_store.held_records(conn, space)
    incoming = [spaces.Held(v.hash, v.version, v.record) for v in items]
    authors = {h.record["author_id"] for h in (*held, *incoming)}
    resolved = spaces.resolve([*held, *incoming], space_store.key_verdicts_txn(conn, authors))
    judged = resolved.spaces.get(space)
    created_here = node_id if space_store.created_here(conn, space) else None
    hosts = hosting(judged.hosts, created_here, judged.host_chains) if judged is not None else frozenset()
    if node_id not in hosts:  # but a valid hosting record naming this node: it learns it was removed
        detail = "this node does not host the space" if judged is not None else "the space is not held here"
        return [
            (v, NOT_HOSTED, detail)
            for v in items
            if judged is None or v.record.get("node") != node_id or resolved.decisions[v.version].verdict != "valid"
        ]
    out: list[tuple[Verified, str, str]] = []
    for v in items:
        decision = resolved.decisions.get(v.version)
        if decision is None:  # a redaction: its authority is decided against its target's body (node/redaction)
            continue
        if decision.verdict == "undecided":
            out.append((v, UNDECIDED, "waits for " + ", ".join(sorted(decision.waits_for))))
        elif decision.verdict == "void":
            out.append((v, decision.reason or "void", "the record does not count in its space"))
    return out
