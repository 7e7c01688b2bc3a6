"""Deciding the records whose authority depends on other records, in the ingest transaction (docs/format-v3.md 7).

`gate_txn` runs first in `node.federation.store.ingest_txn`, on the writer thread, over a peer's verified batch. Records
that need no key history (`Authority.needs` false: an identity with no key events, no `signing_key`) pass untouched,
at the cost of two dictionary lookups each. The others are decided against the writer's authority cache
(`node.store.authority`): key events first, by author and `seq` (each allowed one is taken into the cache at once,
so the batch's later records see it), then every other record by the key that signed it:

- valid: appended with the batch, exactly as a record that needs no history;
- void: refused (outcome `void` with its reason), stored nowhere (7.6);
- undecided: into the waiting area (`node.store.waiting`, outcome `waiting`), or dropped when a cap is full
  (`dropped_waiting`), for reconciliation to offer again;
- a key event that may never count (3.3): refused as `invalid` with its reason, remembered in `refused_versions`.

Then, in the same transaction, the waiting records the stored (or refused) key events may decide are re-checked
(`recheck_txn`): at most `waiting.RECHECK_PER_TRANSACTION`, the rest left in `Authority.pending` for the writer's
next jobs. Re-checked records decided valid are handed back by the peer they came from, to be appended as if they
had just arrived from it.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from node.store import equivocation, waiting
from node.store.authority import (
    AUTHORITY_KINDS,
    KEY_EVENT,
    LOSING_BRANCH,
    VOUCH_PAGE,
    Authority,
    Decision,
    author_deps,
    event_dep,
    judge_event_txn,
    pages_dep,
)
from node.store.conn import Conn
from node.store.waiting import Dep
from sync.store import Invalid, Outcome, Verified
from sync.verify import accepted


@dataclass
class Gated:
    """What `gate_txn` decided of a batch."""

    now: list[Verified]  # to append in this transaction, as the batch's records
    invalid: list[Invalid] = field(default_factory=list)  # key events refused for good
    outcomes: list[Outcome] = field(default_factory=list)  # waiting, dropped_waiting, void
    released: dict[str, list[Verified]] = field(default_factory=dict)  # re-checked waiting records now valid, by peer


def gate_txn(
    conn: Conn,
    authority: Authority,
    peer_id: str,
    records: list[Verified],
    now_ms: int,
    *,
    recheck: bool = True,
) -> Gated:
    """Decide the records of a batch from `peer_id` that depend on key histories (see the module's docstring)."""
    if not authority.loaded:  # once after a start (or a failed write): which identities have key events at all
        authority.ensure_txn(conn)
    if not any(authority.needs(v.record) for v in records):
        return Gated(records)
    if recheck:  # a job's first call; records released by a re-check come back here with the cache ahead of the log
        authority.ensure_txn(conn)
    for peer, dropped in waiting.expire_txn(conn, now_ms).items():
        waiting.count_txn(conn, peer, dropped_waiting=dropped)
    events = sorted(
        (v for v in records if v.record.get("kind") == KEY_EVENT),
        key=lambda v: (v.record["author_id"], v.record["seq"], v.hash),
    )
    pages = [v for v in records if v.record.get("kind") == VOUCH_PAGE]
    gated = Gated([])
    resolved: list[Dep] = []
    counts: Counter[str] = Counter()
    stored: list[str] = []
    for v in [*events, *pages, *(v for v in records if v.record.get("kind") not in AUTHORITY_KINDS)]:
        if not authority.needs(v.record):
            gated.now.append(v)
            continue
        version = v.version  # an entry's is a SHA-256 of its bytes: computed once
        decision = _decide(conn, authority, v, resolved, now_ms, version)
        if decision.verdict == "valid":
            gated.now.append(v)
            stored.append(version)
        elif decision.verdict == "void" and v.record.get("kind") in AUTHORITY_KINDS:
            equivocation.refuse_txn(conn, version, v.hash, now_ms)
            gated.invalid.append(
                Invalid(v.hash, decision.reason or "unauthorized_key_event", f"refused {v.record['kind']}")
            )
        elif decision.verdict == "void":
            gated.outcomes.append(Outcome(v.hash, "void", decision.reason))
            waiting.remember_void_txn(conn, version, v.record["author_id"], decision.reason or "void", now_ms)
            counts["void"] += 1
        elif _offer(conn, v, peer_id, decision, now_ms):
            gated.outcomes.append(Outcome(v.hash, "waiting"))
            counts["waiting"] += 1
        else:
            gated.outcomes.append(Outcome(v.hash, "dropped_waiting"))
            counts["dropped_waiting"] += 1
            authority.note_dropped(decision.deps, peer_id)
    waiting.remove_versions_txn(conn, stored)  # a copy that waited is decided with it
    waiting.count_txn(conn, peer_id, **counts)
    if recheck and resolved:
        gated.released = recheck_txn(conn, authority, tuple(resolved), 0, now_ms)
    return gated


def recheck_txn(
    conn: Conn, authority: Authority, deps: tuple[Dep, ...], after_id: int, now_ms: int
) -> dict[str, list[Verified]]:
    """Decide again the waiting records that wait for `deps` (those with id above `after_id`), and those that the
    key events so released decide in turn, up to `waiting.RECHECK_PER_TRANSACTION` records; what is left goes to
    `authority.pending`. Returns the records now valid by the peer they came from (the caller appends them);
    void ones are dropped and counted `void` to their peer, undecided ones stay with their new keys."""
    authority.resolve_dropped(deps)  # a dependency of dropped records: reconcile with their peers at once (7.3)
    released: dict[str, list[Verified]] = {}
    work: list[tuple[tuple[Dep, ...], int]] = [(deps, after_id)]
    budget = waiting.RECHECK_PER_TRANSACTION
    done: list[int] = []
    while work:
        wanted, after = work.pop(0)
        if budget <= 0:
            authority.pending.append((wanted, after))
            continue
        rows = waiting.select_txn(conn, wanted, after, budget)
        budget -= len(rows)
        if rows and budget <= 0:
            authority.pending.append((wanted, rows[-1].id))
        for row in rows:
            v = accepted(row.body, row.hash)
            found: list[Dep] = []
            decision = _decide(conn, authority, v, found, now_ms)
            if found:
                work.append((tuple(found), 0))
                authority.resolve_dropped(found)
            if decision.verdict == "undecided":
                waiting.set_deps_txn(conn, row.id, decision.deps)
                continue
            done.append(row.id)
            if decision.verdict == "valid":
                released.setdefault(row.peer_id, []).append(v)
            elif v.record.get("kind") in AUTHORITY_KINDS:
                equivocation.refuse_txn(conn, v.version, v.hash, now_ms)
                waiting.count_txn(conn, row.peer_id, void=1)
            else:
                waiting.remember_void_txn(conn, v.version, row.author_id, decision.reason or "void", now_ms)
                waiting.count_txn(conn, row.peer_id, void=1)
    waiting.remove_txn(conn, done)
    return released


def _decide(
    conn: Conn, authority: Authority, v: Verified, resolved: list[Dep], now_ms: int, version: str | None = None
) -> Decision:
    """The verdict on one record (`version`: its version when the caller has it already); a key event or vouch page
    taken into the cache (or refused) adds what it resolves."""
    if v.record.get("kind") == VOUCH_PAGE and "space" in v.record:  # a page of a space's removal: its key here,
        return authority.decide(v.record, v.version if version is None else version)  # its event by space_gate
    if v.record.get("kind") == VOUCH_PAGE:
        return _decide_page(conn, authority, v, resolved)
    if v.record.get("kind") != KEY_EVENT:
        return authority.decide(v.record, v.version if version is None else version)
    verdict, reason = judge_event_txn(conn, authority, v.hash, v.record, now_ms)
    if verdict == "valid":
        if not authority.holds_event(v.hash, v.record["author_id"]):
            authority.add_event(v.hash, v.record)
            waiting.forget_void_txn(conn, v.record["author_id"])  # its chain changed: they may count now
            resolved += [event_dep(v.hash), author_deps(v.record["author_id"])]
        return Decision("valid")
    prior = str(v.record.get("prior"))
    if verdict == "waiting" and not equivocation.refused(conn, [prior]):
        return Decision("undecided", deps=(event_dep(prior),))
    resolved.append(event_dep(v.hash))  # its children can never count either
    if reason == LOSING_BRANCH:  # its key now loses (3.4): records waiting for it are void
        resolved.append(author_deps(v.record["author_id"]))
    return Decision("void", reason or "prior_refused")


def _decide_page(conn: Conn, authority: Authority, v: Verified, resolved: list[Dep]) -> Decision:
    """The verdict on a vouch page: stored once its event is held and its proof verifies (docs/format-v3.md 6.4)."""
    verdict, reason = authority.judge_page(v.hash, v.record)
    if verdict == "valid":
        if not authority.holds_page(v.hash):
            authority.add_page(v.hash, v.record)
            resolved.append(pages_dep(v.record["event"], v.record["subject"]))
        return Decision("valid")
    event = str(v.record["event"])
    if verdict == "waiting" and not equivocation.refused(conn, [event]):
        return Decision("undecided", deps=(event_dep(event),))
    return Decision("void", reason or "bad_vouch_page")


def _offer(conn: Conn, v: Verified, peer_id: str, decision: Decision, now_ms: int) -> bool:
    """Put an undecided record in the waiting area; False when a cap drops it."""
    return waiting.offer_txn(
        conn,
        record_hash=v.hash,
        version=v.version,
        kind=str(v.record["kind"]),
        author_id=str(v.record["author_id"]),
        peer_id=peer_id,
        body=v.body,
        deps=decision.deps,
        now_ms=now_ms,
    )
