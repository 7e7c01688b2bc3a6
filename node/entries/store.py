"""The SQL of entries and links (docs/architecture.md, "Where SQL lives"): the reads of entries by id or hash, graph
traversal and searches by filters alone, all set-based; and the statements the posting and linking services
(node/entries/posting.py, node/entries/links.py) run in their transactions. Functions that only run on the
writer thread end in `_txn`; reads have plain names, whichever thread runs them (a few, such as `author_of`, are
also called inside a write job).

Searches with words are answered by the search index (node/search_index/), not here."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from typing import Any, NamedTuple

import msgspec

from node.entries.queries import (
    AUTHOR_TRUST,
    COMMUNITY_CONFIDENCE,
    ENTRY_COLUMNS,
    ENTRY_COLUMNS_PG,
    ENTRY_STATE,
    ENTRY_STATE_PG,
    LINK_COLUMNS,
    EntryState,
    entry_columns,
    entry_out,
    json_array,
    link_out,
    seen_by,
    tagged_any,
)
from node.errors import NotFound
from node.spaces.sight import Sight
from node.store import equivocation
from node.store.ahead import NAMED_SQL, NAMED_SQL_PG, Named
from node.store.conn import POSTGRESQL, Conn, any_of, engine_of
from node.store.pg_text import unescape_text
from wire.api import EntryOut, LinkOut, SearchQuery

MAX_NEIGHBOURHOOD = 1_000  # entries a traversal may collect before it stops and says so
MAX_WALKED_LINKS = 1_000  # links likewise: a popular entry must not make an unbounded answer
_HASH = re.compile(r"[0-9a-f]{64}")
_LOCAL_ID = re.compile(r"[0-9]{1,19}")  # ASCII digits only: str.isdigit() also accepts '²' and '١'
MAX_LOCAL_ID = 2**63 - 1  # SQLite's INTEGER range


def resolve_ref(conn: Conn, ref: str, sight: Sight) -> tuple[str | None, int | None]:
    """Resolve an entry reference (local id or record hash) to (record_hash, local id); (None, None) if unknown.

    An unknown but well-formed hash resolves to (hash, None): it may still arrive. An entry of a space `sight` does
    not see is unknown, exactly as one not held (docs/spaces.md).
    """
    held = held_refs(conn, [ref], sight).get(ref)
    if held is not None:
        return held.record_hash, held.entry_id
    return (ref, None) if _HASH.fullmatch(ref) else (None, None)


class Held(NamedTuple):
    """An entry a reference names: its record hash, local id and whether it is a simulation (truth_state)."""

    record_hash: str
    entry_id: int
    synthetic: bool


def held_refs(conn: Conn, refs: Sequence[str], sight: Sight) -> dict[str, Held]:
    """The entries these references (local ids or record hashes) name that are here and that `sight` sees, by
    reference, in one statement. A reference that names none (malformed, not held, or of a space `sight` does not
    see: docs/spaces.md) is not a key."""
    ids = [int(ref) for ref in refs if _LOCAL_ID.fullmatch(ref) and int(ref) <= MAX_LOCAL_ID]
    hashes = [ref for ref in refs if _HASH.fullmatch(ref)]
    if not ids and not hashes:
        return {}
    seen = seen_by(conn, sight, "space")
    id_test, listed_ids = any_of(conn, ids)
    hash_test, listed_hashes = any_of(conn, hashes)
    columns = "id, record_hash, truth_state = 'simulation'"
    rows = conn.execute(  # two index lookups: one by id, one by hash
        f"SELECT {columns} FROM entries WHERE id {id_test} AND {seen}"
        f" UNION ALL SELECT {columns} FROM entries WHERE record_hash {hash_test} AND {seen}",
        (listed_ids, listed_hashes),
    ).fetchall()
    by_id = {int(r[0]): Held(r[1], int(r[0]), bool(r[2])) for r in rows}
    by_hash = {held.record_hash: held for held in by_id.values()}
    found: dict[str, Held] = {}
    for ref in refs:
        held = by_hash.get(ref) if _HASH.fullmatch(ref) else by_id.get(int(ref)) if _LOCAL_ID.fullmatch(ref) else None
        if held is not None:
            found[ref] = held
    return found


def require_ref(conn: Conn, ref: str, what: str, sight: Sight, *, field: str, code: str, stored: bool = False) -> str:
    """The record hash `ref` (an entry id or a record hash) names, or 404 `code` naming `field`.

    A well-formed hash of an entry not here yet resolves (it may still arrive), unless `stored`: then the entry
    must be on this node. `what` names the reference in the error ("link target", "evidence", ...).
    """
    record_hash, entry_id = resolve_ref(conn, ref, sight)
    if stored and (record_hash is None or entry_id is None):
        raise NotFound(f"{what} {ref!r} is not on this node", field=field, code=code)
    if record_hash is None:
        raise NotFound(f"{what} {ref!r} is not a known entry id or a record hash", field=field, code=code)
    return record_hash


def entry_states(conn: Conn, ids: list[int]) -> dict[int, EntryState]:
    """ENTRY_STATE of entries by local id (one row for all of them, as `entries_by_ids`)."""
    if engine_of(conn) == POSTGRESQL:
        text = conn.execute(
            "SELECT coalesce(json_agg(json_build_array(id, retracted, superseded, community_confidence,"
            f" superseded_claims, equivocated)), '[]')::text FROM (SELECT e.id, {ENTRY_STATE_PG} FROM entries e"
            " WHERE e.id = ANY(?)) s",
            (list(ids),),
        ).fetchone()[0]
    else:
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
            claims if isinstance(claims, list) else json_array(claims),
            bool(equivocated),
        )
        for entry_id, retracted, superseded, confidence, claims, equivocated in msgspec.json.decode(text)
    }


# ENTRY_COLUMNS by name, for a JSON array per row: a statement that returns many rows steps once per row, and
# each step of a writer-thread statement hands the GIL back and waits for it. Exact: text is escaped (NUL
# included), and the two floats have at most 4 decimals (confidence is rounded when a record is accepted,
# community confidence when computed), which SQLite's 15 significant digits write exactly. The two arrays of
# strings come as JSON (`json(...)` keeps the JSON subtype): decoded with the row, not by `json.loads` each.
_ENTRY_JSON = (
    "id, record_hash, content_fingerprint, author_id, created_at, entry_type, performative, content, confidence,"
    " json(tags), json(directed_to), metadata, truth_state, authority, scope, signature, retracted, superseded,"
    " community_confidence, superseded_claims, equivocated, space"
)


# _ENTRY_JSON on PostgreSQL: the two arrays cast to json (their text is JSON), the states' booleans as JSON's.
_ENTRY_JSON_PG = _ENTRY_JSON.replace("json(tags), json(directed_to)", "CAST(tags AS json), CAST(directed_to AS json)")


def entries_by_ids(conn: Conn, ids: list[int], sight: Sight) -> list[EntryOut]:
    """Entries by local id that `sight` sees, in no particular order, fetched as one row (see `_ENTRY_JSON`)."""
    if engine_of(conn) == POSTGRESQL:
        text = conn.execute(
            f"SELECT coalesce(json_agg(json_build_array({_ENTRY_JSON_PG})), '[]')::text FROM"
            f" (SELECT {ENTRY_COLUMNS_PG} FROM entries e WHERE e.id = ANY(?) AND {seen_by(conn, sight, 'e.space')}) s",
            (list(ids),),
        ).fetchone()[0]
        rows = msgspec.json.decode(text)
        if "\\u0001" in text:  # a text column's value escaped by the connection, inside JSON the loader never saw
            rows = [[unescape_text(v) if isinstance(v, str) else v for v in row] for row in rows]  # (record 84)
        return [entry_out(row) for row in rows]
    else:
        text = conn.execute(
            f"SELECT json_group_array(json_array({_ENTRY_JSON})) FROM (SELECT {ENTRY_COLUMNS} FROM entries e"
            f" WHERE e.id IN (SELECT value FROM json_each(?)) AND {sight.sql('e.space')})",
            (json.dumps(ids),),
        ).fetchone()[0]
    return [entry_out(row) for row in msgspec.json.decode(text)]


def entries_by_hashes(conn: Conn, hashes: Iterable[str], include_synthetic: bool, sight: Sight) -> list[EntryOut]:
    """Entries with these hashes that are present and that `sight` sees, oldest first."""
    test, listed = any_of(conn, hashes)
    sql = (
        f"SELECT {entry_columns(conn)} FROM entries e WHERE e.record_hash {test}"
        f" AND {seen_by(conn, sight, 'e.space')}"
        + ("" if include_synthetic else " AND e.truth_state != 'simulation'")
        + " ORDER BY e.id"
    )
    return [entry_out(r) for r in conn.execute(sql, (listed,)).fetchall()]


def traverse(
    conn: Conn,
    seeds: Sequence[str],
    *,
    hops: int,
    link_types: Sequence[str],
    direction: str,
    include_links: bool,
    sight: Sight,
    include_synthetic: bool = True,
) -> tuple[list[str], list[LinkOut], bool]:
    """Breadth-first walk of the link graph from `seeds`, one set-based query per hop.

    Returns (hashes reached including seeds, links walked, truncated). With hops=0 and
    include_links, the links incident to the seeds are returned without walking them;
    without include_links no links are returned at any depth. `same_as` is symmetric: it is followed both ways
    whatever the direction. Without `include_synthetic`, links with a simulation at either end are neither
    returned nor walked (a hidden entry shows through none of its links); nor are links with an entry of a space
    `sight` does not see at either end (the walk neither follows them nor reveals that the entry exists).
    """
    reached = dict.fromkeys(seeds)
    frontier = list(seeds)
    links: dict[int, LinkOut] = {}
    truncated = False
    rounds = max(hops, 1 if include_links else 0)
    for depth in range(rounds):
        if not frontier or truncated:
            break
        rows = _adjacent(conn, frontier, link_types, direction, include_synthetic, sight)
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


def _adjacent(
    conn: Conn, frontier: list[str], link_types: Sequence[str], direction: str, include_synthetic: bool, sight: Sight
) -> list[Any]:
    in_frontier, frontier_param = any_of(conn, frontier, ":f")
    of_type, types_param = any_of(conn, link_types, ":types")
    type_filter = f" AND l.link_type {of_type}" if link_types else ""
    hidden = [] if include_synthetic else ["z.truth_state = 'simulation'"]
    if not sight.everything:
        hidden.append(f"NOT {sight.sql('z.space')}")
        type_filter += f" AND {sight.sql('l.space')}"  # asserted in a space the reader may not see
    if hidden:  # an end the reader may not see: neither returned nor walked
        type_filter += (
            " AND NOT EXISTS (SELECT 1 FROM entries z WHERE z.record_hash IN (l.source_hash, l.target_hash)"
            f" AND ({' OR '.join(hidden)}))"
        )
    out_end, in_end = f"l.source_hash {in_frontier}", f"l.target_hash {in_frontier}"
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
    params = {"f": frontier_param, "types": types_param, "cap": MAX_WALKED_LINKS + 1}
    return conn.execute(sql, params).fetchall()


_SEARCH_ORDER = {
    "default": None,
    "trust": f"{AUTHOR_TRUST} DESC",
    "community_confidence": "community_confidence DESC",
}


def search(conn: Conn, q: SearchQuery, since_ms: int | None, sight: Sight) -> list[EntryOut]:
    """One page of entries matching the query's filters that `sight` sees, newest first (or by `sort`); its words
    are not looked at.

    A search with words is answered by the search index (node/search_index/); this is the search without them.
    """
    where: list[str] = [] if sight.everything else [sight.sql("e.space")]
    params: dict[str, Any] = {"limit": q.limit, "offset": q.offset}

    def in_list(column: str, name: str, values: Sequence[str]) -> None:
        if values:
            test, params[name] = any_of(conn, values, f":{name}")
            where.append(f"{column} {test}")

    in_list("e.entry_type", "types", q.entry_type)
    in_list("e.performative", "perfs", q.performative)
    in_list("e.author_id", "authors", q.author)
    in_list("e.truth_state", "truth", q.truth_state)
    in_list("e.space", "spaces", q.space)
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
        f"SELECT {entry_columns(conn)} FROM entries e{filters} ORDER BY {order + ', ' if order else ''}e.id DESC"
        " LIMIT :limit OFFSET :offset"
    )
    return [entry_out(r) for r in conn.execute(sql, params).fetchall()]


# ---- the statements of posting and linking (node/entries/posting.py, node/entries/links.py) -------------------


def entry_by_hash(conn: Conn, record_hash: str) -> EntryOut:
    """The entry stored under `record_hash` (which must be stored), as shown."""
    row = conn.execute(
        f"SELECT {entry_columns(conn)} FROM entries e WHERE e.record_hash = ?", (record_hash,)
    ).fetchone()
    return entry_out(row)


def entry_id_txn(conn: Conn, record_hash: str) -> int:
    """The local id of the entry stored under `record_hash` (which must be stored)."""
    return int(conn.execute("SELECT id FROM entries WHERE record_hash = ?", (record_hash,)).fetchone()[0])


def author_of(conn: Conn, record_hash: str) -> str | None:
    """The author of the entry stored under `record_hash`, or None if it is not stored here (a read before a
    post's write, and again inside it)."""
    row = conn.execute("SELECT author_id FROM entries WHERE record_hash = ?", (record_hash,)).fetchone()
    return None if row is None else str(row[0])


def stored_body(conn: Conn, record_hash: str) -> bytes:
    """The canonical bytes of the version of `record_hash` this node shows (its winner)."""
    return bytes(
        conn.execute(
            "SELECT r.body FROM entries e JOIN records r ON r.seq = e.id WHERE e.record_hash = ?", (record_hash,)
        ).fetchone()[0]
    )


def derived_link_held_txn(conn: Conn, source: str, target: str, author_id: str) -> bool:
    """Whether `author_id` already linked `source` to `target` by a `derived_from` link."""
    return bool(
        conn.execute(
            "SELECT 1 FROM links WHERE source_hash = ? AND target_hash = ? AND link_type = 'derived_from'"
            " AND author_id = ? AND ordinal >= 0 LIMIT 1",
            (source, target, author_id),
        ).fetchone()
    )


def link_id_of_txn(conn: Conn, origin_hash: str) -> int:
    """The local id of the link a link record (`origin_hash`, stored) asserts."""
    row = conn.execute("SELECT id FROM links WHERE origin_hash = ? AND ordinal = 0", (origin_hash,)).fetchone()
    return int(row[0])


def same_link_txn(
    conn: Conn, source: str, target: str, link_type: str, author_id: str, space: str | None = None
) -> tuple[int, str, str] | None:
    """The first link `author_id` asserted from `source` to `target` of `link_type` in `space` (None: public), as
    (id, origin hash, kind of the origin record), or None."""
    same = conn.execute(
        "SELECT l.id, l.origin_hash, (SELECT r.kind FROM records r WHERE r.hash = l.origin_hash LIMIT 1) FROM links l"
        " WHERE l.source_hash = ? AND l.target_hash = ? AND l.link_type = ? AND l.author_id = ?"
        f" AND l.ordinal >= 0 AND l.space {'IS NOT DISTINCT FROM' if engine_of(conn) == POSTGRESQL else 'IS'} ?"
        " ORDER BY l.id LIMIT 1",
        (source, target, link_type, author_id, space),
    ).fetchone()
    return None if same is None else (int(same[0]), same[1], same[2])


def entry_stored_txn(conn: Conn, record_hash: str) -> bool:
    """Whether an entry is stored under `record_hash`."""
    return bool(conn.execute("SELECT 1 FROM entries WHERE record_hash = ?", (record_hash,)).fetchone())


def link_by_origin(conn: Conn, origin_hash: str) -> LinkOut:
    """The link a link record (`origin_hash`, stored) asserts."""
    row = conn.execute(
        f"SELECT {LINK_COLUMNS} FROM links l WHERE l.origin_hash = ? AND l.ordinal = 0", (origin_hash,)
    ).fetchone()
    return link_out(row)


def link_by_id(conn: Conn, link_id: int) -> LinkOut:
    """One link by its local id."""
    row = conn.execute(f"SELECT {LINK_COLUMNS} FROM links l WHERE l.id = ?", (link_id,)).fetchone()
    return link_out(row)


# `look_ahead_txn`'s statement: the versions held of the addresses :h, what stored links name of them, and the
# community confidence each entry (hash, author) of :p would show; one row.
_LOOK_AHEAD_SQL = (
    f"SELECT {equivocation.HELD_JSON}, {NAMED_SQL},"
    f" (SELECT json_group_array(json_array(e.record_hash, {COMMUNITY_CONFIDENCE}))"
    "  FROM (SELECT p.value ->> 0 AS record_hash, p.value ->> 1 AS author_id FROM json_each(:p) p) e)"
)
# The same on PostgreSQL: :h an array of the addresses, the pairs as two arrays (:ph, :pa); JSON text back.
_LOOK_AHEAD_SQL_PG = (
    f"SELECT {equivocation.HELD_JSON_PG}, {NAMED_SQL_PG},"
    f" (SELECT coalesce(json_agg(json_build_array(e.record_hash, {COMMUNITY_CONFIDENCE})), '[]')::text"
    "  FROM unnest(CAST(:ph AS text[]), CAST(:pa AS text[])) AS e(record_hash, author_id))"
)


class LookAhead(NamedTuple):
    """What a run of entries about to be appended finds stored, read in one statement before it (`look_ahead_txn`)."""

    held: dict[str, list[equivocation.Held]]  # `equivocation.held` of their addresses
    named: Named  # what stored links (and subscriptions) say of them
    confidence: dict[str, float]  # the community confidence each would show (COMMUNITY_CONFIDENCE), by hash


def look_ahead_txn(conn: Conn, entries: Sequence[tuple[str, str]]) -> LookAhead:
    """`LookAhead` of entries (record hash, author) about to be appended in this transaction, in one statement.
    Exact: hashes are hex and the confidences have at most 4 decimals, which JSON text carries exactly."""
    addresses = sorted({h for h, _ in entries})
    if engine_of(conn) == POSTGRESQL:
        pairs = {"h": addresses, "ph": [h for h, _ in entries], "pa": [a for _, a in entries]}
        row = conn.execute(_LOOK_AHEAD_SQL_PG, pairs).fetchone()
    else:
        row = conn.execute(
            _LOOK_AHEAD_SQL, {"h": json.dumps(addresses), "p": json.dumps([list(pair) for pair in entries])}
        ).fetchone()
    held_json, superseded, contradicted, subscribed, confidence_json = row
    return LookAhead(
        equivocation.held_from(msgspec.json.decode(held_json)),
        Named(bool(superseded), bool(contradicted), bool(subscribed)),
        {h: float(c) for h, c in msgspec.json.decode(confidence_json)},
    )
