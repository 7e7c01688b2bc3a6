"""Read paths: entries by id or hash, graph traversal, searches by filters alone. All set-based SQL.

Searches with words are answered by the search index (node/search_index/), not here."""

from __future__ import annotations

import json
import re
import sqlite3
import unicodedata
from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any, NamedTuple

import msgspec

from identity import canonical
from identity.schema import EntryRecord
from node.errors import InvalidInput, NotFound
from wire.api import EntryOut, LinkOut, SearchQuery

MAX_NEIGHBOURHOOD = 1_000  # entries a traversal may collect before it stops and says so
MAX_WALKED_LINKS = 1_000  # links likewise: a popular entry must not make an unbounded answer
_HASH = re.compile(r"[0-9a-f]{64}")
_LOCAL_ID = re.compile(r"[0-9]{1,19}")  # ASCII digits only: str.isdigit() also accepts '²' and '١'
MAX_LOCAL_ID = 2**63 - 1  # SQLite's INTEGER range
# An entry's community confidence (node/trust/service.py): its computed value, else its author's trust, else neutral
# 0.5.
COMMUNITY_CONFIDENCE = (
    "coalesce((SELECT c.community_confidence FROM entry_confidence c WHERE c.entry_hash = e.record_hash),"
    " (SELECT t.score FROM trust_scores t WHERE t.agent_id = e.author_id), 0.5)"
)

# Whether the `supersedes` link `s` (from entry `s.source_hash` to entry `e`) changes e's state: e's author
# asserted a `supersedes` from that source to e (their own entry superseding it, or a link record of their own),
# or e's author posted an `ack` entry linking to the superseding entry. Otherwise it is only a claim
# (`superseded_claims`). A function of signed records alone: every node holding them computes the same.
_ACCEPTED = (
    "(EXISTS (SELECT 1 FROM links o WHERE o.source_hash = s.source_hash AND o.target_hash = e.record_hash"
    "   AND o.link_type = 'supersedes' AND o.author_id = e.author_id)"
    " OR EXISTS (SELECT 1 FROM links k JOIN entries a ON a.record_hash = k.source_hash"
    "   WHERE k.target_hash = s.source_hash AND a.author_id = e.author_id AND a.performative = 'ack'))"
)
# What an entry's row holds beside its record: its state, derived from links and the trust cache.
ENTRY_STATE = (
    " EXISTS (SELECT 1 FROM links r WHERE r.source_hash = e.record_hash AND r.link_type = 'retracted_by')"
    "   AS retracted,"
    " EXISTS (SELECT 1 FROM links s JOIN entries n ON n.record_hash = s.source_hash"
    "   WHERE s.target_hash = e.record_hash AND s.link_type = 'supersedes' AND n.performative != 'retract'"
    f"  AND {_ACCEPTED}) AS superseded,"
    f" {COMMUNITY_CONFIDENCE} AS community_confidence,"
    " (SELECT json_group_array(DISTINCT s.source_hash) FROM links s JOIN entries n ON n.record_hash = s.source_hash"
    "   WHERE s.target_hash = e.record_hash AND s.link_type = 'supersedes' AND n.performative != 'retract'"
    f"  AND NOT {_ACCEPTED}) AS superseded_claims,"
    # node/store/equivocation.py: an address with two versions (this row shows the winner)
    " EXISTS (SELECT 1 FROM equivocations q WHERE q.hash = e.record_hash) AS equivocated"
)
ENTRY_COLUMNS = (
    "e.id, e.record_hash, e.content_fingerprint, e.author_id, e.created_at, e.entry_type, e.performative,"
    " e.content, e.confidence, e.tags, e.directed_to, e.metadata, e.truth_state, e.authority, e.scope, e.signature,"
    + ENTRY_STATE
)
LINK_COLUMNS = (
    "l.id, l.origin_hash, l.source_hash, l.target_hash, l.link_type, l.author_id, l.created_at, l.annotation,"
    " (EXISTS (SELECT 1 FROM entries a WHERE a.record_hash = l.source_hash)"
    "  AND EXISTS (SELECT 1 FROM entries b WHERE b.record_hash = l.target_hash)) AS resolved,"
    " l.ordinal < 0 AS derived"
)


# ENTRY_COLUMNS by name, for a JSON array per row: a statement that returns many rows steps once per row, and
# each step of a writer-thread statement hands the GIL back and waits for it. Exact: text is escaped (NUL
# included), and the two floats have at most 4 decimals (confidence is rounded when a record is accepted,
# community confidence when computed), which SQLite's 15 significant digits write exactly. The two arrays of
# strings come as JSON (`json(...)` keeps the JSON subtype): decoded with the row, not by `json.loads` each.
_ENTRY_JSON = (
    "id, record_hash, content_fingerprint, author_id, created_at, entry_type, performative, content, confidence,"
    " json(tags), json(directed_to), metadata, truth_state, authority, scope, signature, retracted, superseded,"
    " community_confidence, superseded_claims, equivocated"
)


def entry_out(row: sqlite3.Row) -> EntryOut:
    """Render an entries row (selected with ENTRY_COLUMNS, first: the columns are read by position)."""
    (
        entry_id,
        record_hash,
        fingerprint,
        author_id,
        created_at,
        entry_type,
        performative,
        content,
        confidence,
        tags,
        directed_to,
        metadata,
        truth_state,
        authority,
        scope,
        signature,
        retracted,
        superseded,
        community_confidence,
        superseded_claims,
        equivocated,
    ) = row[:21]
    # Positional, in EntryOut's field order (tests/node/entries/test_queries.py checks it): a page renders 20 of these
    # per search, and keywords cost twice the time. Arrays are lists when read through `_ENTRY_JSON`, else text.
    return EntryOut(
        entry_id,
        record_hash,
        fingerprint,
        author_id,
        created_at,
        entry_type,
        performative,
        content,
        confidence,
        tags if isinstance(tags, list) else _json_array(tags),
        directed_to if isinstance(directed_to, list) else _json_array(directed_to),
        {} if metadata == "{}" else json.loads(metadata),
        truth_state,
        authority,
        scope,
        signature,
        bool(retracted),
        bool(superseded),
        community_confidence,
        superseded_claims if isinstance(superseded_claims, list) else _json_array(superseded_claims),
        bool(equivocated),
        2 if equivocated else 1,
    )


def _json_array(text: str) -> list[Any]:
    return [] if text == "[]" else json.loads(text)


def link_out(row: sqlite3.Row) -> LinkOut:
    """Render a links row (selected with LINK_COLUMNS)."""
    return LinkOut(
        id=row["id"],
        origin_hash=row["origin_hash"],
        source=row["source_hash"],
        target=row["target_hash"],
        link_type=row["link_type"],
        author_id=row["author_id"],
        created_at=row["created_at"],
        annotation=row["annotation"],
        resolved=bool(row["resolved"]),
        derived=bool(row["derived"]),
    )


def resolve_ref(conn: sqlite3.Connection, ref: str) -> tuple[str | None, int | None]:
    """Resolve an entry reference (local id or record hash) to (record_hash, local id); (None, None) if unknown.

    An unknown but well-formed hash resolves to (hash, None): it may still arrive.
    """
    if _LOCAL_ID.fullmatch(ref):
        if int(ref) > MAX_LOCAL_ID:
            return None, None
        row = conn.execute("SELECT record_hash, id FROM entries WHERE id = ?", (int(ref),)).fetchone()
        return (row[0], row[1]) if row else (None, None)
    if _HASH.fullmatch(ref):
        row = conn.execute("SELECT id FROM entries WHERE record_hash = ?", (ref,)).fetchone()
        return ref, (row[0] if row else None)
    return None, None


def require_ref(conn: sqlite3.Connection, ref: str, what: str, *, field: str, code: str, stored: bool = False) -> str:
    """The record hash `ref` (an entry id or a record hash) names, or 404 `code` naming `field`.

    A well-formed hash of an entry not here yet resolves (it may still arrive), unless `stored`: then the entry
    must be on this node. `what` names the reference in the error ("link target", "evidence", ...).
    """
    record_hash, entry_id = resolve_ref(conn, ref)
    if stored and (record_hash is None or entry_id is None):
        raise NotFound(f"{what} {ref!r} is not on this node", field=field, code=code)
    if record_hash is None:
        raise NotFound(f"{what} {ref!r} is not a known entry id or a record hash", field=field, code=code)
    return record_hash


def parse_since(value: str | None, field: str) -> int | None:
    """An ISO 8601 timestamp with a timezone (a `since` parameter), as epoch milliseconds."""
    if value is None:
        return None
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        raise InvalidInput("since must be an ISO 8601 timestamp such as 2026-01-31T12:00:00Z", field=field) from None
    if moment.tzinfo is None:
        raise InvalidInput("since must carry a timezone (for example a trailing Z)", field=field)
    return int(moment.timestamp() * 1000)


class EntryState(NamedTuple):
    """What an entry's answer holds beyond its record (ENTRY_STATE), for `entry_out_of`."""

    retracted: bool
    superseded: bool
    community_confidence: float | None
    superseded_claims: list[str]
    equivocated: bool


def entry_states(conn: sqlite3.Connection, ids: list[int]) -> dict[int, EntryState]:
    """ENTRY_STATE of entries by local id (one row for all of them, as `entries_by_ids`)."""
    text = conn.execute(
        "SELECT json_group_array(json_array(id, retracted, superseded, community_confidence, superseded_claims,"
        f" equivocated)) FROM (SELECT e.id, {ENTRY_STATE} FROM entries e"
        " WHERE e.id IN (SELECT value FROM json_each(?)))",
        (json.dumps(ids),),
    ).fetchone()[0]
    return {
        entry_id: EntryState(
            bool(retracted),
            bool(superseded),
            confidence,
            claims if isinstance(claims, list) else _json_array(claims),
            bool(equivocated),
        )
        for entry_id, retracted, superseded, confidence, claims, equivocated in msgspec.json.decode(text)
    }


def entry_out_of(entry_id: int, record_hash: str, rec: EntryRecord, state: EntryState) -> EntryOut:
    """The answer `entry_out` gives for the entries row of `rec` stored under `entry_id`, built from the record
    itself (what `node.store.projections` stored from it, as SQLite gives it back) and its `state`."""
    return EntryOut(
        entry_id,
        record_hash,
        canonical.content_fingerprint(rec.content),
        rec.author_id,
        rec.created_at,
        rec.entry_type,
        rec.performative,
        rec.content,
        float(rec.confidence),  # a REAL column
        list(rec.tags),
        list(rec.directed_to),
        _sorted_keys(rec.metadata) if rec.metadata else {},  # stored with sort_keys, read back in that order
        rec.truth_state,
        rec.authority,
        rec.scope,
        rec.signature,
        state.retracted,
        state.superseded,
        state.community_confidence,
        state.superseded_claims,
        state.equivocated,
        2 if state.equivocated else 1,
    )


def _sorted_keys(value: Any) -> Any:
    """`json.loads(json.dumps(value, sort_keys=True))` for the JSON values a record holds, without the text."""
    if isinstance(value, dict):
        return {key: _sorted_keys(value[key]) for key in sorted(value)}
    if isinstance(value, list):
        return [_sorted_keys(item) for item in value]
    return value


def entries_by_ids(conn: sqlite3.Connection, ids: list[int]) -> list[EntryOut]:
    """Entries by local id, in no particular order, fetched as one row (see `_ENTRY_JSON`)."""
    text = conn.execute(
        f"SELECT json_group_array(json_array({_ENTRY_JSON})) FROM (SELECT {ENTRY_COLUMNS} FROM entries e"
        " WHERE e.id IN (SELECT value FROM json_each(?)))",
        (json.dumps(ids),),
    ).fetchone()[0]
    return [entry_out(row) for row in msgspec.json.decode(text)]


def synthetic_among(conn: sqlite3.Connection, hashes: Sequence[str]) -> set[str]:
    """Which of these record hashes are stored simulations (truth_state simulation)."""
    rows = conn.execute(
        "SELECT record_hash FROM entries WHERE record_hash IN (SELECT value FROM json_each(?))"
        " AND truth_state = 'simulation'",
        (json.dumps(list(hashes)),),
    ).fetchall()
    return {r[0] for r in rows}


def entries_by_hashes(conn: sqlite3.Connection, hashes: Iterable[str], include_synthetic: bool) -> list[EntryOut]:
    """Entries with these hashes that are present, oldest first."""
    sql = (
        f"SELECT {ENTRY_COLUMNS} FROM entries e WHERE e.record_hash IN (SELECT value FROM json_each(?))"
        + ("" if include_synthetic else " AND e.truth_state != 'simulation'")
        + " ORDER BY e.id"
    )
    return [entry_out(r) for r in conn.execute(sql, (json.dumps(list(hashes)),)).fetchall()]


def traverse(
    conn: sqlite3.Connection,
    seeds: Sequence[str],
    *,
    hops: int,
    link_types: Sequence[str],
    direction: str,
    include_links: bool,
    include_synthetic: bool = True,
) -> tuple[list[str], list[LinkOut], bool]:
    """Breadth-first walk of the link graph from `seeds`, one set-based query per hop.

    Returns (hashes reached including seeds, links walked, truncated). With hops=0 and
    include_links, the links incident to the seeds are returned without walking them;
    without include_links no links are returned at any depth. `same_as` is symmetric: it is followed both ways
    whatever the direction. Without `include_synthetic`, links with a simulation at either end are neither
    returned nor walked (a hidden entry shows through none of its links).
    """
    reached = dict.fromkeys(seeds)
    frontier = list(seeds)
    links: dict[int, LinkOut] = {}
    truncated = False
    rounds = max(hops, 1 if include_links else 0)
    for depth in range(rounds):
        if not frontier or truncated:
            break
        rows = _adjacent(conn, frontier, link_types, direction, include_synthetic)
        truncated = len(rows) > MAX_WALKED_LINKS
        nxt: list[str] = []
        for row in rows:
            if row["id"] not in links:
                if len(links) >= MAX_WALKED_LINKS:
                    truncated = True
                    break
                links[row["id"]] = link_out(row)
            if depth >= hops:
                continue
            for h in (row["source_hash"], row["target_hash"]):
                if h not in reached:
                    if len(reached) >= MAX_NEIGHBOURHOOD:
                        truncated = True
                        continue
                    reached[h] = None
                    nxt.append(h)
        frontier = nxt
    walked = sorted(links.values(), key=lambda link: link.id) if include_links else []
    return list(reached), walked, truncated


_NOT_SYNTHETIC = (
    " AND NOT EXISTS (SELECT 1 FROM entries z WHERE z.record_hash IN (l.source_hash, l.target_hash)"
    " AND z.truth_state = 'simulation')"
)


def _adjacent(
    conn: sqlite3.Connection, frontier: list[str], link_types: Sequence[str], direction: str, include_synthetic: bool
) -> list[Any]:
    type_filter = " AND l.link_type IN (SELECT value FROM json_each(:types))" if link_types else ""
    if not include_synthetic:
        type_filter += _NOT_SYNTHETIC
    out_end, in_end = (
        "l.source_hash IN (SELECT value FROM json_each(:f))",
        "l.target_hash IN (SELECT value FROM json_each(:f))",
    )
    same_as = " AND l.link_type = 'same_as'"
    parts = []
    if direction in ("outbound", "both"):
        parts.append(f"SELECT {LINK_COLUMNS} FROM links l WHERE {out_end}{type_filter}")
    else:  # same_as is two-way: its inbound links count as outbound too
        parts.append(f"SELECT {LINK_COLUMNS} FROM links l WHERE {out_end}{same_as}{type_filter}")
    if direction in ("inbound", "both"):
        parts.append(f"SELECT {LINK_COLUMNS} FROM links l WHERE {in_end}{type_filter}")
    else:
        parts.append(f"SELECT {LINK_COLUMNS} FROM links l WHERE {in_end}{same_as}{type_filter}")
    sql = " UNION ".join(parts) + " ORDER BY id LIMIT :cap"
    params = {"f": json.dumps(frontier), "types": json.dumps(list(link_types)), "cap": MAX_WALKED_LINKS + 1}
    return conn.execute(sql, params).fetchall()


# Trust of an entry's author from the trust cache (node/trust/service.py); neutral 0.5 without signals.
AUTHOR_TRUST = "coalesce((SELECT t.score FROM trust_scores t WHERE t.agent_id = e.author_id), 0.5)"
_SEARCH_ORDER = {
    "default": None,
    "trust": f"{AUTHOR_TRUST} DESC",
    "community_confidence": "community_confidence DESC",
}


def tagged_any(tags: Sequence[str], params: dict[str, Any]) -> str:
    """A condition that entry `e` carries one of `tags`; their values are added to `params` (as :tag0, :tag1, ...).

    Bound one by one, not as a JSON array: SQLite's JSON functions cut text at a NUL, and a tag may hold one.
    """
    names = []
    for i, tag in enumerate(dict.fromkeys(unicodedata.normalize("NFC", t) for t in tags)):  # stored tags are NFC
        params[f"tag{i}"] = tag
        names.append(f":tag{i}")
    return f"e.id IN (SELECT entry_id FROM entry_tags WHERE tag IN ({', '.join(names)}))"


def search(conn: sqlite3.Connection, q: SearchQuery, since_ms: int | None) -> list[EntryOut]:
    """One page of entries matching the query's filters, newest first (or by `sort`); its words are not looked at.

    A search with words is answered by the search index (node/search_index/); this is the search without them.
    """
    where: list[str] = []
    params: dict[str, Any] = {"limit": q.limit, "offset": q.offset}

    def in_list(column: str, name: str, values: Sequence[str]) -> None:
        if values:
            where.append(f"{column} IN (SELECT value FROM json_each(:{name}))")
            params[name] = json.dumps(list(values))

    in_list("e.entry_type", "types", q.entry_type)
    in_list("e.performative", "perfs", q.performative)
    in_list("e.author_id", "authors", q.author)
    in_list("e.truth_state", "truth", q.truth_state)
    if q.tags:
        where.append(tagged_any(q.tags, params))
    if q.min_confidence is not None:
        where.append("e.confidence >= :minconf")
        params["minconf"] = q.min_confidence
    if since_ms is not None:
        where.append("e.created_ms >= :since")
        params["since"] = since_ms
    if not q.include_synthetic:
        where.append("e.truth_state != 'simulation'")
    if q.min_trust is not None:
        where.append(f"{AUTHOR_TRUST} >= :mintrust")
        params["mintrust"] = q.min_trust
    order = _SEARCH_ORDER.get(q.sort)
    filters = (" WHERE " + " AND ".join(where)) if where else ""
    sql = (
        f"SELECT {ENTRY_COLUMNS} FROM entries e{filters} ORDER BY {order + ', ' if order else ''}e.id DESC"
        " LIMIT :limit OFFSET :offset"
    )
    return [entry_out(r) for r in conn.execute(sql, params).fetchall()]
