"""The default-mode runtime's operations. Each reads records and writes candidates, or (promote only)
writes one entry through the node's single write path. Nothing else: no network, files or processes.

`DefaultMode` is the one object: the proposing side (reflect, critic, consolidate, templates, listing) is
`Proposals` in node/default_mode/proposals.py; promotion and human review are here.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

import msgspec

from identity import canonical
from node.default_mode import store
from node.default_mode.proposals import Proposals, RecordStore, SpaceRules
from node.errors import BBSError, Conflict, Forbidden, InvalidInput, NotFound
from node.spaces.sight import OPERATOR, Sight, Viewer
from node.store import idempotency
from node.store.conn import Conn
from wire.api import EntryOut, LinkSpec, PostEntry, ReadQuery, ReadResult, SignedSubmission
from wire.default_mode import CandidateOut, EntryDraft, PromoteIn, PromoteResult, ReviewIn

MAX_INLINE_LINKS = 32  # identity.schema.MAX_LINKS_PER_ENTRY; further evidence links are separate link records
PROMOTABLE = ("approved", "needs_review")
ADMIN = "admin"  # how a decision or promotion requested by the node's admin (who has no did) is recorded

# What a promoted candidate becomes: (entry_type, performative).
ENTRY_SHAPE: dict[str, tuple[str, str]] = {
    "open_question": ("question", "query"),
    "decision": ("finding", "inform"),
    "open_loop": ("task", "propose"),
    "preference": ("finding", "inform"),
    "risk": ("finding", "inform"),
    "reflection": ("finding", "inform"),
    "consolidation": ("synthesis", "inform"),
    "simulation": ("synthesis", "propose"),
    "stakeholder_simulation": ("synthesis", "propose"),
    "incubation": ("synthesis", "propose"),
}


class EntryWriter(Protocol):
    """The node's one write path of entries, as promotion uses it (`Entries.post_with`)."""

    async def post_with(
        self,
        agent_id: str,
        body: Any,
        idempotency_key: str,
        *,
        derived_from: list[str],
        then: Callable[[Conn, EntryOut], None],
    ) -> tuple[EntryOut, bool]: ...


class EntryReader(Protocol):
    """Reading entries by id or hash (`Reads.read`)."""

    async def read(self, refs: list[str], q: ReadQuery, viewer: Viewer) -> ReadResult: ...


class NotPromotable(BBSError):
    status, code, title = 400, "candidate_not_promotable", "Candidate not promotable"


class DefaultMode(Proposals):
    """The runtime bound to one node (built once, by `Node`: one promote lock per node)."""

    def __init__(
        self,
        db: RecordStore,
        node_id: str,
        now_ms: Callable[[], int],
        entries: EntryWriter,
        reads: EntryReader,
        spaces: SpaceRules,
    ) -> None:
        super().__init__(db, now_ms, spaces)
        self.node_id = node_id
        self.entries = entries
        self.reads = reads

    # ---- promote ----------------------------------------------------------------------------------------

    async def promote(
        self,
        agent_id: str,
        candidate_id: int,
        body: PromoteIn,
        requested_by: str | None = None,
        idempotency_key: str | None = None,
    ) -> PromoteResult:
        """Turn an approved or needs_review candidate into a signed entry by `agent_id`.

        `requested_by` is set (to "admin") when the admin asked for the promotion and named `agent_id`.
        `idempotency_key` is
        the request's Idempotency-Key: a retry with the key of the promotion answers it again (`created` false);
        any other promote of a promoted candidate is refused, naming the entry it became. A promotion interrupted
        after its entry was committed (by an older node) is finished by promoting again.
        """
        if body.author is not None and requested_by is None:
            raise Forbidden("an agent promotes as itself; only the admin names an author", field="$.author",
                            code="author_admin_only")  # fmt: skip
        operation = f"promote:{candidate_id}"
        viewer = None if requested_by == ADMIN else agent_id  # the admin sees every candidate (docs/spaces.md)
        async with self._promote_lock:
            row = await self._candidate_row(candidate_id, viewer)
            answered = None
            if idempotency_key is not None:
                given = idempotency_key
                answered = await self.db.read(
                    lambda c: idempotency.replayed(c, agent_id, given, operation, field="$.idempotency_key")
                )
            if row["status"] == "promoted":
                if answered is not None and answered == row["promoted_hash"]:
                    entry = await self._entry(row["promoted_hash"], store.in_space(row["space"]))
                    return PromoteResult(store.out(row), entry, created=False)
                raise NotPromotable(
                    f"candidate {candidate_id} is already promoted: it became entry {row['promoted_hash']}",
                    field="candidate_id",
                )
            if row["status"] not in PROMOTABLE:
                raise NotPromotable(
                    f"candidate {candidate_id} is {row['status']}; only approved or needs_review candidates"
                    " can be promoted",
                    field="candidate_id",
                )
            cand = store.out(row)
            draft = self.draft_for(cand, body.scope)
            key = f"default-mode:promote:{cand.id}"
            now = self.now_ms()

            def mark(conn: Conn, entry: EntryOut) -> None:
                # the candidate as the transaction finds it, under the writer lock: another process of the node
                # (whose promote lock is its own) may have promoted or rejected it since the read above (record 90)
                (now_row,) = store.fetch(conn, [cand.id], OPERATOR)
                if now_row["status"] == "promoted" and now_row["promoted_hash"] != entry.record_hash:
                    raise NotPromotable(
                        f"candidate {candidate_id} is already promoted: it became entry {now_row['promoted_hash']}",
                        field="candidate_id",
                    )
                if now_row["status"] not in (*PROMOTABLE, "promoted"):
                    raise NotPromotable(f"candidate {candidate_id} is {now_row['status']}; only approved or"
                                        " needs_review candidates can be promoted", field="candidate_id")  # fmt: skip
                # the critic's duplicate rule again, in the transaction: the same content may have been posted
                # since the approval, or while this entry was being signed (raising rolls the entry back too)
                dup = store.duplicate_of(conn, draft.content, (agent_id, key), besides=cand.payload.get("source_ref"),
                                         sight=store.in_space(cand.space))  # fmt: skip
                if dup is not None:
                    raise Conflict(
                        f"candidate {candidate_id}'s content is already entry {dup}; promoting it would store it twice",
                        field="candidate_id",
                        code="duplicate_of_entry",
                    )
                store.mark_promoted(conn, cand.id, entry.record_hash, agent_id, now, requested_by)
                if idempotency_key is not None and answered is None:
                    # the key as the transaction finds it: the same request through another process may have
                    # promoted with it since (a replay of this entry is answered by it; another is refused)
                    if idempotency.replayed(conn, agent_id, idempotency_key, operation, field="$.idempotency_key"):
                        return
                    idempotency.remember(conn, agent_id, idempotency_key, operation, entry.record_hash, now)

            # the entry, its links beyond the inline ones and the candidate's mark commit together
            submission: PostEntry | SignedSubmission
            if body.record is not None:
                _check_against_draft(body.record, draft)
                submission, derived_from = SignedSubmission(record=body.record), []  # unsigned links: listed only
            else:
                submission = PostEntry(
                    entry_type=draft.entry_type,  # type: ignore[arg-type]
                    performative=draft.performative,  # type: ignore[arg-type]
                    content=draft.content,
                    confidence=draft.confidence,
                    tags=draft.tags,
                    links=[LinkSpec(target=link["target"], link_type="derived_from") for link in draft.links],
                    metadata=draft.metadata,
                    truth_state=draft.truth_state,
                    authority="derived",
                    scope=draft.scope,
                    space=draft.space,  # the candidate's space: the entry lands in it (its author must write there)
                )
                derived_from = list(draft.unlinked_evidence)
            entry, created = await self.entries.post_with(
                agent_id, submission, key, derived_from=derived_from, then=mark
            )
            row = await self._candidate_row(candidate_id, viewer)
            return PromoteResult(store.out(row), entry, created=created)

    async def promote_as_admin(self, candidate_id: int, body: PromoteIn, key: str | None = None) -> PromoteResult:
        """The admin promotes by naming the author: a local agent whose key this node keeps signs the entry."""
        if body.record is not None:
            raise InvalidInput("the admin cannot submit a signed record; name the author and the node signs",
                               field="$.record", code="record_not_allowed")  # fmt: skip
        if body.author is None:
            raise InvalidInput("a promotion creates a signed entry: name the agent that authors it",
                               field="$.author", code="author_required")  # fmt: skip
        ref = body.author
        row = await self.db.read(lambda c: store.local_author(c, ref))
        if row is None:
            raise NotFound(f"no agent {ref!r} on this node", field="$.author", code="author_not_found")
        if not row["key_kept"]:
            raise InvalidInput(f"agent {ref!r} holds its own key: it must promote (and sign) itself",
                               field="$.author", code="author_key_not_kept")  # fmt: skip
        return await self.promote(row["agent_id"], candidate_id, body, requested_by=ADMIN, idempotency_key=key)

    # ---- human review -----------------------------------------------------------------------------------

    async def review(self, decided_by: str, candidate_id: int, body: ReviewIn) -> CandidateOut:
        """Record a person's decision. approve: proposed/needs_review/approved -> approved; reject: any status
        but promoted -> rejected. truth_state never changes. `decided_by` is "admin" or the agent's did; an
        agent may not decide a candidate it proposed. Repeating the stored decision changes nothing."""
        note = (body.note or "").strip() or None
        now = self.now_ms()

        spaces = self.spaces
        viewer = None if decided_by == ADMIN else decided_by
        async with self._promote_lock:  # a decision never interleaves with a promotion of the same candidate
            return await self.db.write(
                lambda c: decide(c, candidate_id, body, decided_by, note, now, spaces.sight_of(c, viewer))
            )

    def draft_for(self, cand: CandidateOut, scope: str = "federation") -> EntryDraft:
        """The entry a candidate becomes, in canonical form (what a self-signing agent signs)."""
        evidence = cand.evidence_refs
        entry_type, performative = ENTRY_SHAPE[cand.kind]
        provenance = {
            "candidate_id": cand.id,
            "node_id": self.node_id,
            "kind": cand.kind,
            "source": cand.source,
            "proposed_by": cand.proposed_by,
            "critic_decision": cand.critic_decision,
            "critic_reasons": cand.critic_reasons,
            "risk_flag": cand.risk_flag,
            "evidence_flag": cand.evidence_flag,
            "synthetic": cand.synthetic,
            "salience": cand.salience,
            "evidence_refs": [f"candidate:{self.node_id}/{cand.id}", *evidence],
        }
        if cand.decision is not None:
            provenance["review"] = {"decision": cand.decision, "decided_by": cand.decided_by,
                                    "decided_at": cand.decided_at, "note": cand.decision_note}  # fmt: skip
        return EntryDraft(
            entry_type=entry_type,
            performative=performative,
            content=canonical.normalize_content(cand.text),
            confidence=canonical.normalize_float(cand.confidence),
            tags=sorted({"default-mode", f"default-mode:{cand.kind}", *cand.tags}),
            directed_to=[],
            links=[{"target": h, "link_type": "derived_from", "annotation": ""} for h in evidence[:MAX_INLINE_LINKS]],
            metadata=canonical.normalize_value({"default_mode": provenance}),
            truth_state=cand.truth_state,
            authority="derived",
            scope=scope,  # type: ignore[arg-type]
            unlinked_evidence=evidence[MAX_INLINE_LINKS:],
            space=cand.space,
        )

    async def draft(self, candidate_id: int, viewer: Viewer, scope: str = "federation") -> EntryDraft:
        """The draft entry of a promotable candidate `viewer` may see."""
        row = await self._candidate_row(candidate_id, viewer)
        if row["status"] not in PROMOTABLE:
            raise NotPromotable(f"candidate {candidate_id} is {row['status']}", field="candidate_id")
        return self.draft_for(store.out(row), scope)

    async def _entry(self, record_hash: str, sight: Sight) -> EntryOut:
        query = ReadQuery(include_links=False, include_synthetic=True)
        result = await self.reads.read([record_hash], query, sight)
        if not result.entries:
            raise NotFound(f"entry {record_hash} is not on this node", code="entry_not_found")
        return result.entries[0]


DRAFT_FIELDS = ("entry_type", "performative", "content", "confidence", "tags", "directed_to", "links", "metadata",
                "truth_state", "authority", "space")  # fmt: skip


def _check_against_draft(record: dict[str, Any], draft: EntryDraft) -> None:
    """A self-signed promotion must carry exactly the draft's fields (scope is the signer's choice)."""
    expected = msgspec.to_builtins(draft)
    for name in DRAFT_FIELDS:
        if record.get(name) != expected.get(name):
            raise InvalidInput(
                f"the signed record's {name} differs from the candidate's draft (GET .../candidates/{{id}}/draft)",
                field=f"$.record.{name}",
                code="draft_mismatch",
            )


def decide(
    conn: Conn, candidate_id: int, body: ReviewIn, decided_by: str, note: str | None, now: int, sight: Sight
) -> CandidateOut:
    """`DefaultMode.review` in its transaction, of a candidate `sight` sees (404 otherwise)."""
    rows = store.fetch(conn, [candidate_id], sight)
    if not rows:
        raise NotFound(f"no candidate {candidate_id}", field="candidate_id", code="candidate_not_found")
    row = rows[0]
    if row["status"] == "promoted":
        raise Conflict(f"candidate {candidate_id} is already promoted; its entry is in the log",
                       field="candidate_id", code="candidate_promoted")  # fmt: skip
    if decided_by != ADMIN and row["proposed_by"] == decided_by:
        raise Forbidden("an agent cannot review a candidate it proposed", field="candidate_id",
                        code="own_candidate")  # fmt: skip
    if row["decision"] == body.decision:
        return store.out(row)
    if body.decision == "approve" and row["status"] == "rejected":
        raise Conflict(f"candidate {candidate_id} is rejected; a rejection is final",
                       field="candidate_id", code="candidate_rejected")  # fmt: skip
    store.decide(conn, candidate_id, body.decision, decided_by, note, now)
    return store.out(store.fetch(conn, [candidate_id], sight)[0])
