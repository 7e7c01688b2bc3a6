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
- `link_across_spaces`: a record names (`node.spaces.posts.record_names`: an entry's links, a link record's ends, a
  message's dependencies, a redaction's target) a record of another space, or of a space when it is public, or a
  public one for a space's supersedes; a space's link naming an entry not known here waits for it
  (`space_undecided`, `target:<address>`): a record's space is a function of its record, so this is too
  (docs/decisions.md, records 72 and 75). Known: held in the log, in the batch (whatever becomes of it), or refused
  here as void before (its space remembered, `space_store.remember_refused_txn`).

A public record naming an address not held is taken (this node cannot know); when that address arrives as a record of
a space hosted here, `void_naming_txn` flags the public record void, so the space's hosts agree in every order.

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
from node.redaction import store as redaction_store
from node.spaces import store as space_store
from node.spaces.judged import Inputs, JudgedSpaces
from node.spaces.posts import Name, crosses, record_names
from node.store import void
from node.store.conn import Conn
from node.store.projections import space_of
from node.workflows.store import bus as bus_store
from sync.store import Invalid, Verified

NOT_HOSTED = "not_hosted"
UNDECIDED = "space_undecided"
FILTERED = "filtered"
ACROSS = "link_across_spaces"
UNREMEMBERED = frozenset({NOT_HOSTED, FILTERED, UNDECIDED})  # refusals that say nothing final of the record
NAMED_OUTSIDE = void.SPACE_REASON + ACROSS  # a stored record flagged for naming a space's record that came after it


class Gated(NamedTuple):
    """A peer's batch split: the records to store, the refused ones of spaces, and whether a refused one names this
    node a host (`joining`: the peer has the space's backlog for it, which a reconciliation brings at once)."""

    now: list[Verified]
    refused: list[Invalid]
    joining: bool


def gate_spaces_txn(
    conn: Conn,
    records: list[Verified],
    allowed: frozenset[str] | None = None,
    judged: JudgedSpaces | None = None,
    now_ms: int = 0,
) -> Gated:
    """Split a peer's batch into the records to store (public ones, and valid ones of a space this node hosts, in
    the batch's order) and the refused ones of spaces, each with its reason. `allowed`: the operator's filter of the
    peer (`bbs peer add --spaces`): a space outside it is refused `filtered`. `judged`: the resolutions of spaces'
    structure kept between batches (the writer's, `Authority.judged`; None: resolve each space afresh). A record of a
    hosted space refused as void has its space remembered (`space_store.remember_refused_txn`, at `now_ms`), so a
    link naming it is decided rather than left waiting (docs/decisions.md record 75). (A database no node was
    initialised on hosts no space.)"""
    by_space: dict[str, list[spaces.Held]] = {}
    for i, v in enumerate(records):
        space = space_of(v.record, v.hash)
        if space is not None:  # `address` carries the record's index in the batch; its version is hashed once
            by_space.setdefault(space, []).append(spaces.Held(str(i), v.version, v.record))
    refused: dict[int, Invalid] = {}
    if not by_space:
        _check_names(conn, records, refused)
        return Gated([v for i, v in enumerate(records) if i not in refused], list(refused.values()), False)
    node_id = space_store.this_node(conn) or ""
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
    _check_names(conn, records, refused)
    final = [(records[i].hash, space_of(records[i].record, records[i].hash), bad.reason) for i, bad in refused.items()]
    space_store.remember_refused_txn(
        conn, sorted((h, s, r) for h, s, r in final if s is not None and r not in UNREMEMBERED), now_ms
    )
    return Gated([v for i, v in enumerate(records) if i not in refused], list(refused.values()), joining)


def _check_names(conn: Conn, records: list[Verified], refused: dict[int, Invalid]) -> None:
    """Refuse each record taken so far that names (`node.spaces.posts.record_names`) a record of another space than
    its own, or of a space when it is public, or a public one for a space's supersedes link (`link_across_spaces`);
    let a space's record whose link names an entry not known wait for it (`space_undecided`, `target:<address>`).
    Known: a record held in the log (flagged or not), one of the batch (whatever becomes of it: its space is a function
    of its record), or one of a hosted space refused here as void before. The origin takes a space's link only naming
    a held entry (node/spaces/posts.py), so the verdict is the same in every arrival order and on every host; a public
    record naming an address not known is taken (docs/decisions.md record 75)."""
    naming = {i: names for i, v in enumerate(records) if i not in refused and (names := record_names(v.record))}
    if not naming:
        return
    wanted = sorted({name.address for names in naming.values() for name in names})
    # a record's space is a function of its record: every record of the batch tells it, whatever becomes of it,
    # and so does a record refused here as void before (`refused_records`) or redacted here (its tombstone)
    known = redaction_store.redacted_spaces(conn, wanted)
    known |= space_store.refused_records(conn, wanted) | space_store.named_records(conn, wanted)
    known |= {v.hash: space_of(v.record, v.hash) for v in records}
    for i, names in naming.items():
        if i not in refused and (bad := _name_refusal(records[i], names, known)):
            refused[i] = bad


def _name_refusal(v: Verified, names: list[Name], known: dict[str, str | None]) -> Invalid | None:
    """Why a record is refused for what it names, given the spaces of the records known; None: it is not."""
    space = space_of(v.record, v.hash)
    for name in names:
        if name.address in known and crosses(space, known[name.address], name.same_space):
            where = "this space" if space is not None else "the public federation"
            return Invalid(v.hash, ACROSS, f"{name.field} names a record outside {where}")
    if space is None:
        return None  # a public record may name an address not held: links resolve later
    waits = sorted({f"target:{name.address}" for name in names if name.link and name.address not in known})
    return Invalid(v.hash, UNDECIDED, "waits for " + ", ".join(waits)) if waits else None


def remember_void_txn(conn: Conn, records: list[Verified], voided: dict[str, str], now_ms: int) -> None:
    """Remember the space of each record of a space among `records` refused as void by its key (`voided`: hash to
    reason, node/federation/waiting.py), as the gate remembers the ones it refuses as void: a link of the space
    naming one is then decided rather than left waiting (docs/decisions.md record 75)."""
    if not voided:
        return
    spaced = [(v.hash, space_of(v.record, v.hash), voided[v.hash]) for v in records if v.hash in voided]
    space_store.remember_refused_txn(conn, sorted((h, s, r) for h, s, r in spaced if s is not None), now_ms)


def void_naming_txn(conn: Conn, stored: list[tuple[str, dict[str, Any]]], now_ms: int) -> int:
    """After a batch from a peer is stored: flag void (`space_link_across_spaces`, node/store/void.py) every public
    record stored before whose links (or a message's dependencies, a redaction's target) name one of the batch's
    newly stored records of a space. Such a record was taken because this node did not hold what it names (a public
    record may name an address not held); once it does, the record is what the gate refuses on arrival, so a space's
    hosts end with the same records whatever the order (docs/decisions.md record 75). A space's link naming what is
    not held waits instead of being stored, so no record of a space is flagged here (the space's vouched-set
    judgement, which unflags its posts, never meets this reason). `stored`: (hash, record) of the inserted records.
    Returns how many were flagged; costs nothing for a batch without records of a space."""
    spaced = {address: space for address, record in stored if (space := space_of(record, address)) is not None}
    if not spaced:
        return 0
    voided: dict[int, tuple[void.Stored, str]] = {}
    for n in space_store.naming_records(conn, sorted(spaced)):
        if n.seq not in voided and n.space is None:  # a space's link naming what is not held waits: never stored
            voided[n.seq] = (void.Stored(n.seq, n.hash, n.version, n.kind, n.author_id, n.author_id), NAMED_OUTSIDE)
    for m in bus_store.dependents_of(conn, spaced):  # a message's version is its address
        if m.seq not in voided and m.space is None:
            voided[m.seq] = (void.Stored(m.seq, m.hash, m.hash, "message", m.author_id, m.author_id), NAMED_OUTSIDE)
    public = [r for r in redaction_store.redactions_of(conn, sorted(spaced)) if r.space is None]
    flagged = void.flags_of(conn, [r.seq for r in public])
    for r in public:  # a redaction never waits for its target: a public one naming a space's record was stored
        if r.seq not in flagged:  # its version is its address (not an entry)
            voided[r.seq] = (void.Stored(r.seq, r.hash, r.hash, "redaction", r.author_id, r.author_id), NAMED_OUTSIDE)
    return void.flag_txn(conn, [voided[seq] for seq in sorted(voided)], [], now_ms)[0]


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
