"""The log and its projections: append a verified record once, then project it into tables.

Each record kind has one projector; `rebuild` replays the whole log into freshly created projection tables and
proves the tables are derived data. Which projectors and tables, is the `Log` a connection carries
(`db.Connection.log`): node/features.py builds the node's from each feature's declarations, once, and the
node's `Database` gives it to every connection it opens, so this module knows none of the features' records.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, NamedTuple

import msgspec

from identity import canonical, schema_v3
from identity.schema import AgentRecord, EntryRecord, LinkRecord
from node.inbox import notify as notifications
from node.ops.progress import Report, silent
from node.store import agent_docs, db, equivocation
from node.store.ahead import NAMED_SQL, NAMED_SQL_PG, Named
from node.store.conn import POSTGRESQL, Conn, engine_of
from wire.time import parse_ms


@dataclass(frozen=True)
class Projection:
    """Context for projecting one record."""

    seq: int
    hash: str
    now_ms: int
    notify: bool  # False while rebuilding: notifications are node-local history, not derived data


Projector = Callable[[Conn, Any, Projection], None]
# A kind's projection switch for a stored record whose verdict changed (node/store/void.py): (conn, seq, hash,
# record, valid, now_ms) takes its rows out of the projections (valid false) or puts them back (valid true).
Switch = Callable[[Conn, int, str, dict[str, Any], bool, int], None]
# A check every record meets before `append_many` stores it (node/redaction/effects.py: a redacted body is refused);
# it raises to refuse, and rolls the write back.
Screen = Callable[[Conn, "list[Incoming]"], None]
REBUILD_STEP = "replaying the log"
REPORT_EVERY = 1000  # records between two progress reports of a rebuild


def append(
    conn: Conn,
    record: dict[str, Any],
    record_hash: str,
    decoded: Any,
    *,
    origin: str,
    now_ms: int,
    scope: str = "federation",
) -> tuple[int, bool]:
    """Append a verified record to the log and project it, once. Returns (seq, newly_inserted)."""
    return append_many(conn, [Incoming(record, record_hash, decoded, scope)], origin=origin, now_ms=now_ms)[0]


@dataclass(frozen=True)
class Incoming:
    """A verified record on its way into the log."""

    record: dict[str, Any]
    hash: str
    decoded: Any
    scope: str = "federation"
    body: bytes | None = None  # the record's canonical bytes when the caller holds them (else encoded here)
    version: str | None = None  # `version_of` the record, with `body`, when the caller holds it (else computed)


def space_of(record: dict[str, Any], record_hash: str) -> str | None:
    """The space a record belongs to (the log's `space` column, migration 0037): a space's creation record is its
    own space, any other record of a space names it in `space`; None for a public record."""
    if record.get("kind") == "space":
        return record_hash
    space = record.get("space")
    return space if isinstance(space, str) else None


def version_of(kind: str, record_hash: str, body: bytes) -> str:
    """A record's version (`sync.store.Verified.version`): an entry's is the SHA-256 of its signed canonical
    bytes (its address covers less of it); every other kind's is its hash."""
    return hashlib.sha256(body).hexdigest() if kind == "entry" else record_hash


REFUSED_SEQ = 0  # append_many's seq for a version refused because two better versions of its address are held


def append_many(
    conn: Conn,
    items: list[Incoming],
    *,
    origin: str,
    now_ms: int,
    held: Mapping[str, list[equivocation.Held]] | None = None,
    named: Named | None = None,
) -> list[tuple[int, bool]]:
    """Append verified records to the log and project the new ones, in order. Returns (seq, newly_inserted) per item.

    Set-based: a fixed handful of statements for the whole run (`db.insert_rows`), and the derived links and
    notifications that depend on several records decided once. A version already stored, or given twice, is
    inserted once (the later copies report newly_inserted false). A new version of an address already held (or
    two versions of one address in the run) goes through `node.store.equivocation`'s rule one by one; a refused one
    reports (REFUSED_SEQ, False). `held` is `equivocation.held` of the items' addresses when the caller read it
    in this transaction already (it is not read again), and `named` what stored links name them (`Named`), when
    the caller read it in this transaction before anything of this append.
    """
    if not items:
        return []
    for screen in log_of(conn).screens:
        screen(conn, items)
    bodies = [canonical.canonical_bytes(item.record) if item.body is None else item.body for item in items]
    versions = [
        version_of(item.record["kind"], item.hash, body) if item.version is None else item.version
        for item, body in zip(items, bodies, strict=True)
    ]
    first: dict[str, int] = {}
    for i, version in enumerate(versions):
        first.setdefault(version, i)
    per_address = Counter(items[i].hash for i in first.values())
    stored = equivocation.held(conn, per_address) if held is None else held
    known = {h.version: h.seq for versions_held in stored.values() for h in versions_held}
    clean = [i for i in first.values() if items[i].hash not in stored and per_address[items[i].hash] == 1]
    was_clean = set(clean)
    contested = [i for i in first.values() if versions[i] not in known and i not in was_clean]
    rows = [
        (
            items[i].hash,
            versions[i],
            items[i].record["kind"],
            items[i].record["author_id"],
            items[i].record["created_at"],
            parse_ms(items[i].record["created_at"]),
            items[i].scope,
            origin,
            now_ms,
            bodies[i],
            space_of(items[i].record, items[i].hash),
        )
        for i in clean
    ]
    seqs = dict(known)
    seqs.update(zip((versions[i] for i in clean), _insert_records_txn(conn, rows), strict=True))
    _project([(seqs[versions[i]], items[i]) for i in clean], now_ms, conn, named)
    inserted = {versions[i] for i in clean}
    for i in contested:
        seq, new = _append_version(conn, items[i], versions[i], bodies[i], origin, now_ms)
        seqs[versions[i]] = seq
        if new:
            inserted.add(versions[i])
    return [(seqs[v], v in inserted and first[v] == i) for i, v in enumerate(versions)]


RECORDS_HEAD = (
    "INSERT INTO records (hash, version, kind, author_id, created_at, created_ms, scope, origin, received_ms,"
    " body, space)"
)


def _insert_records_txn(conn: Conn, rows: list[tuple[Any, ...]]) -> list[int]:
    """Insert new versions into the log (rows of RECORDS_HEAD's columns, none of them stored) and return their seqs,
    in order, each after every seq handed out before."""
    if engine_of(conn) == POSTGRESQL:
        # An identity skips values (a conflict, a rollback), so the seqs are read back, matched by version.
        returned = db.insert_returning(
            conn, RECORDS_HEAD, rows, " ON CONFLICT (version) DO NOTHING RETURNING version, seq"
        )
        by_version = {version: int(seq) for version, seq in returned}
        if len(by_version) != len(rows):
            raise RuntimeError(f"{len(by_version)} of {len(rows)} new versions were added to the log")
        return [by_version[row[1]] for row in rows]
    added, last_rowid = db.insert_rows(conn, RECORDS_HEAD, rows, " ON CONFLICT (version) DO NOTHING")
    # New rows take the seqs after the highest ever handed out, in order (AUTOINCREMENT, migration 0049: a seq is
    # never reused), so they are the `added` seqs ending at last_insert_rowid(). RETURNING would step, and wait for
    # the GIL, once per record.
    if added != len(rows):  # a guard: with AUTOINCREMENT an insert fails rather than take a free seq
        raise RuntimeError(f"the log's new seqs do not follow its last seq: {added} of {len(rows)} rows were added")
    return [last_rowid - added + 1 + n for n in range(added)]


def _append_version(
    conn: Conn, item: Incoming, version: str, body: bytes, origin: str, now_ms: int
) -> tuple[int, bool]:
    """Append another version of an address already held (node.store.equivocation's rule, re-signed versions
    included): (seq, True) when kept, (REFUSED_SEQ, False) when refused; the projection switches to the version
    shown in this transaction."""
    before = equivocation.held(conn, [item.hash]).get(item.hash, [])
    for h in before:
        if h.version == version:
            return h.seq, False
    assert item.record["kind"] == "entry", "only entries have versions"
    stored = equivocation.members(conn, [h.seq for h in before])
    new = equivocation.member_of(version, item.scope, item.record)
    everything = [m for m, _ in stored.values()] + [new]
    resigned = equivocation.statement_count(everything) < len(everything)
    order = equivocation.key_order_txn(conn, item.record["author_id"]) if resigned else {}
    keep = equivocation.kept_members(everything, order)
    kept_versions = {m.version for m in keep}
    if version not in kept_versions:
        equivocation.refuse_txn(conn, version, item.hash, now_ms)
        return REFUSED_SEQ, False
    shown = equivocation.shown_seq(conn, item.hash)
    evicted = [h for h in before if h.version not in kept_versions]
    if evicted and new.statement not in {m.statement for m, _ in stored.values()}:
        # a statement comes in over a held one: if its author re-signs (has key events), versions of it this node
        # refused earlier, when it ranked lower, may now be kept; forget them so reconciliation fetches them again
        author_order = order if resigned else equivocation.key_order_txn(conn, item.record["author_id"])
        if "signing_key" in item.record or len(author_order) > 1:
            equivocation.forget_refused_txn(conn, item.hash)
    for h in evicted:  # a whole statement, never the one shown after this
        if h.seq == shown:
            equivocation.unproject_entry_txn(conn, item.hash, h.seq)
            shown = None
        conn.execute("DELETE FROM records WHERE seq = ?", (h.seq,))
        equivocation.refuse_txn(conn, h.version, item.hash, now_ms)
    values = (
        item.hash,
        version,
        item.record["kind"],
        item.record["author_id"],
        item.record["created_at"],
        parse_ms(item.record["created_at"]),
        item.scope,
        origin,
        now_ms,
        body,
        space_of(item.record, item.hash),
    )
    insert = RECORDS_HEAD + " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
    seq: int | None
    if engine_of(conn) == POSTGRESQL:  # no rowid there: the identity's value is returned
        seq = int(conn.execute(insert + " RETURNING seq", values).fetchone()[0])
    else:
        seq = conn.execute(insert, values).lastrowid
    assert seq is not None
    if equivocation.statement_count(keep) > 1:
        equivocation.mark_txn(conn, item.hash, item.record["author_id"], now_ms)
    seq_of = {m.version: s for s, (m, _) in stored.items()} | {version: seq}
    target = seq_of[keep[0].version]
    if target != shown:
        if shown is not None:
            equivocation.unproject_entry_txn(conn, item.hash, shown)
        if target == seq:
            project_entries(conn, [(seq, item)], now_ms, notify=True)
        else:  # a held version of the statement that now wins (its key is the later one)
            record = stored[target][1]
            project_entries(conn, [(target, _incoming(record, item.hash, item.scope))], now_ms, notify=True)
    if equivocation.flagged_seqs(conn, item.hash):
        # a version held is flagged void (node/store/void.py): show the best one not flagged, and no equivocation
        log_of(conn).switches["entry"](conn, seq, item.hash, item.record, True, now_ms)
    return seq, True


def _incoming(record: dict[str, Any], record_hash: str, scope: str) -> Incoming:
    """A stored record as an `Incoming`, decoded as it was stored."""
    from identity.schema_v3 import struct_for

    struct = struct_for(record)
    assert struct is not None
    return Incoming(record, record_hash, msgspec.convert(record, struct), scope)


def _project(new: list[tuple[int, Incoming]], now_ms: int, conn: Conn, named: Named | None = None) -> None:
    """Project newly logged records in log order: runs of entries together, every other kind one by one.

    `named` (read before any of them) stands for the stored links only while nothing but entries is projected:
    another kind's projector (a link record) may add links that name the entries after it."""
    projectors = log_of(conn).projectors
    if named is not None and any(item.record["kind"] != "entry" for _, item in new):
        named = None
    run: list[tuple[int, Incoming]] = []
    for seq, item in new:
        if item.record["kind"] == "entry":
            run.append((seq, item))
            continue
        if run:
            project_entries(conn, run, now_ms, notify=True)
            run = []
        projectors[item.record["kind"]](conn, item.decoded, Projection(seq, item.hash, now_ms, notify=True))
    if run:
        project_entries(conn, run, now_ms, notify=True, named=named)


def project_entries(
    conn: Conn, run: list[tuple[int, Incoming]], now_ms: int, *, notify: bool, named: Named | None = None
) -> None:
    """Project entry records (seq, record) into entries, their tags, addressees and links; then what they complete.

    `notify` is false while rebuilding: notifications are node-local history, not derived data. A run in which
    a record can derive a `retracted_by` link is projected one record at a time, so its links are numbered as a
    rebuild (which replays the log one record at a time) numbers them. `named` is the caller's reading of the
    stored links, when the caller read it in this transaction before the run (else read here).
    """
    hashes = json.dumps([item.hash for _, item in run])
    ahead = _ahead(conn, run, hashes, named)
    if len(run) > 1 and ahead.retractions:
        for one in run:
            project_entries(conn, [one], now_ms, notify=notify)
        return
    db.insert_rows(
        conn,
        "INSERT INTO entries (id, record_hash, content_fingerprint, author_id, created_at, created_ms, entry_type,"
        " performative, content, confidence, tags, directed_to, metadata, truth_state, authority, scope, signature,"
        " space)",
        [_entry_row(seq, item.hash, item.decoded) for seq, item in run],
    )
    _insert_or_ignore(
        conn, "INTO entry_tags (entry_id, tag)", [(seq, t) for seq, item in run for t in item.decoded.tags]
    )
    _insert_or_ignore(
        conn,
        "INTO entry_directed (entry_id, agent_id)",
        [(seq, d) for seq, item in run for d in item.decoded.directed_to],
    )
    db.insert_rows(
        conn,
        "INSERT INTO links (origin_hash, ordinal, source_hash, target_hash, link_type, author_id, created_at,"
        " annotation, space)",
        [
            (
                item.hash,
                i,
                item.hash,
                link.target,
                link.link_type,
                item.decoded.author_id,
                item.decoded.created_at,
                link.annotation,
                schema_v3.space_of(item.decoded),
            )
            for _, item in run
            for i, link in enumerate(item.decoded.links)
        ],
    )
    if ahead.retractions:
        _derive_retractions_txn(conn, hashes)
    if notify:
        notifications.fan_out(conn, [(seq, item.decoded) for seq, item in run], now_ms, subscribed=ahead.subscribed)
        if ahead.contradictions:
            notifications.contradictions(conn, hashes, now_ms)


def _insert_or_ignore(conn: Conn, into: str, rows: list[tuple[Any, ...]]) -> None:
    """`INSERT OR IGNORE {into}` the rows on SQLite; `INSERT {into} ... ON CONFLICT DO NOTHING` on PostgreSQL (the
    rows are never NULL where NOT NULL, so skipping only conflicts is the same: record 50)."""
    if engine_of(conn) == POSTGRESQL:
        db.insert_rows(conn, "INSERT " + into, rows, " ON CONFLICT DO NOTHING")
    else:
        db.insert_rows(conn, "INSERT OR IGNORE " + into, rows)


def _entry_row(seq: int, record_hash: str, rec: EntryRecord) -> tuple[Any, ...]:
    """The entries row of an entry record, in the column order project_entries inserts."""
    return (
        seq,
        record_hash,
        canonical.content_fingerprint(rec.content),
        rec.author_id,
        rec.created_at,
        parse_ms(rec.created_at),
        rec.entry_type,
        rec.performative,
        rec.content,
        rec.confidence,
        json.dumps(rec.tags, ensure_ascii=False) if rec.tags else "[]",  # text: the search index reads non-ASCII tags
        json.dumps(rec.directed_to) if rec.directed_to else "[]",
        json.dumps(rec.metadata, sort_keys=True) if rec.metadata else "{}",
        rec.truth_state,
        rec.authority,
        rec.scope,
        rec.signature,
        schema_v3.space_of(rec),
    )


class _Ahead(NamedTuple):
    """What a run of entries will need beyond its rows, decided before they are inserted (`_ahead`)."""

    retractions: bool  # it may derive `retracted_by` links (then a run of several goes one record at a time)
    contradictions: bool  # it may complete a `contradicts` link between two stored entries
    subscribed: bool  # the node holds a subscription (fan-out looks for subscribers)


_AHEAD_SQL = "SELECT " + NAMED_SQL
_AHEAD_SQL_PG = "SELECT " + NAMED_SQL_PG


def _ahead(conn: Conn, run: list[tuple[int, Incoming]], hashes: str, named: Named | None) -> _Ahead:
    """Which of the statements after a run's rows can change anything, in one statement read before them.

    A `retracted_by` link needs a retraction in the run or a stored `supersedes` link naming one of its entries
    (RETRACTIONS_SQL); a contradiction, a `contradicts` link the run asserts or a stored one naming one of its
    entries (node/inbox/store.py CONTRADICTIONS_SQL). Rare, either: most runs skip both statements.
    """
    if named is None:
        if engine_of(conn) == POSTGRESQL:
            flags = conn.execute(_AHEAD_SQL_PG, {"h": [item.hash for _, item in run]}).fetchone()
        else:
            flags = conn.execute(_AHEAD_SQL, {"h": hashes}).fetchone()
        named = Named(*(bool(flag) for flag in flags))
    named_superseded, named_contradicted, subscribed = named
    retracting = any(item.decoded.performative == "retract" for _, item in run)
    contradicting = any(link.link_type == "contradicts" for _, item in run for link in item.decoded.links)
    return _Ahead(retracting or bool(named_superseded), contradicting or bool(named_contradicted), bool(subscribed))


def project_entry(conn: Conn, rec: EntryRecord, ctx: Projection) -> None:
    project_entries(conn, [(ctx.seq, Incoming({}, ctx.hash, rec))], ctx.now_ms, notify=ctx.notify)


RETRACTIONS_SQL = (
    "INSERT OR IGNORE INTO links (origin_hash, ordinal, source_hash, target_hash, link_type, author_id,"
    " created_at, annotation, space)"
    " SELECT l.origin_hash, -1 - l.ordinal, l.target_hash, l.source_hash, 'retracted_by', r.author_id,"
    "        r.created_at, '', l.space"
    " FROM links l"
    # The unary + keeps SQLite from driving this by the performative or link_type indexes (every retract
    # entry, every supersedes link): it starts from the few links of the arrived records instead.
    " JOIN entries r ON r.record_hash = l.source_hash AND +r.performative = 'retract'"
    " JOIN entries t ON t.record_hash = l.target_hash AND t.author_id = r.author_id"
    " WHERE +l.link_type = 'supersedes' AND l.ordinal >= 0 AND l.origin_hash = l.source_hash"
    "   AND l.id IN (SELECT x.id FROM json_each(:h) a JOIN links x ON x.source_hash = a.value"
    "                UNION SELECT x.id FROM json_each(:h) a JOIN links x ON x.target_hash = a.value)"
)


# RETRACTIONS_SQL on PostgreSQL (record 50): no planner hints, `= ANY` for json_each, ON CONFLICT for OR IGNORE;
# ORDER BY l.id inserts the derived links in the order SQLite's plan makes them (its rowid list, ascending), so each
# is numbered as there (max + 1 at its insert: migration 0052, record 81).
RETRACTIONS_SQL_PG = (
    "INSERT INTO links (origin_hash, ordinal, source_hash, target_hash, link_type, author_id,"
    " created_at, annotation, space)"
    " SELECT l.origin_hash, -1 - l.ordinal, l.target_hash, l.source_hash, 'retracted_by', r.author_id,"
    "        r.created_at, '', l.space"
    " FROM links l"
    " JOIN entries r ON r.record_hash = l.source_hash AND r.performative = 'retract'"
    " JOIN entries t ON t.record_hash = l.target_hash AND t.author_id = r.author_id"
    " WHERE l.link_type = 'supersedes' AND l.ordinal >= 0 AND l.origin_hash = l.source_hash"
    "   AND (l.source_hash = ANY(:h) OR l.target_hash = ANY(:h))"
    " ORDER BY l.id"
    " ON CONFLICT DO NOTHING"
)


def _derive_retractions_txn(conn: Conn, arrived_hashes: str) -> None:
    """Create `retracted_by` links for retract entries whose retraction is now decidable.

    A retract entry's `supersedes` link to an entry by the same author means: target retracted_by
    the retract entry. Decided when both entries are present, whichever arrived last. `arrived_hashes`
    is a JSON array of the record hashes just stored.
    """
    if engine_of(conn) == POSTGRESQL:
        conn.execute(RETRACTIONS_SQL_PG, {"h": json.loads(arrived_hashes)})
    else:
        conn.execute(RETRACTIONS_SQL, {"h": arrived_hashes})


def project_link(conn: Conn, rec: LinkRecord, ctx: Projection) -> None:
    conn.execute(
        "INSERT INTO links (origin_hash, ordinal, source_hash, target_hash, link_type, author_id, created_at,"
        " annotation, space) VALUES (?, 0, ?, ?, ?, ?, ?, ?, ?)",
        (
            ctx.hash,
            rec.source,
            rec.target,
            rec.link_type,
            rec.author_id,
            rec.created_at,
            rec.annotation,
            schema_v3.space_of(rec),
        ),
    )
    if ctx.notify:
        notifications.contradictions(conn, json.dumps([ctx.hash]), ctx.now_ms)


def project_agent(conn: Conn, rec: AgentRecord, ctx: Projection) -> None:
    """The newest identity document of an agent wins, by its author's key history, then (created_at, hash): the
    same on every node (node/store/agent_docs.py)."""
    agent_docs.project_txn(conn, rec, ctx.hash)


def project_key_event(conn: Conn, rec: Any, ctx: Projection) -> None:
    """A key event (or a vouch page) projects into no table: the writer's authority cache (node/store/authority.py)
    reads them from the log itself (docs/format-v3.md, 7.4). It may change which document of its author is shown
    (node/store/agent_docs.py) and, when it reorders the author's keys (a recovery, a fork won by a better role),
    which version of its re-signed entries (`rerank_entries_txn`)."""
    order = agent_docs.on_authority_record_txn(conn, rec, ctx.hash)
    if order is not None:
        rerank_entries_txn(conn, str(rec.author_id), order, ctx.now_ms, notify=ctx.notify)


def rerank_entries_txn(conn: Conn, author: str, order: Mapping[str, int], now_ms: int, *, notify: bool) -> None:
    """Show again, of every address of `author` holding several versions, the one `equivocation.kept_members`
    chooses under the key order `order` (after a key event reordered the author's keys)."""
    for address, versions in equivocation.held(conn, equivocation.several_of(conn, author)).items():
        void = equivocation.flagged_seqs(conn, address)  # flagged versions are never shown (node/store/void.py)
        stored = equivocation.members(conn, [h.seq for h in versions if h.seq not in void])
        if not stored:
            continue
        best = equivocation.kept_members([m for m, _ in stored.values()], order)[0]
        target = next(seq for seq, (m, _) in stored.items() if m.version == best.version)
        shown = equivocation.shown_seq(conn, address)
        if target == shown:
            continue
        if shown is not None:
            equivocation.unproject_entry_txn(conn, address, shown)
        record = stored[target][1]
        project_entries(conn, [(target, _incoming(record, address, best.scope))], now_ms, notify=notify)


# The substrate's record kinds: their projectors, and the tables holding only their derived data (the search
# index is a projection too, in its own folder: node/search_index/).
SUBSTRATE_PROJECTORS: Mapping[str, Projector] = MappingProxyType(
    {
        "entry": project_entry,
        "link": project_link,
        "agent": project_agent,
        "key_event": project_key_event,  # a key event's vouch pages: node/spaces/store.py's `project_vouch_page`
    }
)
SUBSTRATE_TABLES: tuple[str, ...] = ("entries", "entry_tags", "entry_directed", "links", "agents")


@dataclass(frozen=True)
class Log:
    """What the log projects through: each record kind's projector, and every projection table they fill
    (`rebuild` recreates exactly these, in this order). node/features.py builds the node's (`LOG`)."""

    projectors: Mapping[str, Projector]
    tables: tuple[str, ...]
    switches: Mapping[str, Switch] = field(default_factory=dict)  # kind -> its switch for records flagged void, or back
    screens: tuple[Screen, ...] = ()  # checks every record meets before it is appended

    def __post_init__(self) -> None:
        object.__setattr__(self, "projectors", MappingProxyType(dict(self.projectors)))  # read-only, not shared
        object.__setattr__(self, "switches", MappingProxyType(dict(self.switches)))
        object.__setattr__(self, "tables", tuple(self.tables))
        object.__setattr__(self, "screens", tuple(self.screens))


def log_of(conn: Conn) -> Log:
    """The log `conn` projects through: the one its `Database` (or `db.connect`, `db.write_sync`) was given."""
    log = getattr(conn, "log", None)  # db.Connection's or the PostgreSQL Conn's (a bare sqlite3 connection has none)
    if not isinstance(log, Log):
        raise RuntimeError(
            "this connection carries no log to project through: open it with the node's (node.features.LOG)"
        )
    return log


def rebuild(conn: Conn, progress: Report = silent) -> int:
    """Drop and recreate every projection table from its stored DDL (on PostgreSQL: empty it), then replay the log.
    Returns records replayed.

    Runs inside the caller's transaction; `progress` hears ("replaying the log", done, total) along the way.
    Records flagged void (`void_records`, node/store/void.py) are skipped: they stay in the log, out of every
    projection.
    """
    import msgspec

    from identity.schema_v3 import struct_for

    log = log_of(conn)
    if engine_of(conn) == POSTGRESQL:
        # PostgreSQL keeps no DDL text to recreate them from (record 50): the tables stay, emptied, with their
        # identities restarted, as a recreated SQLite table starts its rowids again
        conn.execute("TRUNCATE " + ", ".join(f'"{table}"' for table in log.tables) + " RESTART IDENTITY")
    else:
        ddl = _projection_ddl(conn, log.tables)
        for table in reversed(log.tables):
            conn.execute(f'DROP TABLE IF EXISTS "{table}"')
        for statement in ddl:
            conn.execute(statement)
    count = 0
    two = equivocation.several(conn)
    seen: dict[str, dict[int, tuple[equivocation.Member, Any]]] = {}  # address of several -> seq -> (member, decoded)
    shown: dict[str, int] = {}  # address of several versions -> the seq projected
    orders: dict[str, dict[str, int]] = {}
    rows = conn.execute(
        "SELECT seq, hash, version, scope, body FROM records"
        " WHERE seq NOT IN (SELECT seq FROM void_records) ORDER BY seq"
    ).fetchall()
    progress(REBUILD_STEP, 0, len(rows))
    for seq, record_hash, version, scope, body in rows:
        record = json.loads(body)
        struct = struct_for(record)  # a record of format v3 (a key event, a signing_key) decodes as it was stored
        assert struct is not None, f"the log holds a record of unknown kind {record['kind']!r}"
        decoded = msgspec.convert(record, struct)
        count += 1
        if count % REPORT_EVERY == 0:
            progress(REBUILD_STEP, count, len(rows))
        if record_hash in two:  # replayed as it arrived: the projection switches when a better version comes
            versions = seen.setdefault(record_hash, {})
            versions[seq] = (equivocation.member_of(version, scope, record), decoded)
            author = record["author_id"]
            if author not in orders:
                orders[author] = equivocation.key_order_txn(conn, author)
            best = equivocation.kept_members([m for m, _ in versions.values()], orders[author])[0]
            target = next(s for s, (m, _) in versions.items() if m.version == best.version)
            if shown.get(record_hash) == target:
                continue
            if record_hash in shown:
                equivocation.unproject_entry_txn(conn, record_hash, shown[record_hash])
            shown[record_hash] = target
            seq, decoded = target, versions[target][1]
        log.projectors[record["kind"]](conn, decoded, Projection(seq, record_hash, 0, notify=False))
    progress(REBUILD_STEP, count, len(rows))
    return count


def _projection_ddl(conn: Conn, projected: tuple[str, ...]) -> list[str]:
    """CREATE statements of the projection tables with their indexes and triggers, as the migrations left them."""
    tables = set(projected)
    rows = conn.execute(
        "SELECT type, name, tbl_name, sql FROM sqlite_master WHERE sql IS NOT NULL ORDER BY rowid"
    ).fetchall()
    creates = [r["sql"] for r in rows if r["type"] == "table" and r["name"] in tables]
    extras = [
        r["sql"]
        for r in rows
        if r["type"] in ("index", "trigger") and r["tbl_name"] in tables and not r["name"].startswith("sqlite_")
    ]
    return creates + extras


def snapshot(conn: Conn) -> dict[str, list[tuple[Any, ...]]]:
    """Every projection table's rows in a stable order (for comparing against a rebuild)."""
    out: dict[str, list[tuple[Any, ...]]] = {}
    for table in log_of(conn).tables:
        out[table] = [tuple(r) for r in conn.execute(f'SELECT * FROM "{table}" ORDER BY 1, 2').fetchall()]
    return out
