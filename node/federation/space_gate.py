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
- the reason `resolve` gives a void record (`not_a_member`, `not_a_writer`, `unauthorized_membership`, ...);
- `link_across_spaces`: an entry's link or a link record names an entry of another space (or a public one, for a
  space's supersedes); one naming an entry neither held nor in the batch waits for it (`space_undecided`,
  `target:<address>`): an entry's space is a function of its record, so this is too (docs/decisions.md, record 72).

A batch of a space's posts alone is decided against the space's structure resolved once and kept in `judged` while
the addresses it was made from are the log's (node/spaces/judged.py), so its cost does not grow with the space; a
batch with structure records of the space is judged whole with them.

A refused hosting record naming this node a host (a late host's feed brings it before the backlog it cannot decide
alone) asks the puller to reconcile with that peer at once (`Authority.wake`, at most once per `WAKE_EVERY_S`: 10 s),
which brings the whole backlog.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from identity import spaces
from identity.space_rules import hosting
from node.spaces import store as space_store
from node.spaces.judged import Inputs, JudgedSpaces
from node.spaces.posts import Name, crosses, link_names
from node.store.conn import Conn
from node.store.projections import space_of
from sync.store import Invalid, Verified

NOT_HOSTED = "not_hosted"
UNDECIDED = "space_undecided"
FILTERED = "filtered"
ACROSS = "link_across_spaces"


class Gated(NamedTuple):
    """A peer's batch split: the records to store, the refused ones of spaces, and whether a refused one names this
    node a host (`joining`: the peer has the space's backlog for it, which a reconciliation brings at once)."""

    now: list[Verified]
    refused: list[Invalid]
    joining: bool


def gate_spaces_txn(
    conn: Conn, records: list[Verified], allowed: frozenset[str] | None = None, judged: JudgedSpaces | None = None
) -> Gated:
    """Split a peer's batch into the records to store (public ones, and valid ones of a space this node hosts, in
    the batch's order) and the refused ones of spaces, each with its reason. `allowed`: the operator's filter of the
    peer (`bbs peer add --spaces`): a space outside it is refused `filtered`. `judged`: the resolutions of spaces'
    structure kept between batches (the writer's, `Authority.judged`; None: resolve each space afresh). (A database
    no node was initialised on hosts no space.)"""
    by_space: dict[str, list[spaces.Held]] = {}
    for i, v in enumerate(records):
        space = space_of(v.record, v.hash)
        if space is not None:  # `address` carries the record's index in the batch; its version is hashed once
            by_space.setdefault(space, []).append(spaces.Held(str(i), v.version, v.record))
    if not by_space:
        return Gated(records, [], False)
    node_id = space_store.this_node(conn) or ""
    refused: dict[int, Invalid] = {}
    joining = False
    for space, items in sorted(by_space.items()):
        if allowed is not None and space not in allowed:
            detail = "the operator's filter of this peer"
            refused.update({int(h.address): Invalid(records[int(h.address)].hash, FILTERED, detail) for h in items})
            continue
        incoming = [spaces.Held(records[int(h.address)].hash, h.version, h.record) for h in items]
        for i, (_, reason, detail) in zip(
            (int(h.address) for h in items), _judge_space(conn, node_id, space, incoming, judged), strict=True
        ):
            if reason is not None:
                refused[i] = Invalid(records[i].hash, reason, detail)
                joining = joining or _names_host(records[i].record, node_id)
    _check_links(conn, records, refused)
    return Gated([v for i, v in enumerate(records) if i not in refused], list(refused.values()), joining)


def _check_links(conn: Conn, records: list[Verified], refused: dict[int, Invalid]) -> None:
    """Refuse each record of a space taken so far whose links (`node.spaces.posts.link_names`) name an entry of
    another space, or a public one for a supersedes link (`link_across_spaces`), and let one naming an entry neither
    held nor taken in this batch wait for it (`space_undecided`, `target:<address>`). An entry's space is a function
    of its record, which every host of the space comes to hold when it is public or of the space (the origin took the
    link only naming a held entry: node/spaces/posts.py), so the verdict is the same in every arrival order and on
    every host; an entry of a space this node does not host is never held here, and the link never stored."""
    naming = {
        i: names
        for i, v in enumerate(records)
        if i not in refused and isinstance(v.record.get("space"), str) and (names := link_names(v.record))
    }
    if not naming:
        return
    wanted = sorted({name.address for names in naming.values() for name in names})
    held = {address: space for address, (space, _) in space_store.named_entries(conn, wanted).items()}
    while True:  # a refused entry is no longer taken: what names it in this batch waits for it
        known = held | {
            v.hash: v.record.get("space")
            for i, v in enumerate(records)
            if i not in refused and v.record.get("kind") == "entry"
        }
        newly = {
            i: bad
            for i, names in naming.items()
            if i not in refused and (bad := _link_refusal(records[i], names, known))
        }
        if not newly:
            return
        refused.update(newly)


def _link_refusal(v: Verified, names: list[Name], known: dict[str, str | None]) -> Invalid | None:
    """Why a record of a space is refused for its links, given the spaces of the entries known; None: it is not."""
    space = v.record["space"]
    for name in names:
        if name.address in known and crosses(space, known[name.address], name.same_space):
            detail = f"{name.field} names an entry outside this space"
            return Invalid(v.hash, ACROSS, detail)
    waits = sorted({f"target:{name.address}" for name in names if name.address not in known})
    return Invalid(v.hash, UNDECIDED, "waits for " + ", ".join(waits)) if waits else None


def _names_host(record: dict[str, Any], node_id: str) -> bool:
    """Whether `record` is a hosting record making `node_id` a host."""
    return record.get("kind") == "space_host" and record.get("node") == node_id and record.get("role") == "host"


def _judge_space(
    conn: Conn, node_id: str, space: str, incoming: list[spaces.Held], judged: JudgedSpaces | None
) -> list[tuple[spaces.Held, str | None, str]]:
    """Each record of one space's part of a batch with the reason it is refused (None: taken) and a detail."""
    if any(
        h.record.get("kind") not in spaces.POST_KINDS and h.record.get("kind") in spaces.SPACE_KINDS for h in incoming
    ):
        resolved, decisions = _resolve_with(conn, space, incoming)  # the space's structure moves: judge it all
    else:  # posts only: decided against the space's structure resolved once (node/spaces/judged.py)
        resolved = _structure(conn, space, judged)
        posts = [h for h in incoming if h.record.get("kind") in spaces.POST_KINDS]
        decisions = resolved.decide_posts(space, posts, space_store.key_verdicts_txn(conn, _authors(posts)))
    space_now = resolved.spaces.get(space)
    created_here = node_id if space_store.created_here(conn, space) else None
    hosts = hosting(space_now.hosts, created_here, space_now.host_chains) if space_now is not None else frozenset()
    if node_id not in hosts:  # but a valid hosting record naming this node: it learns it was removed
        detail = "this node does not host the space" if space_now is not None else "the space is not held here"
        return [
            (h, None, "")
            if space_now is not None and h.record.get("node") == node_id and decisions[h.version].verdict == "valid"
            else (h, NOT_HOSTED, detail)
            for h in incoming
        ]
    return [(h, *_refusal(decisions.get(h.version))) for h in incoming]


def _refusal(decision: spaces.Decision | None) -> tuple[str | None, str]:
    """The reason and detail a record of a hosted space is refused for, (None, "") when it is taken. No decision:
    a redaction, whose authority is decided against its target's body (node/redaction)."""
    if decision is None or decision.verdict == "valid":
        return None, ""
    if decision.verdict == "undecided":
        return UNDECIDED, "waits for " + ", ".join(sorted(decision.waits_for))
    return decision.reason or "void", "the record does not count in its space"


def _authors(records: list[spaces.Held]) -> set[str]:
    return {str(h.record["author_id"]) for h in records}


def _resolve_with(
    conn: Conn, space: str, incoming: list[spaces.Held]
) -> tuple[spaces.Spaces, dict[str, spaces.Decision]]:
    """`resolve` over the space's records held and `incoming` together, and its decisions."""
    every = [*space_store.held_records(conn, space), *incoming]
    resolved = spaces.resolve(every, space_store.key_verdicts_txn(conn, _authors(every)))
    return resolved, resolved.decisions


def _structure(conn: Conn, space: str, judged: JudgedSpaces | None) -> spaces.Spaces:
    """The resolution of the space's records held (its structure: `space_records`), kept in `judged` and used again
    while its inputs, read as addresses, are the same."""
    held = space_store.held_addresses(conn, space)
    inputs = Inputs(tuple(a for a, _ in held), tuple(space_store.key_addresses(conn, {author for _, author in held})))
    kept = judged.get(space, inputs) if judged is not None else None
    if kept is not None:
        return kept
    records = space_store.held_records(conn, space)
    resolved = spaces.resolve(records, space_store.key_verdicts_txn(conn, _authors(records)))
    if judged is not None:
        judged.put(space, inputs, resolved)
    return resolved
