"""What an entry's or a link's answer is made of: the SQL fragments that select them (shared by the store modules
that read entries: node/entries/store.py, the feed's, the search index's), the renderers of their rows, and the
answer of an entry built from its record and state. Nothing here runs a statement: the reads are in
node/entries/store.py (docs/architecture.md, "Where SQL lives").

Searches with words are answered by the search index (node/search_index/), not here."""

from __future__ import annotations

import json
import sqlite3
import unicodedata
from collections.abc import Sequence
from datetime import datetime
from typing import Any, NamedTuple

from identity import canonical
from identity.schema import EntryRecord
from identity.schema_v3 import space_of
from node.errors import InvalidInput
from node.spaces.sight import Sight
from node.store.conn import POSTGRESQL, Conn, engine_of
from wire.api import EntryOut, LinkOut
from wire.time import ms_of

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


# What an entry's row holds beside its record: its state, derived from links and the trust cache; only entries of its
# own space (public ones for a public entry: `IS` compares NULLs) supersede it (docs/spaces.md). `same` is the
# engine's null-safe equality and `claims` its aggregate of the claims' sources into a JSON array (record 50).
def _entry_state(same: str, claims: str) -> str:
    return (
        " EXISTS (SELECT 1 FROM links r WHERE r.source_hash = e.record_hash AND r.link_type = 'retracted_by')"
        "   AS retracted,"
        " EXISTS (SELECT 1 FROM links s JOIN entries n ON n.record_hash = s.source_hash"
        "   WHERE s.target_hash = e.record_hash AND s.link_type = 'supersedes' AND n.performative != 'retract'"
        f"  AND n.space {same} e.space AND s.space {same} e.space AND {_ACCEPTED}) AS superseded,"
        f" {COMMUNITY_CONFIDENCE} AS community_confidence,"
        f" (SELECT {claims} FROM links s JOIN entries n ON n.record_hash = s.source_hash"
        "   WHERE s.target_hash = e.record_hash AND s.link_type = 'supersedes' AND n.performative != 'retract'"
        f"  AND n.space {same} e.space AND s.space {same} e.space AND NOT {_ACCEPTED}) AS superseded_claims,"
        # node/store/equivocation.py: an address with two versions (this row shows the winner)
        " EXISTS (SELECT 1 FROM equivocations q WHERE q.hash = e.record_hash) AS equivocated"
    )


def entry_columns(conn: Conn) -> str:
    """ENTRY_COLUMNS in the SQL of `conn`'s engine (ENTRY_COLUMNS_PG on PostgreSQL)."""
    return ENTRY_COLUMNS_PG if engine_of(conn) == POSTGRESQL else ENTRY_COLUMNS


def seen_by(conn: Conn, sight: Sight, column: str) -> str:
    """`sight.sql(column)` in `conn`'s engine's SQL (the operator's sight: `1` on SQLite, `TRUE` on PostgreSQL)."""
    return sight.sql(column, engine_of(conn))


def _entry_columns(state: str) -> str:
    return (
        "e.id, e.record_hash, e.content_fingerprint, e.author_id, e.created_at, e.entry_type, e.performative,"
        " e.content, e.confidence, e.tags, e.directed_to, e.metadata, e.truth_state, e.authority, e.scope,"
        " e.signature," + state + ", e.space"
    )


ENTRY_STATE = _entry_state("IS", "json_group_array(DISTINCT s.source_hash)")
ENTRY_COLUMNS = _entry_columns(ENTRY_STATE)
# The same on PostgreSQL: json_agg is NULL over no rows, and its DISTINCT sorts the sources.
ENTRY_STATE_PG = _entry_state("IS NOT DISTINCT FROM", "coalesce(json_agg(DISTINCT s.source_hash), '[]')")
ENTRY_COLUMNS_PG = _entry_columns(ENTRY_STATE_PG)
LINK_COLUMNS = (
    "l.id, l.origin_hash, l.source_hash, l.target_hash, l.link_type, l.author_id, l.created_at, l.annotation,"
    " (EXISTS (SELECT 1 FROM entries a WHERE a.record_hash = l.source_hash)"
    "  AND EXISTS (SELECT 1 FROM entries b WHERE b.record_hash = l.target_hash)) AS resolved,"
    " l.ordinal < 0 AS derived, l.space"
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
        space,
    ) = row[:22]
    # Positional, in EntryOut's field order (tests/node/entries/test_queries.py checks it): a page renders 20 of these
    # per search, and keywords cost twice the time. Arrays are lists when read as JSON (node/entries/store.py
    # `entries_by_ids`), else text.
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
        tags if isinstance(tags, list) else json_array(tags),
        directed_to if isinstance(directed_to, list) else json_array(directed_to),
        {} if metadata == "{}" else json.loads(metadata),
        truth_state,
        authority,
        scope,
        signature,
        bool(retracted),
        bool(superseded),
        community_confidence,
        superseded_claims if isinstance(superseded_claims, list) else json_array(superseded_claims),
        bool(equivocated),
        2 if equivocated else 1,
        space,
    )


def json_array(text: str) -> list[Any]:
    """A JSON array column's text as a list."""
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
        space=row["space"],
    )


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
    return ms_of(moment)


class EntryState(NamedTuple):
    """What an entry's answer holds beyond its record (ENTRY_STATE), for `entry_out_of`."""

    retracted: bool
    superseded: bool
    community_confidence: float | None
    superseded_claims: list[str]
    equivocated: bool


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
        space_of(rec),
    )


def _sorted_keys(value: Any) -> Any:
    """`json.loads(json.dumps(value, sort_keys=True))` for the JSON values a record holds, without the text."""
    if isinstance(value, dict):
        return {key: _sorted_keys(value[key]) for key in sorted(value)}
    if isinstance(value, list):
        return [_sorted_keys(item) for item in value]
    return value


# Trust of an entry's author from the trust cache (node/trust/service.py); neutral 0.5 without signals.
AUTHOR_TRUST = "coalesce((SELECT t.score FROM trust_scores t WHERE t.agent_id = e.author_id), 0.5)"


def tagged_any(tags: Sequence[str], params: dict[str, Any]) -> str:
    """A condition that entry `e` carries one of `tags`; their values are added to `params` (as :tag0, :tag1, ...).

    Bound one by one, not as a JSON array: SQLite's JSON functions cut text at a NUL, and a tag may hold one.
    """
    names = []
    for i, tag in enumerate(dict.fromkeys(unicodedata.normalize("NFC", t) for t in tags)):  # stored tags are NFC
        params[f"tag{i}"] = tag
        names.append(f":tag{i}")
    return f"e.id IN (SELECT entry_id FROM entry_tags WHERE tag IN ({', '.join(names)}))"
