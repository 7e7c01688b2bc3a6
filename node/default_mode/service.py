"""The default-mode runtime's operations. Each reads records and writes candidates, or (promote only)
writes one entry through the node's single write path. Nothing else: no network, files or processes.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
import weakref
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

import msgspec

from identity import canonical
from node import queries
from node.default_mode import critic, salience, store, templates
from node.default_mode.classify import classify
from node.default_mode.store import NewCandidate
from node.errors import BBSError, Conflict, Forbidden, InvalidInput, NotFound
from node.wire.api import (
    EntryOut,
    LinkOut,
    LinkSpec,
    PostEntry,
    ReadQuery,
    ReadResult,
    SignedSubmission,
)
from node.wire.default_mode import (
    MAX_CANDIDATES_PER_CALL,
    MAX_EVIDENCE,
    MAX_TEXT_CHARS,
    CandidateList,
    CandidateOut,
    CandidateQuery,
    ConsolidateIn,
    CriticIn,
    CriticResult,
    EntryDraft,
    IncubateIn,
    LineScore,
    PromoteIn,
    PromoteResult,
    ReflectIn,
    ReflectResult,
    ReviewIn,
    SalienceWeights,
    SimulateFutureIn,
    StakeholderIn,
    TemplateResult,
)

T = TypeVar("T")
R = TypeVar("R", ReflectResult, CriticResult, CandidateOut, TemplateResult)
MAX_SESSION_ENTRIES = 2_000
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


class _Database(Protocol):
    async def read(self, fn: Callable[[sqlite3.Connection], T]) -> T: ...

    async def write(self, fn: Callable[[sqlite3.Connection], T]) -> T: ...


class NodeServices(Protocol):
    """What the runtime may use of the node: its database and its one write path for records."""

    @property
    def db(self) -> _Database: ...

    @property
    def node_id(self) -> str: ...

    def now_ms(self) -> int: ...

    async def post_entry(self, agent_id: str, body: Any, idempotency_key: str | None) -> tuple[EntryOut, bool]: ...

    async def post_entry_with(
        self,
        agent_id: str,
        body: Any,
        idempotency_key: str,
        *,
        derived_from: list[str],
        then: Callable[[sqlite3.Connection, EntryOut], None],
    ) -> tuple[EntryOut, bool]: ...

    async def create_link(self, agent_id: str, body: Any, idempotency_key: str | None) -> tuple[LinkOut, bool]: ...

    async def read(self, refs: list[str], q: ReadQuery) -> ReadResult: ...


@dataclass(frozen=True)
class Once:
    """A candidate-creating call made with an idempotency key: whose key, which operation, what it replies."""

    agent_id: str
    key: str
    operation: str
    reply_type: type[Any]

    @classmethod
    def of(cls, agent_id: str, key: str | None, operation: str, reply_type: type[Any]) -> Once | None:
        """None when the call has no key."""
        return None if key is None else cls(agent_id, key, f"default-mode:{operation}", reply_type)


class NotPromotable(BBSError):
    status, code, title = 400, "candidate_not_promotable", "Candidate not promotable"


class DefaultMode:
    """The runtime bound to one node."""

    def __init__(self, node: NodeServices) -> None:
        self.node = node
        self._promote_lock = asyncio.Lock()

    # ---- helpers ----------------------------------------------------------------------------------------

    async def _evidence(self, refs: list[str], field: str) -> list[str]:
        """Resolve entry ids or record hashes to record hashes (a well-formed unknown hash is kept: it may arrive)."""

        def run(conn: sqlite3.Connection) -> list[str]:
            out: list[str] = []
            for i, ref in enumerate(refs):
                record_hash, _ = queries.resolve_ref(conn, ref)
                if record_hash is None:
                    raise NotFound(
                        f"evidence {ref!r} is not a known entry id or a record hash",
                        field=f"{field}[{i}]",
                        code="evidence_not_found",
                    )
                out.append(record_hash)
            return list(dict.fromkeys(out))

        return await self.node.db.read(run) if refs else []

    async def _store_and_review(
        self,
        new: list[NewCandidate],
        existing: list[int] | None = None,
        *,
        reply: Callable[[CriticResult], R],
        once: Once | None = None,
    ) -> tuple[R, bool]:
        """Insert `new`, run the critic over them and over `existing` ids, and build the call's `reply`, all in
        one transaction. With `once` (an idempotency key), a key already used returns the reply it gave then
        and stores nothing; the bool says whether this call stored anything."""
        now = self.node.now_ms()

        def job(conn: sqlite3.Connection) -> tuple[R, bool]:
            if once is not None:
                earlier = store.earlier_reply(conn, once.agent_id, once.key, once.operation)
                if earlier is not None:
                    return msgspec.json.decode(earlier, type=once.reply_type), False
            ids = list(existing or [])
            rows = store.fetch(conn, ids)
            found = {r["id"] for r in rows}
            for i, cid in enumerate(ids):
                if cid not in found:
                    raise NotFound(f"no candidate {cid}", field=f"$.candidate_ids[{i}]", code="candidate_not_found")
            ids += store.insert(conn, new, now)
            skipped = []
            for row in store.fetch(conn, ids):
                if row["status"] in ("promoted", "rejected") or row["decision"] is not None:
                    skipped.append(int(row["id"]))
                    continue
                verdict = critic.review(
                    kind=row["kind"],
                    text=row["text"],
                    evidence_refs=json.loads(row["evidence_refs"]),
                    truth_state=row["truth_state"],
                    synthetic=bool(row["synthetic"]),
                    duplicate=store.duplicate_of(conn, row["text"]) is not None,
                )
                store.apply_review(conn, int(row["id"]), verdict, now)
            reviewed = [store.out(r) for r in store.fetch(conn, ids) if int(r["id"]) not in skipped]
            result = reply(CriticResult(candidates=reviewed, skipped=skipped))
            if once is not None:
                store.keep_reply(conn, once.agent_id, once.key, once.operation, msgspec.json.encode(result), now)
            return result, True

        # never between a promotion's entry and its `promoted` mark: the critic would call the candidate a
        # duplicate of the entry it has just become
        async with self._promote_lock:
            return await self.node.db.write(job)

    # ---- reflect ----------------------------------------------------------------------------------------

    async def reflect(self, agent_id: str, body: ReflectIn, key: str | None = None) -> tuple[ReflectResult, bool]:
        """Score a transcript line by line, store the survivors as classified candidates, run the critic.

        With an idempotency `key` already used, the first reply and False (nothing stored)."""
        if (body.transcript is None) == (body.session_id is None):
            raise InvalidInput("give exactly one of transcript or session_id", field="$.transcript",
                               code="transcript_or_session")  # fmt: skip
        evidence = await self._evidence(body.evidence_refs, "$.evidence_refs")
        if body.transcript is not None:
            lines = body.transcript.split("\n")
            line_evidence: list[list[str]] = [[] for _ in lines]
        else:
            lines, line_evidence = await self._session_lines(body.session_id or "")
        scored = salience.score_lines(
            lines,
            body.weights or SalienceWeights(),
            goal_relevance=body.goal_relevance,
            evidence_strength=body.evidence_strength,
        )
        survivors: dict[str, salience.ScoredLine] = {}
        for s in scored:
            if s.kept and s.text.casefold() not in survivors:
                survivors[s.text.casefold()] = s
        best = sorted(survivors.values(), key=lambda s: (-s.score, s.index))[:MAX_CANDIDATES_PER_CALL]
        new = [
            NewCandidate(
                kind=classify(s.text),
                text=s.text[:MAX_TEXT_CHARS],  # a candidate must fit an entry; the line's score used all of it
                salience=s.score,
                confidence=s.score,
                evidence_refs=list(dict.fromkeys(line_evidence[s.index] + evidence))[:MAX_EVIDENCE],
                truth_state="hypothesis",
                synthetic=False,
                source="reflect-session",
                proposed_by=agent_id,
                tags=list(body.tags),
                payload={"line": s.index, "features": s.features, "session_id": body.session_id},
            )
            for s in sorted(best, key=lambda s: s.index)
        ]
        scores = [LineScore(line=s.index, score=s.score, kept=s.kept, features=s.features) for s in scored]

        def reply(result: CriticResult) -> ReflectResult:
            return ReflectResult(
                candidates=result.candidates,
                lines_scored=len(scored),
                dropped=sum(1 for s in scored if not s.kept),
                scores=scores,
            )

        return await self._store_and_review(
            new, reply=reply, once=Once.of(agent_id, key, "reflect-session", ReflectResult)
        )

    async def _session_lines(self, session_id: str) -> tuple[list[str], list[list[str]]]:
        """A session's transcript: the lines of its entries (tagged session:<id>), oldest first."""

        def run(conn: sqlite3.Connection) -> list[sqlite3.Row]:
            return conn.execute(
                "SELECT e.record_hash, e.content FROM entry_tags t JOIN entries e ON e.id = t.entry_id"
                " WHERE t.tag = ? AND e.truth_state != 'simulation' ORDER BY e.created_ms, e.id LIMIT ?",
                (f"session:{session_id}", MAX_SESSION_ENTRIES),
            ).fetchall()

        rows = await self.node.db.read(run)
        if not rows:
            raise NotFound(f"no entries tagged session:{session_id}", field="$.session_id", code="session_not_found")
        lines: list[str] = []
        evidence: list[list[str]] = []
        for row in rows:
            for line in row["content"].split("\n"):
                lines.append(line)
                evidence.append([row["record_hash"]])
        return lines, evidence

    # ---- critic -----------------------------------------------------------------------------------------

    async def critic(self, agent_id: str, body: CriticIn, key: str | None = None) -> tuple[CriticResult, bool]:
        """Review stored candidates, new proposals, or (given neither) every candidate still `proposed`.

        With an idempotency `key` already used, the first reply and False (nothing stored or reviewed)."""
        new = []
        for i, p in enumerate(body.candidates):
            evidence = await self._evidence(p.evidence_refs, f"$.candidates[{i}].evidence_refs")
            text = canonical.normalize_content(p.text)
            if not text:
                raise InvalidInput("text is empty after trimming whitespace", field=f"$.candidates[{i}].text")
            new.append(
                NewCandidate(
                    kind=p.kind,
                    text=text,
                    salience=p.salience,
                    confidence=p.confidence,
                    evidence_refs=evidence,
                    truth_state=p.truth_state,
                    synthetic=p.synthetic,
                    source="critic",
                    proposed_by=agent_id,
                    tags=list(p.tags),
                )
            )
        ids = list(dict.fromkeys(body.candidate_ids))
        if not ids and not new:
            ids = await self.node.db.read(lambda c: store.proposed_ids(c, MAX_CANDIDATES_PER_CALL))
        return await self._store_and_review(
            new, ids, reply=lambda result: result, once=Once.of(agent_id, key, "critic", CriticResult)
        )

    # ---- promote ----------------------------------------------------------------------------------------

    async def promote(
        self, agent_id: str, candidate_id: int, body: PromoteIn, requested_by: str | None = None
    ) -> PromoteResult:
        """Turn an approved or needs_review candidate into a signed entry by `agent_id`. Idempotent.

        `requested_by` is set (to "admin") when the admin asked for the promotion and named `agent_id`.
        """
        if body.author is not None and requested_by is None:
            raise Forbidden("an agent promotes as itself; only the admin names an author", field="$.author",
                            code="author_admin_only")  # fmt: skip
        async with self._promote_lock:
            row = await self._candidate_row(candidate_id)
            if row["status"] == "promoted":
                return PromoteResult(store.out(row), await self._entry(row["promoted_hash"]), created=False)
            if row["status"] not in PROMOTABLE:
                raise NotPromotable(
                    f"candidate {candidate_id} is {row['status']}; only approved or needs_review candidates"
                    " can be promoted",
                    field="candidate_id",
                )
            cand = store.out(row)
            draft = self.draft_for(cand, body.scope)
            key = f"default-mode:promote:{cand.id}"
            now = self.node.now_ms()

            def mark(conn: sqlite3.Connection, entry: EntryOut) -> None:
                # the critic's duplicate rule again, in the transaction: the same content may have been posted
                # since the approval, or while this entry was being signed (raising rolls the entry back too)
                dup = store.duplicate_of(conn, draft.content, (agent_id, key))
                if dup is not None:
                    raise Conflict(
                        f"candidate {candidate_id}'s content is already entry {dup}; promoting it would store it twice",
                        field="candidate_id",
                        code="duplicate_of_entry",
                    )
                store.mark_promoted(conn, cand.id, entry.record_hash, agent_id, now, requested_by)

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
                )
                derived_from = list(draft.unlinked_evidence)
            entry, created = await self.node.post_entry_with(
                agent_id, submission, key, derived_from=derived_from, then=mark
            )
            row = await self._candidate_row(candidate_id)
            return PromoteResult(store.out(row), entry, created=created)

    async def promote_as_admin(self, candidate_id: int, body: PromoteIn) -> PromoteResult:
        """The admin promotes by naming the author: a local agent whose key this node keeps signs the entry."""
        if body.record is not None:
            raise InvalidInput("the admin cannot submit a signed record; name the author and the node signs",
                               field="$.record", code="record_not_allowed")  # fmt: skip
        if body.author is None:
            raise InvalidInput("a promotion creates a signed entry: name the agent that authors it",
                               field="$.author", code="author_required")  # fmt: skip
        ref = body.author
        row = await self.node.db.read(lambda c: store.local_author(c, ref))
        if row is None:
            raise NotFound(f"no agent {ref!r} on this node", field="$.author", code="author_not_found")
        if not row["key_kept"]:
            raise InvalidInput(f"agent {ref!r} holds its own key: it must promote (and sign) itself",
                               field="$.author", code="author_key_not_kept")  # fmt: skip
        return await self.promote(row["agent_id"], candidate_id, body, requested_by=ADMIN)

    # ---- human review -----------------------------------------------------------------------------------

    async def review(self, decided_by: str, candidate_id: int, body: ReviewIn) -> CandidateOut:
        """Record a person's decision. approve: proposed/needs_review/approved -> approved; reject: any status
        but promoted -> rejected. truth_state never changes. `decided_by` is "admin" or the agent's did; an
        agent may not decide a candidate it proposed. Repeating the stored decision changes nothing."""
        note = (body.note or "").strip() or None
        now = self.node.now_ms()

        def job(conn: sqlite3.Connection) -> CandidateOut:
            rows = store.fetch(conn, [candidate_id])
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
            return store.out(store.fetch(conn, [candidate_id])[0])

        async with self._promote_lock:  # a decision never interleaves with a promotion of the same candidate
            return await self.node.db.write(job)

    def draft_for(self, cand: CandidateOut, scope: str = "federation") -> EntryDraft:
        """The entry a candidate becomes, in canonical form (what a self-signing agent signs)."""
        evidence = cand.evidence_refs
        entry_type, performative = ENTRY_SHAPE[cand.kind]
        provenance = {
            "candidate_id": cand.id,
            "node_id": self.node.node_id,
            "kind": cand.kind,
            "source": cand.source,
            "proposed_by": cand.proposed_by,
            "critic_decision": cand.critic_decision,
            "critic_reasons": cand.critic_reasons,
            "risk_flag": cand.risk_flag,
            "evidence_flag": cand.evidence_flag,
            "synthetic": cand.synthetic,
            "salience": cand.salience,
            "evidence_refs": [f"candidate:{self.node.node_id}/{cand.id}", *evidence],
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
        )

    async def draft(self, candidate_id: int, scope: str = "federation") -> EntryDraft:
        """The draft entry of a promotable candidate."""
        row = await self._candidate_row(candidate_id)
        if row["status"] not in PROMOTABLE:
            raise NotPromotable(f"candidate {candidate_id} is {row['status']}", field="candidate_id")
        return self.draft_for(store.out(row), scope)

    async def _candidate_row(self, candidate_id: int) -> sqlite3.Row:
        rows = await self.node.db.read(lambda c: store.fetch(c, [candidate_id]))
        if not rows:
            raise NotFound(f"no candidate {candidate_id}", field="candidate_id", code="candidate_not_found")
        return rows[0]

    async def _entry(self, record_hash: str) -> EntryOut:
        result = await self.node.read([record_hash], ReadQuery(include_links=False, include_synthetic=True))
        if not result.entries:
            raise NotFound(f"entry {record_hash} is not on this node", code="entry_not_found")
        return result.entries[0]

    # ---- consolidate ------------------------------------------------------------------------------------

    async def consolidate(
        self, agent_id: str, body: ConsolidateIn, since_ms: int | None, key: str | None = None
    ) -> tuple[CandidateOut, bool]:
        """Summarise the distribution of recent entries into one needs_review hypothesis carrying them all.

        With an idempotency `key` already used, the first reply and False (nothing stored)."""

        def run(conn: sqlite3.Connection) -> list[sqlite3.Row]:
            where = ["1 = 1"]
            params: dict[str, Any] = {"limit": body.limit, "since": since_ms}
            if not body.include_synthetic:
                where.append("e.truth_state != 'simulation'")
            if since_ms is not None:
                where.append("e.created_ms >= :since")
            if body.tags:
                where.append(queries.tagged_any(body.tags, params))
            sql = (
                "SELECT e.record_hash, e.author_id, e.created_at, e.entry_type, e.performative, e.truth_state, e.tags"
                f" FROM entries e WHERE {' AND '.join(where)} ORDER BY e.id DESC LIMIT :limit"
            )
            return conn.execute(sql, params).fetchall()

        rows = list(reversed(await self.node.db.read(run)))
        if not rows:
            raise InvalidInput("no recent entries match; nothing to consolidate", code="nothing_to_consolidate")
        text, distribution = _distribution(rows)
        new = NewCandidate(
            kind="consolidation",
            text=text,
            salience=0.5,
            confidence=0.5,
            evidence_refs=[r["record_hash"] for r in rows],
            truth_state="hypothesis",
            synthetic=False,
            source="consolidate",
            proposed_by=agent_id,
            payload={"distribution": distribution},
        )
        return await self._store_and_review(
            [new], reply=lambda result: result.candidates[0], once=Once.of(agent_id, key, "consolidate", CandidateOut)
        )

    # ---- fixed templates --------------------------------------------------------------------------------

    async def _template(
        self,
        agent_id: str,
        kind: str,
        source: str,
        made: tuple[str, dict[str, Any]],
        refs: list[str],
        synthetic: bool,
        key: str | None,
    ) -> tuple[TemplateResult, bool]:
        evidence = await self._evidence(refs, "$.evidence_refs")
        text, payload = made
        new = NewCandidate(
            kind=kind,
            text=text,
            salience=0.5,
            confidence=0.5,
            evidence_refs=evidence,
            truth_state="simulation" if synthetic else "hypothesis",
            synthetic=synthetic,
            source=source,
            proposed_by=agent_id,
            payload=payload,
        )
        return await self._store_and_review(
            [new],
            reply=lambda result: TemplateResult(candidate=result.candidates[0], template=payload),
            once=Once.of(agent_id, key, source, TemplateResult),
        )

    async def simulate_future(
        self, agent_id: str, body: SimulateFutureIn, key: str | None = None
    ) -> tuple[TemplateResult, bool]:
        """Five named paths of fixed considerations for a goal, stored as a simulation."""
        made = templates.simulate_future(body.goal)
        return await self._template(agent_id, "simulation", "simulate-future", made, body.evidence_refs, True, key)

    async def stakeholder_simulation(
        self, agent_id: str, body: StakeholderIn, key: str | None = None
    ) -> tuple[TemplateResult, bool]:
        """Fixed concerns and message adjustments for a stakeholder, labelled speculative, stored as a simulation."""
        made = templates.stakeholder_simulation(body.stakeholder, body.proposal)
        return await self._template(
            agent_id, "stakeholder_simulation", "stakeholder-simulation", made, body.evidence_refs, True, key
        )

    async def incubate(self, agent_id: str, body: IncubateIn, key: str | None = None) -> tuple[TemplateResult, bool]:
        """The problem crossed with six fixed reframing seeds, stored as a needs_review hypothesis."""
        made = templates.incubate(body.problem)
        return await self._template(agent_id, "incubation", "incubate", made, body.evidence_refs, False, key)

    # ---- listing ----------------------------------------------------------------------------------------

    async def candidates(self, q: CandidateQuery) -> CandidateList:
        """A page of candidates, newest first."""
        rows = await self.node.db.read(lambda c: store.page(c, list(q.status), q.limit, q.offset))
        return CandidateList(
            candidates=[store.out(r) for r in rows], next_offset=q.offset + q.limit if len(rows) == q.limit else None
        )

    async def candidate(self, candidate_id: int) -> CandidateOut:
        """One candidate."""
        return store.out(await self._candidate_row(candidate_id))


DRAFT_FIELDS = ("entry_type", "performative", "content", "confidence", "tags", "directed_to", "links", "metadata",
                "truth_state", "authority")  # fmt: skip


def _check_against_draft(record: dict[str, Any], draft: EntryDraft) -> None:
    """A self-signed promotion must carry exactly the draft's fields (scope is the signer's choice)."""
    expected = msgspec.to_builtins(draft)
    for name in DRAFT_FIELDS:
        if record.get(name) != expected[name]:
            raise InvalidInput(
                f"the signed record's {name} differs from the candidate's draft (GET .../candidates/{{id}}/draft)",
                field=f"$.record.{name}",
                code="draft_mismatch",
            )


def _distribution(rows: list[sqlite3.Row]) -> tuple[str, dict[str, Any]]:
    """Counts of the entries' types, performatives, truth states, authors and tags, and a sentence saying so."""

    def top(counter: Counter[str], n: int = 5) -> list[list[Any]]:
        return [[k, v] for k, v in sorted(counter.items(), key=lambda kv: (-kv[1], kv[0]))[:n]]

    dist = {
        "entries": len(rows),
        "from": rows[0]["created_at"],
        "to": rows[-1]["created_at"],
        "entry_type": top(Counter(r["entry_type"] for r in rows)),
        "performative": top(Counter(r["performative"] for r in rows), 9),
        "truth_state": top(Counter(r["truth_state"] for r in rows)),
        "authors": len({r["author_id"] for r in rows}),
        "top_authors": top(Counter(r["author_id"] for r in rows), 3),
        "top_tags": top(Counter(t for r in rows for t in json.loads(r["tags"]))),
    }

    def fmt(pairs: list[list[Any]]) -> str:
        return ", ".join(f"{k} {v}" for k, v in pairs) or "none"

    text = (
        f"Consolidation of {dist['entries']} recent entries ({dist['from']} to {dist['to']}):"
        f" entry types {fmt(dist['entry_type'])}; performatives {fmt(dist['performative'])};"
        f" truth states {fmt(dist['truth_state'])}; {dist['authors']} authors; top tags {fmt(dist['top_tags'])}."
    )
    return text, dist


_RUNTIMES: weakref.WeakKeyDictionary[Any, DefaultMode] = weakref.WeakKeyDictionary()


def runtime(node: NodeServices) -> DefaultMode:
    """The node's one DefaultMode (one promote lock per node)."""
    rt = _RUNTIMES.get(node)
    if rt is None:
        rt = _RUNTIMES[node] = DefaultMode(node)
    return rt
