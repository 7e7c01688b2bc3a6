"""What a redaction (or an operator's purge) does on this node (docs/format-v3.md 5.3; docs/api.md "Redaction"), in
the transaction that stores it or that would store its target's body:

- `project_redaction`, the projector of `redaction` records: the `redactions` row, then `apply_txn`;
- `redecide_txn`: the redactions of a space whose moderators changed decided again (sync ingest, a client's space
  records): applied where they hold now, undone where they hold no more;
- `apply_txn`: when the target's versions are held and the redaction holds against them (`rules.refusal`), every
  version is deleted from the log and remembered in `refused_versions` (`drop_held_txn`): its projection rows leave
  by its kind's switch (as a record flagged void does: node/store/void.py), the notifications of it go (an agent
  they had reached gets a notice of reason `redacted` instead, naming the redaction: `drop_txn`), and so do
  the default-mode candidates not promoted that cite it; the keys that stored it answer 409 `redacted`; the search
  index forgets the address (`search_redo`; answers hide at once, since every search reads its page back from
  `entries`); a tombstone is kept, and a scrub scheduled for the bytes still on disk (node/redaction/scrub.py);
- `purge_txn`: the operator's purge drops the same way, remembered in `purges`, with no tombstone;
- `screen_txn` (sync ingest, before the waiting area) and `screen_appended` (the log's screen, before every append):
  a body arriving after its redaction or purge is checked in memory against the redactions naming its address;
  where one holds, only the tombstone is kept and the body never touches the disk;
- `switch_redaction`, the kind's `Switch` (node/store/void.py): a redaction a later key event makes void (a
  revocation that does not vouch for it: a thief's) undoes what it did (`undo_txn`): its projection row goes, and
  unless another redaction still holds against the target, the tombstone, the refused versions and its notices go,
  and the versions it set aside are released; `restore_txn` (in the key event's transaction, after the switches)
  appends them again, each decided by its key. A redaction valid again (a recovery vouching for it) applies again.
  docs/decisions.md record 69.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any

from identity.schema_v3 import space_of
from node.default_mode import store as default_mode_store
from node.errors import Conflict
from node.inbox import store as inbox_store
from node.inbox.notify import NOTIFICATION_TTL_MS
from node.redaction import rules, store
from node.redaction.store import HeldVersion, PurgeRow, RedactionRow, TombstoneRow
from node.spaces import store as space_store
from node.store import equivocation, idempotency, projections, void, waiting
from node.store.authority import Authority
from node.store.conn import Conn
from node.store.projections import Incoming, Projection
from wire.redaction import Tombstone


def moderates_txn(conn: Conn) -> rules.Moderates:
    """`rules.Moderates` over the space records this connection's log holds (`identity.spaces` 5.2)."""

    def moderates(space: str, author: str, redaction: str) -> bool:
        return space_store.resolve_txn(conn, space).moderator(space, author, redaction).verdict == "valid"

    return moderates


def row_of(rec: Any, address: str, seq: int) -> RedactionRow:
    """The projection row of a decoded `redaction` record stored at `seq`."""
    reason = rec.reason if isinstance(rec.reason, str) else None
    return RedactionRow(address, seq, rec.target, rec.author_id, rec.created_at, space_of(rec), reason)


def project_redaction(conn: Conn, rec: Any, ctx: Projection) -> None:
    """Project a redaction record and drop its target's body when held and the redaction holds against it. Not
    while rebuilding (`ctx.notify` false): the targets it dropped are no longer in the log, and a target the log
    still holds is one it was void for when it was decided; a rebuild changes no log."""
    row = row_of(rec, ctx.hash, ctx.seq)
    store.insert_redaction_txn(conn, row)
    if ctx.notify:
        apply_txn(conn, row, ctx.now_ms)


def apply_txn(conn: Conn, row: RedactionRow, now_ms: int) -> TombstoneRow | None:
    """Drop every version of `row.target` held here when `row` holds against it (`rules.refusal` on the first
    version: every version carries the same author, kind and space); the tombstone kept, or None (nothing held, or
    the redaction is void for that target)."""
    held = store.held_versions(conn, row.target)
    if not held:
        return None
    if rules.refusal(row.author_id, row.space, row.hash, held[0].record, moderates_txn(conn)) is not None:
        return None
    return drop_txn(conn, row, held, now_ms)


MODERATION_KINDS = frozenset({"space_admin", "space_member", "vouch_page"})  # may change who moderates a space


def redecide_txn(conn: Conn, stored: Iterable[dict[str, Any]], now_ms: int) -> None:
    """After the records `stored` were stored (from a peer or a client), where some may change who moderates their
    space (`MODERATION_KINDS`: a promotion, a demotion, a removal's vouch pages; a key event's pages name no space),
    decide again each redaction of those spaces by a moderator: one whose target is
    still held (void for it when it came: its author was not yet an admin here) drops it when it holds now
    (`apply_txn`); one that dropped its target and holds no more (its author demoted by a removal that does not vouch
    for it: docs/format-v3.md 5.2, 6) is undone (`undo_txn`) and its set-aside versions are appended again
    (`restore_txn`). So every node ends with the same bodies whatever order the promotion, the redaction and the
    demotion reached it in. Two indexed look-ups when the spaces hold no redaction."""
    spaces = {str(r["space"]) for r in stored if r.get("kind") in MODERATION_KINDS and isinstance(r.get("space"), str)}
    if not spaces:
        return
    for row in store.redactions_of_held_in(conn, spaces):
        apply_txn(conn, row, now_ms)
    moderates = moderates_txn(conn)
    undone = False
    for row, tombstone in store.moderated_in(conn, spaces):
        target = {"kind": tombstone.kind, "author_id": tombstone.author_id, "space": tombstone.space}
        if rules.refusal(row.author_id, row.space, row.hash, target, moderates) is not None:
            undo_txn(conn, row, now_ms)
            undone = True
    if undone:
        restore_txn(conn, Authority(), now_ms)


def drop_txn(conn: Conn, row: RedactionRow, held: Sequence[HeldVersion], now_ms: int) -> TombstoneRow:
    """Delete the versions `held` of `row.target` from the log and every projection (`drop_held_txn`), keep the
    tombstone, and give each agent a notification of it had reached a notice of reason `redacted` instead."""
    seen = inbox_store.seen_by(conn, [h.seq for h in held])  # read before their notifications go
    store.set_aside_txn(conn, [h.seq for h in held])  # for the grace: a revocation may make the redaction void
    drop_held_txn(conn, row.target, held, now_ms)
    tombstone = keep_tombstone_txn(conn, row, held[0].record, [h.version for h in held], now_ms)
    # the agents it reached are told: their runtimes and candidates may hold copies (a notice names no body)
    inbox_store.insert_notices_txn(conn, seen, row.hash, now_ms, now_ms + NOTIFICATION_TTL_MS)
    return tombstone


def drop_held_txn(conn: Conn, address: str, held: Sequence[HeldVersion], now_ms: int) -> None:
    """Delete the versions `held` of `address` from the log (into `refused_versions`) and from every projection
    (their kind's switch, as for a record flagged void), forget their notifications and the default-mode
    candidates not promoted that cite it, schedule the scrub of their bytes."""
    store.drop_versions_txn(conn, address, [h.seq for h in held], now_ms)
    default_mode_store.forget_evidence_txn(conn, address)  # candidates made of it may quote it
    idempotency.forget_record_txn(conn, address)  # a retry of the post that stored it: 409, never stored again
    switches = projections.log_of(conn).switches
    for h in held:
        switch = switches.get(h.kind)
        if switch is not None:
            switch(conn, h.seq, address, h.record, False, now_ms)
    store.schedule_scrub_txn(conn, address, now_ms)


def purge_txn(conn: Conn, address: str, reason: str | None, now_ms: int) -> PurgeRow | None:
    """The operator's purge of `address` from this node alone (no tombstone shown, nothing federated): every
    version held is dropped as by a redaction, and the address is remembered so no version of it is stored again.
    None when this node holds no version of it."""
    held = store.held_versions(conn, address)
    if not held:
        return None
    before = store.purges(conn, [address])
    versions = sorted({*(before[0].versions if before else []), *(h.version for h in held)})
    first = held[0].record
    row = PurgeRow(address, str(first["kind"]), str(first["author_id"]), versions, reason, now_ms)
    drop_held_txn(conn, address, held, now_ms)
    store.insert_purge_txn(conn, row)
    return row


def keep_tombstone_txn(
    conn: Conn, row: RedactionRow, target: dict[str, Any], versions: list[str], now_ms: int
) -> TombstoneRow:
    """Keep (or extend with `versions`) the tombstone of `row.target`, whose body was `target`, and schedule the
    scrub of its bytes."""
    before = store.tombstones(conn, [row.target])
    known = before[0].versions if before else []
    tombstone = TombstoneRow(
        row.target,
        str(target["kind"]),
        str(target["author_id"]),
        str(target["created_at"]),
        target.get("space") if isinstance(target.get("space"), str) else None,
        sorted({*known, *versions}),
        before[0].redaction if before else row.hash,
        before[0].redacted_by if before else row.author_id,
        before[0].redacted_at if before else row.created_at,
        before[0].dropped_ms if before else now_ms,
    )
    store.insert_tombstone_txn(conn, tombstone)
    store.schedule_scrub_txn(conn, row.target, now_ms)
    return tombstone


def screen_txn(conn: Conn, arriving: Sequence[tuple[str, str, dict[str, Any]]], now_ms: int) -> set[str]:
    """Of the records `arriving` (address, version, record), the versions a stored redaction holds against: for each
    of them only the tombstone is kept (and the version remembered in `refused_versions`); the caller must not store
    them. One indexed look-up when no redaction names any of their addresses (the common case)."""
    if not store.any_named(conn, (address for address, _, _ in arriving)):
        return set()
    purged = {p.hash for p in store.purges(conn, (address for address, _, _ in arriving))}
    refused: set[str] = set()
    for address, version, _ in arriving:
        if address in purged:  # the operator purged it: no version comes back (no tombstone either)
            equivocation.refuse_txn(conn, version, address, now_ms)
            refused.add(version)
    found = store.redactions_of(conn, (address for address, _, _ in arriving))
    if not found:
        return refused
    by_target: dict[str, list[RedactionRow]] = {}
    for row in found:
        by_target.setdefault(row.target, []).append(row)
    moderates = moderates_txn(conn)
    for address, version, record in arriving:
        if version in refused:
            continue
        for row in by_target.get(address, []):
            if rules.refusal(row.author_id, row.space, row.hash, record, moderates) is None:
                equivocation.refuse_txn(conn, version, address, now_ms)
                keep_tombstone_txn(conn, row, record, [version], now_ms)
                refused.add(version)
                break
    return refused


def screen_appended(conn: Conn, items: Sequence[Incoming]) -> None:
    """The log's screen (`projections.Log.screens`): refuse, with 409 `redacted`, to append a record a stored
    redaction holds against (a client posting a redacted body again). Sync ingest screens its batch before
    (`screen_txn`), so it never meets this refusal."""
    if not store.any_named(conn, (item.hash for item in items)):
        return
    purged = store.purges(conn, (item.hash for item in items))
    if purged:
        raise Conflict(f"{purged[0].hash} was purged from this node by its operator", code="purged")
    rows = store.redactions_of(conn, (item.hash for item in items))
    if not rows:
        return
    moderates = moderates_txn(conn)
    for item in items:
        for row in rows:
            if row.target != item.hash:
                continue
            if rules.refusal(row.author_id, row.space, row.hash, item.record, moderates) is None:
                raise Conflict(f"{item.hash} was redacted here: its body is not stored again", code="redacted")


def switch_redaction(conn: Conn, seq: int, address: str, record: dict[str, Any], valid: bool, now_ms: int) -> None:
    """The redaction kind's `Switch` (node/store/void.py): flagged void by a later key event, the redaction at
    `address` undoes what it did (`undo_txn`); valid again (a recovery vouching for it), it applies again."""
    row = row_of(void.decoded(record), address, seq)
    if valid:
        store.insert_redaction_txn(conn, row)
        apply_txn(conn, row, now_ms)
        return
    store.delete_redaction_txn(conn, address)
    undo_txn(conn, row, now_ms)


def undo_txn(conn: Conn, row: RedactionRow, now_ms: int) -> None:
    """Undo the void redaction `row` (its projection row deleted already). Nothing when it had dropped nothing (its
    target never seen, or void for it). When another redaction of the target still holds (the author's own), the
    tombstone stays and names that one, and so do the notices. Else the target is no longer redacted here: the
    tombstone goes, its versions leave `refused_versions` (reconciliation fetches them again from peers that kept
    them), the notices of the redaction go, and the versions set aside within the grace are released for
    `restore_txn`; the redaction's scrub stays scheduled (it deletes what is left of the bytes; a restored entry's
    document is indexed again)."""
    kept = store.tombstones(conn, [row.target])
    if not kept:
        return
    tombstone = kept[0]
    target = {"kind": tombstone.kind, "author_id": tombstone.author_id, "space": tombstone.space}  # what 5.2 reads
    moderates = moderates_txn(conn)
    for other in store.redactions_of(conn, [row.target]):
        if other.hash == row.hash:
            continue
        if rules.refusal(other.author_id, other.space, other.hash, target, moderates) is None:
            if tombstone.redaction == row.hash:
                store.repoint_tombstone_txn(conn, row.target, other)
            inbox_store.repoint_notices_txn(conn, row.hash, other.hash)  # their envelope reads it through `other`
            return
    store.delete_tombstone_txn(conn, row.target)
    inbox_store.forget_notices_txn(conn, sorted({row.hash, tombstone.redaction}))
    if not store.purges(conn, [row.target]):  # the operator's purge still refuses every version
        equivocation.forget_refused_txn(conn, row.target)
    store.release_txn(conn, row.target)


def restore_txn(conn: Conn, authority: Authority, now_ms: int) -> int:
    """Append again the versions set aside whose redaction became void (`undo_txn`), in their old log order, through
    the log's normal append path (projections, notifications of subscribers, the search index's catch-up), each
    decided by its key as if it had just arrived (`Authority.decide`): a void one is not stored and is remembered
    as a void refusal (docs/format-v3.md 7.6), as on a node it reaches after the key event. Runs in the key event's
    transaction, after `void.reflag_txn`'s switches. How many were stored."""
    rows = store.released(conn)
    if not rows:
        return 0
    purged = {p.hash for p in store.purges(conn, {r.hash for r in rows})}
    restored = 0
    for aside in rows:
        if aside.hash in purged:
            continue
        record = json.loads(aside.body)
        if authority.needs(record):
            decision = authority.decide(record, aside.version)
            if decision.verdict == "void":
                waiting.remember_void_txn(conn, aside.version, str(record["author_id"]), decision.reason or "void",
                                          now_ms)  # fmt: skip
                continue
        item = Incoming(record, aside.hash, void.decoded(record), aside.scope, aside.body, aside.version)
        projections.append_many(conn, [item], origin=aside.origin, now_ms=now_ms)
        restored += 1
    return restored


def tombstone_out(row: TombstoneRow) -> Tombstone:
    """The wire form of a tombstone."""
    return Tombstone(
        hash=row.hash,
        kind=row.kind,
        author_id=row.author_id,
        created_at=row.created_at,
        redacted_by=row.redacted_by,
        redacted_at=row.redacted_at,
        redaction=row.redaction,
        space=row.space,
        versions=row.versions,
    )
