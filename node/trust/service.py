"""Trust and community confidence: a pure function of the entries and links a node holds.

Two nodes holding the same records compute the same numbers: signals are read with one
set-based query, deduplicated, sorted, and folded in a fixed order. The results go to a
cache (`trust_scores`, `entry_confidence`) beside the log; the entries table is never touched.
docs/trust.md gives the definitions with worked examples.

Signals. An agent E confirms an entry T of another agent A when E asserts a `supports` link to T
or E's `confirm` entry links to T; E disconfirms T by a `contradicts` link or a `disconfirm`
entry linking to T. Each (E, T, polarity) counts once. Self-signals never count, nor signals
borne by a retracted or simulated entry, nor links whose ends have not both arrived.

v2.0 (`laplace`): (confirms + 1) / (confirms + disconfirms + 2).

v2.1 (`score`): each signal weighs its endorser's own score, recursively. A signal counts only
if the endorser's score cannot depend on the target agent, i.e. the endorser and the target are
in different strongly connected components of the signal graph. The weighting is therefore
computed exactly over the (acyclic) condensation, sources first, and an agent can raise neither
its own score nor, through any cycle of mutual confirmations, the score of anyone in that cycle.

Equivocation: each address an author signed two bodies under (node/store/equivocation.py) counts against its score as
one disconfirmation of full weight, (1 + W+) / (2 + W+ + W- + equivocations); it changes no other number.

Community confidence of an entry: (author score + W+) / (1 + W+ + W-), W± the weights of the
counted signals on that entry; an entry without counted signals has its author's score.
"""

from __future__ import annotations

import functools
import sqlite3
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

import msgspec
import networkx as nx
from aiohttp import web

from node.store import equivocation
from node.store.db import Database
from node.web.appkeys import NODE
from node.web.http import Route, json_response
from wire.api import AgentTrust

NEUTRAL = 0.5
REFRESH_SECONDS = 30.0
DIGITS = 4

# One row per distinct (endorser, target entry, polarity). UNION deduplicates.
SIGNALS_SQL = """
SELECT l.author_id AS endorser, t.author_id AS author, t.record_hash AS target,
       CASE l.link_type WHEN 'supports' THEN 1 ELSE -1 END AS polarity
FROM links l
JOIN entries s ON s.record_hash = l.source_hash
JOIN entries t ON t.record_hash = l.target_hash
WHERE l.link_type IN ('supports', 'contradicts') AND l.ordinal >= 0
  AND l.author_id != t.author_id AND s.truth_state != 'simulation'
  AND NOT EXISTS (SELECT 1 FROM links r WHERE r.source_hash = s.record_hash AND r.link_type = 'retracted_by')
UNION
SELECT s.author_id, t.author_id, t.record_hash,
       CASE s.performative WHEN 'confirm' THEN 1 ELSE -1 END
FROM entries s
JOIN links l ON l.source_hash = s.record_hash AND l.ordinal >= 0
    AND l.link_type NOT IN ('supersedes', 'retracted_by')
JOIN entries t ON t.record_hash = l.target_hash
WHERE s.performative IN ('confirm', 'disconfirm')
  AND s.author_id != t.author_id AND s.truth_state != 'simulation'
  AND NOT EXISTS (SELECT 1 FROM links r WHERE r.source_hash = s.record_hash AND r.link_type = 'retracted_by')
"""


@dataclass(frozen=True, order=True)
class Signal:
    """One endorser's confirmation (+1) or disconfirmation (-1) of one entry of another agent."""

    endorser: str
    author: str
    target: str
    polarity: int


@dataclass
class AgentScore:
    """An agent's computed trust."""

    confirms: int = 0
    disconfirms: int = 0
    weighted_confirms: float = 0.0
    weighted_disconfirms: float = 0.0
    laplace: float = NEUTRAL
    score: float = NEUTRAL


@dataclass
class EntryScore:
    """An entry's community confidence and the counted signals behind it."""

    community_confidence: float
    confirms: int = 0
    disconfirms: int = 0


@dataclass
class TrustResult:
    """Scores of every agent and every signalled entry."""

    agents: dict[str, AgentScore] = field(default_factory=dict)
    entries: dict[str, EntryScore] = field(default_factory=dict)


def components(agents: Iterable[str], edges: Iterable[tuple[str, str]]) -> tuple[dict[str, int], list[str]]:
    """Strongly connected components of the signal graph (edges endorser -> author), from networkx's condensation.

    Returns each agent's component number and every agent in topological order of the condensation: an
    endorser's component before the components it endorses, members of a component together. The order is the
    same on every node whatever the order the signals came in: among components that may go next, the one with
    the smallest agent id goes first (networkx numbers components in the order it finds them, which depends on
    insertion order, so the numbers are only compared for equality).
    """
    graph: nx.DiGraph[str] = nx.DiGraph()
    graph.add_nodes_from(agents)
    graph.add_edges_from(edges)
    dag = nx.condensation(graph)
    members: dict[int, list[str]] = {c: sorted(m) for c, m in dag.nodes(data="members")}
    order = nx.lexicographical_topological_sort(dag, key=lambda c: members[c][0])
    return dag.graph["mapping"], [a for c in order for a in members[c]]


def compute(signals: Iterable[Signal], equivocations: Mapping[str, int] | None = None) -> TrustResult:
    """Trust of every agent and community confidence of every signalled entry, from the signals and the number
    of equivocated addresses per author."""
    equivocations = equivocations or {}
    sigs = sorted({s for s in signals if s.endorser != s.author})
    agents = {a for s in sigs for a in (s.endorser, s.author)} | set(equivocations)
    comp, upstream_first = components(agents, ((s.endorser, s.author) for s in sigs))
    incoming: dict[str, list[Signal]] = defaultdict(list)
    for s in sigs:
        incoming[s.author].append(s)

    result = TrustResult()
    for a in sorted(agents):
        own = incoming.get(a, [])
        c = sum(1 for s in own if s.polarity > 0)
        d = len(own) - c
        result.agents[a] = AgentScore(confirms=c, disconfirms=d, laplace=(c + 1) / (c + d + 2))
    for a in upstream_first:  # every endorser in another component is scored before the agents it endorses
        score = result.agents[a]
        wc = wd = 0.0
        for s in incoming.get(a, []):
            if comp[s.endorser] == comp[a]:
                continue  # the endorser's score depends on a: a cycle carries no weight
            w = result.agents[s.endorser].score
            if s.polarity > 0:
                wc += w
            else:
                wd += w
        score.weighted_confirms, score.weighted_disconfirms = wc, wd
        score.score = (1 + wc) / (2 + wc + wd + equivocations.get(a, 0))

    per_entry: dict[str, list[Signal]] = defaultdict(list)
    for s in sigs:
        per_entry[s.target].append(s)
    for target in sorted(per_entry):
        counted = [s for s in per_entry[target] if comp[s.endorser] != comp[s.author]]
        author = per_entry[target][0].author
        prior = result.agents[author].score
        wc = sum(result.agents[s.endorser].score for s in counted if s.polarity > 0)
        wd = sum(result.agents[s.endorser].score for s in counted if s.polarity < 0)
        result.entries[target] = EntryScore(
            community_confidence=(prior + wc) / (1 + wc + wd),
            confirms=sum(1 for s in counted if s.polarity > 0),
            disconfirms=sum(1 for s in counted if s.polarity < 0),
        )
    return result


def read_signals(conn: sqlite3.Connection) -> list[Signal]:
    """Every counted-kind signal in the store, in a stable order."""
    rows = conn.execute(SIGNALS_SQL).fetchall()
    return sorted(Signal(r[0], r[1], r[2], int(r[3])) for r in rows)


def snapshot(conn: sqlite3.Connection, *, force: bool = False) -> tuple[int, TrustResult | None]:
    """(log head, freshly computed result), or (head, None) when the cache already covers the head.

    Meant for a reader connection: the signals are read and folded without holding the writer.
    """
    head = int(conn.execute("SELECT coalesce(max(seq), 0) FROM records").fetchone()[0])
    state = conn.execute("SELECT computed_seq FROM trust_state WHERE id = 1").fetchone()
    if not force and state is not None and state[0] >= head:
        return head, None
    return head, compute(read_signals(conn), equivocation.by_author(conn))


def store(conn: sqlite3.Connection, head: int, result: TrustResult, now_ms: int) -> bool:
    """Replace the cache with `result`, computed at log position `head`, unless a newer one is already stored.

    Runs inside one write transaction, so readers see either the old or the new cache whole.
    """
    state = conn.execute("SELECT computed_seq FROM trust_state WHERE id = 1").fetchone()
    if state is not None and state[0] > head:
        return False
    conn.execute("DELETE FROM trust_scores")
    conn.execute("DELETE FROM entry_confidence")
    conn.executemany(
        "INSERT INTO trust_scores (agent_id, confirms, disconfirms, laplace, score, weighted_confirms,"
        " weighted_disconfirms) VALUES (?, ?, ?, ?, ?, ?, ?)",
        [
            (
                a,
                s.confirms,
                s.disconfirms,
                round(s.laplace, DIGITS),
                round(s.score, DIGITS),
                round(s.weighted_confirms, DIGITS),
                round(s.weighted_disconfirms, DIGITS),
            )
            for a, s in result.agents.items()
        ],
    )
    conn.executemany(
        "INSERT INTO entry_confidence (entry_hash, community_confidence, confirms, disconfirms) VALUES (?, ?, ?, ?)",
        [(h, round(e.community_confidence, DIGITS), e.confirms, e.disconfirms) for h, e in result.entries.items()],
    )
    conn.execute(
        "INSERT INTO trust_state (id, computed_seq, computed_ms) VALUES (1, ?, ?)"
        " ON CONFLICT (id) DO UPDATE SET computed_seq = excluded.computed_seq, computed_ms = excluded.computed_ms",
        (head, now_ms),
    )
    return True


def refresh(conn: sqlite3.Connection, now_ms: int, *, force: bool = False) -> bool:
    """Recompute and store the cache on one connection if the log grew (or when forced). True if it ran."""
    head, result = snapshot(conn, force=force)
    return result is not None and store(conn, head, result, now_ms)


class TrustRefresh(msgspec.Struct):
    """Outcome of a refresh: whether it recomputed, and the log position the cache now covers."""

    ran: bool
    computed_seq: int


class Trust:
    """The trust cache of one node, refreshed by the background task and on demand (POST /v1/trust/refresh)."""

    def __init__(self, db: Database, now_ms: Callable[[], int]) -> None:
        self.db = db
        self.now_ms = now_ms

    async def refresh(self, *, force: bool = False) -> TrustRefresh:
        """Refresh the cache: compute on a reader (the writer keeps writing), then store in one short write."""
        head, result = await self.db.read(functools.partial(snapshot, force=force))
        ran = False
        if result is not None:
            ran = await self.db.write(functools.partial(store, head=head, result=result, now_ms=self.now_ms()))
        return TrustRefresh(ran=ran, computed_seq=await self.db.read(computed_seq))


def computed_seq(conn: sqlite3.Connection) -> int:
    """The log position the cache covers (0 before the first refresh)."""
    row = conn.execute("SELECT computed_seq FROM trust_state WHERE id = 1").fetchone()
    return int(row[0]) if row else 0


def agent_trust(conn: sqlite3.Connection, agent_id: str) -> AgentTrust:
    """An agent's cached trust; the neutral defaults when it has no signals."""
    row = conn.execute(
        "SELECT confirms, disconfirms, laplace, score FROM trust_scores WHERE agent_id = ?", (agent_id,)
    ).fetchone()
    state = conn.execute("SELECT computed_seq FROM trust_state WHERE id = 1").fetchone()
    computed_seq = state[0] if state else 0
    if row is None:
        return AgentTrust(score=NEUTRAL, laplace=NEUTRAL, confirms=0, disconfirms=0, computed_seq=computed_seq)
    return AgentTrust(score=row[3], laplace=row[2], confirms=row[0], disconfirms=row[1], computed_seq=computed_seq)


async def refresh_now(request: web.Request) -> web.Response:
    """POST /v1/trust/refresh: recompute the trust cache now if the log grew since the last run."""
    return json_response(await request.app[NODE].trust.refresh())


ROUTES: list[Route] = [
    Route(
        "POST",
        "/v1/trust/refresh",
        refresh_now,
        "Recompute trust scores and community confidence now (a no-op when no record arrived since)",
        "any",
        responses={200: TrustRefresh},
        tag="trust",
    )
]
