"""Wire types of /v1/default-mode: msgspec Structs for validation, JSON and the OpenAPI document."""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec

from identity.schema import Confidence, ProjectName, Scope, Tag, TruthState, whole
from identity.schema_v3 import SpaceId
from wire.api import AgentRef, EntryOut, EntryRef

MAX_TRANSCRIPT_CHARS = 200_000
MAX_EVIDENCE = 100
MAX_TEXT_CHARS = 8_000
MAX_CANDIDATES_PER_CALL = 200
MAX_CANDIDATE_TAGS = 8
MAX_CONSOLIDATE = 100
MAX_NOTE_CHARS = 1_000

Weight = Annotated[float, msgspec.Meta(ge=0.0, le=1.0)]
# `\S` is searched for, not anchored: the text must contain something other than whitespace.
NOT_BLANK = r"\S"
Text = Annotated[str, msgspec.Meta(min_length=1, max_length=MAX_TEXT_CHARS, pattern=NOT_BLANK)]
Evidence = Annotated[list[EntryRef], msgspec.Meta(max_length=MAX_EVIDENCE)]
CandidateTags = Annotated[list[Tag], msgspec.Meta(max_length=MAX_CANDIDATE_TAGS)]
ReflectKind = Literal["open_question", "decision", "open_loop", "preference", "risk", "reflection"]
CandidateKind = Literal[
    "open_question",
    "decision",
    "open_loop",
    "preference",
    "risk",
    "reflection",
    "consolidation",
    "simulation",
    "stakeholder_simulation",
    "incubation",
]
Status = Literal["proposed", "approved", "needs_review", "rejected", "promoted"]


class SalienceWeights(msgspec.Struct, forbid_unknown_fields=True):
    """Weights of the salience features (docs/default-mode.md). Each in [0, 1]."""

    action: Weight = 0.4
    risk: Weight = 0.4
    novelty: Weight = 0.05
    repetition: Weight = 0.05
    emphasis: Weight = 0.4
    goal_relevance: Weight = 0.1
    evidence_strength: Weight = 0.1


class ReflectIn(msgspec.Struct, forbid_unknown_fields=True):
    """A transcript to reflect over, or a session: what it produced, read from the node.

    A session is the entries tagged `session:<session_id>` and the bus messages of `project`, each optionally
    between `since` and `until` (ISO 8601 with a timezone); give either or both, never with a transcript.
    """

    transcript: (
        Annotated[str, msgspec.Meta(min_length=1, max_length=MAX_TRANSCRIPT_CHARS, pattern=NOT_BLANK)] | None
    ) = None
    session_id: Annotated[str, msgspec.Meta(min_length=1, max_length=56, pattern=whole(r"[A-Za-z0-9._:-]+"))] | None = (
        None
    )
    project: ProjectName | None = None
    since: str | None = None
    until: str | None = None
    evidence_refs: Evidence = []
    goal_relevance: Weight = 0.0
    evidence_strength: Weight = 0.0
    weights: SalienceWeights | None = None
    tags: CandidateTags = []
    # reflect in this space (one you write in): its session's entries and messages are read with the public ones,
    # and the candidates land in it (docs/spaces.md)
    space: SpaceId | None = None


class LineScore(msgspec.Struct):
    """How one transcript line scored."""

    line: int
    score: float
    kept: bool
    features: dict[str, float]


class ProposedCandidate(msgspec.Struct, forbid_unknown_fields=True):
    """A candidate submitted directly to the critic."""

    kind: ReflectKind
    text: Text
    evidence_refs: Evidence = []
    truth_state: TruthState = "hypothesis"
    confidence: Confidence = 0.5
    salience: Confidence = 0.5
    synthetic: bool = False
    tags: CandidateTags = []


class CriticIn(msgspec.Struct, forbid_unknown_fields=True):
    """Review stored candidates by id, submit new ones, or (both empty) review every `proposed` candidate."""

    candidate_ids: Annotated[list[Annotated[int, msgspec.Meta(ge=1)]], msgspec.Meta(max_length=200)] = []
    candidates: Annotated[list[ProposedCandidate], msgspec.Meta(max_length=MAX_CANDIDATES_PER_CALL)] = []


class PromoteIn(msgspec.Struct, forbid_unknown_fields=True):
    """Options of a promotion (the body may be omitted).

    An agent that holds its own key sends `record`: the candidate's draft (GET .../candidates/{id}/draft)
    completed with kind, schema_version, author_id, created_at and signed. Otherwise the node signs.
    The admin (who is no agent) names the `author`: a local agent name or the did of an agent whose key
    this node keeps; the node signs the entry as that agent.
    """

    scope: Scope = "federation"
    record: dict[str, Any] | None = None
    author: AgentRef | None = None


class ReviewIn(msgspec.Struct, forbid_unknown_fields=True):
    """A human decision on a candidate: approve (proposed/needs_review -> approved) or reject."""

    decision: Literal["approve", "reject"]
    note: Annotated[str, msgspec.Meta(max_length=MAX_NOTE_CHARS)] | None = None


class EntryDraft(msgspec.Struct, omit_defaults=True):
    """The fields the promoted entry must carry; add kind, schema_version, author_id, created_at and sign it (in a
    space, `space` is one of them: sign it with `schema_version` "v2", docs/spaces.md). Defaults are omitted, so a
    public candidate's draft names no space and one without more evidence than its links no `unlinked_evidence`."""

    entry_type: str
    performative: str
    content: str
    confidence: float
    tags: list[str]
    directed_to: list[str]
    links: list[dict[str, str]]
    metadata: dict[str, Any]
    truth_state: TruthState
    authority: Literal["derived"]
    scope: Scope
    unlinked_evidence: list[str] = []  # evidence beyond the 32 inline links: only in metadata when self-signed
    space: str | None = None  # the candidate's space: the entry is posted into it


class ConsolidateIn(msgspec.Struct, forbid_unknown_fields=True):
    """Which recent entries to summarise."""

    limit: Annotated[int, msgspec.Meta(ge=1, le=MAX_CONSOLIDATE)] = 50
    since: str | None = None
    tags: Annotated[list[Tag], msgspec.Meta(max_length=32)] = []
    include_synthetic: bool = False
    space: SpaceId | None = None  # consolidate this space's entries with the public ones; the candidate lands in it


class SimulateFutureIn(msgspec.Struct, forbid_unknown_fields=True):
    goal: Annotated[str, msgspec.Meta(min_length=1, max_length=1_000, pattern=NOT_BLANK)]
    evidence_refs: Evidence = []


class StakeholderIn(msgspec.Struct, forbid_unknown_fields=True):
    stakeholder: Annotated[str, msgspec.Meta(min_length=1, max_length=200, pattern=NOT_BLANK)]
    proposal: Annotated[str, msgspec.Meta(min_length=1, max_length=1_000, pattern=NOT_BLANK)]
    evidence_refs: Evidence = []


class IncubateIn(msgspec.Struct, forbid_unknown_fields=True):
    problem: Annotated[str, msgspec.Meta(min_length=1, max_length=1_000, pattern=NOT_BLANK)]
    evidence_refs: Evidence = []


class CandidateQuery(msgspec.Struct, forbid_unknown_fields=True):
    """Parameters of GET /v1/default-mode/candidates."""

    status: Annotated[list[Status], msgspec.Meta(max_length=5)] = []
    limit: Annotated[int, msgspec.Meta(ge=1, le=200)] = 50
    offset: Annotated[int, msgspec.Meta(ge=0, le=100_000)] = 0


class CandidateOut(msgspec.Struct):
    """A default-mode candidate: node-local, never returned by ordinary read or search."""

    id: int
    kind: CandidateKind
    text: str
    salience: float
    confidence: float
    evidence_refs: list[str]
    truth_state: TruthState
    synthetic: bool
    status: Status
    critic_decision: str | None
    critic_reasons: list[str]
    risk_flag: bool | None
    evidence_flag: bool | None
    payload: dict[str, Any]
    tags: list[str]
    source: str
    proposed_by: str
    created_at: str
    reviewed_at: str | None
    promoted_entry: str | None
    promoted_by: str | None
    promoted_at: str | None
    decision: Literal["approve", "reject"] | None = None  # the human decision, if any (the critic's is above)
    decided_by: str | None = None  # "admin" or the deciding agent's did
    decided_at: str | None = None
    decision_note: str | None = None
    promote_requested_by: str | None = None  # "admin" when the admin named the author
    space: str | None = None  # the space it was proposed in (its readers alone see it); None: public


class CandidateList(msgspec.Struct):
    candidates: list[CandidateOut]
    next_offset: int | None = None


class ReflectResult(msgspec.Struct):
    """The candidates written (already reviewed by the critic) and how every line scored."""

    candidates: list[CandidateOut]
    lines_scored: int
    dropped: int
    scores: list[LineScore]


class CriticResult(msgspec.Struct):
    """Reviewed candidates; `skipped` lists ids already promoted or rejected (left unchanged)."""

    candidates: list[CandidateOut]
    skipped: list[int] = []


class PromoteResult(msgspec.Struct):
    """The candidate (now promoted) and the entry it became. `created` is false on a repeat."""

    candidate: CandidateOut
    entry: EntryOut
    created: bool


class TemplateResult(msgspec.Struct):
    """A fixed-template checklist, stored as a candidate."""

    candidate: CandidateOut
    template: dict[str, Any]
    note: str = "fixed checklist with your input substituted; no model was called"
