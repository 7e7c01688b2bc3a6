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
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

import msgspec

from node.store import equivocation
from node.store.conn import Conn
from node.store.db import Database
from node.trust import store as trust_store
from wire.api import AgentTrust

NEUTRAL = 0.5
REFRESH_SECONDS = 30.0
DIGITS = 4


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
    agents, edges = set(agents), list(edges)
    if not agents and not edges:  # a node without signals (every new one) never imports networkx: 0.3 s of CPU
        return {}, []
    import networkx as nx

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


def read_signals(conn: Conn) -> list[Signal]:
    """Every counted-kind signal in the store, in a stable order."""
    return sorted(Signal(r[0], r[1], r[2], int(r[3])) for r in trust_store.signal_rows(conn))


def snapshot(conn: Conn, *, force: bool = False) -> tuple[int, TrustResult | None]:
    """(log head, freshly computed result), or (head, None) when the cache already covers the head.

    Meant for a reader connection: the signals are read and folded without holding the writer.
    """
    head = trust_store.log_head(conn)
    state = trust_store.cache_seq(conn)
    if not force and state is not None and state >= head:
        return head, None
    return head, compute(read_signals(conn), equivocation.by_author(conn))


def store(conn: Conn, head: int, result: TrustResult, now_ms: int) -> bool:
    """Replace the cache with `result`, computed at log position `head`, unless a newer one is already stored.

    Runs inside one write transaction, so readers see either the old or the new cache whole.
    """
    state = trust_store.cache_seq(conn)
    if state is not None and state > head:
        return False
    trust_store.replace_cache_txn(
        conn,
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
        [(h, round(e.community_confidence, DIGITS), e.confirms, e.disconfirms) for h, e in result.entries.items()],
        head,
        now_ms,
    )
    return True


def refresh(conn: Conn, now_ms: int, *, force: bool = False) -> bool:
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


def computed_seq(conn: Conn) -> int:
    """The log position the cache covers (0 before the first refresh)."""
    seq = trust_store.cache_seq(conn)
    return seq if seq is not None else 0


def agent_trust(conn: Conn, agent_id: str) -> AgentTrust:
    """An agent's cached trust; the neutral defaults when it has no signals."""
    row = trust_store.agent_scores(conn, agent_id)
    state = trust_store.cache_seq(conn)
    computed_seq = state if state is not None else 0
    if row is None:
        return AgentTrust(score=NEUTRAL, laplace=NEUTRAL, confirms=0, disconfirms=0, computed_seq=computed_seq)
    return AgentTrust(score=row[3], laplace=row[2], confirms=row[0], disconfirms=row[1], computed_seq=computed_seq)
