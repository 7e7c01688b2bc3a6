"""Records stored before they became void: flagged, hidden from every projection, and shown again when a later key
event vouches for them (docs/format-v3.md 7.6; docs/decisions.md record 57).

A record is judged when it is stored (`node.store.authority.Authority.decide`); a key event or vouch page stored
later may change that verdict for records of its author already in the log: a `revoke`, a winning `recover` or a
rotation that does not vouch for them makes them void, a `recover` that vouches for them makes them valid again.
`reflag_txn` runs in the transaction that stored the key events (sync ingest, the REST key-event route): a scan of
the authors' records in the log, each decided again by the one function, and the records whose verdict changed are
flagged in `void_records` (or unflagged) and switched out of (or back into) the projections by their kind's
`Switch` (`projections.Log.switches`), as an equivocation's losing version is kept out of them. The log is never
changed. A batch without key events or vouch pages costs nothing here (the writer-floor rule, issue 34). Only the
records of keys whose status changed since the author's last reflag are read (`Authority.changed_keys`: current or
not, the vouch that decides them, losing or not, how much of that vouch is held), from the seq of the event that
installed the earliest of them: a key's records are stored after that event (they wait for it, and a re-check stores
the key events it releases before the records). A record of the author's current key is valid and not decided
again; a rotated-out key whose records stay undecided (pages not held) is decided by its held set when that is
exactly the vouched set (docs/format-v3.md 6.5, `matches`).

Sync never serves a flagged record (changes feed, fetch, reconciliation) and the digest leaves it out
(node/federation/store.py); `bbs rebuild` replays the log without them (`projections.rebuild`).

A space flags posts too, by the vouched-set rule (node/spaces/vouched_set.py, through `flag_txn`): their reason starts
`SPACE_REASON`, and only the space's judgement unflags them (`reflag_txn` leaves them flagged when their key would
count them).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from types import MappingProxyType
from typing import Any, NamedTuple

import msgspec

from identity.schema_v3 import struct_for
from node.store import equivocation, projections
from node.store.authority import AUTHORITY_KINDS, SIGNING_KEY_PG, Authority
from node.store.conn import POSTGRESQL, Conn, any_of, engine_of

SPACE_REASON = "space_"  # the prefix of the reason of a post its space voids (`space_unvouched`, docs/spaces.md)


class Stored(NamedTuple):
    """A stored record of an author whose key history changed, and the key that signed it."""

    seq: int
    hash: str
    version: str
    kind: str
    author_id: str
    signer: str


class VoidRow(NamedTuple):
    """A flagged record, as the operator sees it."""

    seq: int
    hash: str
    version: str
    kind: str
    author_id: str
    reason: str
    flagged_ms: int


def authors_of_authority(records: Iterable[dict[str, Any]]) -> set[str]:
    """The authors of the key events and vouch pages among `records`: whose stored records may change verdict."""
    return {str(r["author_id"]) for r in records if r.get("kind") in AUTHORITY_KINDS}


def _records_of(conn: Conn, author: str, after: int) -> list[tuple[int, str, str, str, str, str | None]]:
    """(seq, hash, version, kind, author, signing_key) of every record of `author` in the log after seq `after` but
    its key events, vouch pages and agent documents, in log order (one scan of the seq range: SQLite reads the
    bodies, Python decodes none). Agent documents are not judged by their key yet (docs/format-v3.md 7.7: 3.8's order
    is to do), so none is flagged: an identity whose rotation vouches for no document keeps its row."""
    signing_key = SIGNING_KEY_PG if engine_of(conn) == POSTGRESQL else "json_extract(body, '$.signing_key')"
    return conn.execute(
        f"SELECT seq, hash, version, kind, author_id, {signing_key} FROM records"
        " WHERE seq > ? AND author_id = ? AND kind NOT IN ('key_event', 'vouch_page', 'agent') ORDER BY seq",
        (after, author),
    ).fetchall()


def _bodies(conn: Conn, seqs: list[int]) -> dict[int, dict[str, Any]]:
    """The stored records at `seqs`, decoded."""
    test, listed = any_of(conn, seqs)
    rows = conn.execute(f"SELECT seq, body FROM records WHERE seq {test}", (listed,)).fetchall()
    return {int(r[0]): json.loads(bytes(r[1])) for r in rows}


def flagged_of(conn: Conn, authors: list[str]) -> set[int]:
    """The flagged seqs of `authors`."""
    test, listed = any_of(conn, sorted(authors))
    rows = conn.execute(f"SELECT seq FROM void_records WHERE author_id {test}", (listed,)).fetchall()
    return {int(r[0]) for r in rows}


def flags_of(conn: Conn, seqs: list[int]) -> dict[int, str]:
    """Those of `seqs` flagged void, with their reasons."""
    test, listed = any_of(conn, seqs)
    rows = conn.execute(f"SELECT seq, reason FROM void_records WHERE seq {test}", (listed,)).fetchall()
    return {int(r[0]): str(r[1]) for r in rows}


def flagged_versions(conn: Conn, versions: Iterable[str]) -> set[str]:
    """Those of `versions` held in the log and flagged void (reconciliation does not fetch them again)."""
    test, listed = any_of(conn, versions)
    rows = conn.execute(f"SELECT version FROM void_records WHERE version {test}", (listed,)).fetchall()
    return {str(r[0]) for r in rows}


def reflag_txn(conn: Conn, authority: Authority, authors: Iterable[str], now_ms: int) -> tuple[int, int]:
    """Decide again every stored record of `authors` by the authority cache as it stands (after this transaction's
    key events): flag and hide the ones now void, unflag and show again the flagged ones now valid; undecided ones
    (a rotation whose pages are not held yet) keep their state. Returns (flagged, unflagged)."""
    wanted = sorted(set(authors))
    if not wanted:
        return 0, 0
    flagged = flagged_of(conn, wanted)
    voided: list[tuple[Stored, str]] = []
    restored: list[Stored] = []
    current = {author: authority.history(author).state.key for author in wanted}
    rows = [row for author in wanted for row in _records_of(conn, author, _scan_from(conn, authority, author))]
    undecided: dict[tuple[str, str], list[Stored]] = {}
    for seq, address, version, kind, author, signing_key in rows:  # no object per row unless its state changes
        signer = author if signing_key is None else signing_key
        if signer == current[author] and seq not in flagged:
            continue  # a record of the current key is valid (`Authority.decide`): none to flag, none to unflag
        decision = authority.decide_key(author, signer, version)
        if decision.verdict == "valid" and seq not in flagged:
            continue
        stored = Stored(seq, address, version, kind, author, signer)
        if decision.verdict == "undecided":
            undecided.setdefault((author, signer), []).append(stored)
        _sort(stored, decision.verdict, decision.reason, flagged, voided, restored)
    for (author, signer), waiting in undecided.items():  # its pages are not all held: does the log hold its set?
        held = {r[2] for r in rows if r[4] == author and (r[4] if r[5] is None else r[5]) == signer}
        if authority.learn_vouched(author, signer, held):
            for stored in waiting:
                decision = authority.decide_key(author, signer, stored.version)
                _sort(stored, decision.verdict, decision.reason, flagged, voided, restored)
    for author in wanted:
        authority.settle(author)
    if restored:  # a record its space voided stays flagged until its space shows it again (`SPACE_REASON`)
        reasons = flags_of(conn, [s.seq for s in restored])
        restored = [s for s in restored if not reasons.get(s.seq, "").startswith(SPACE_REASON)]
    return flag_txn(conn, voided, restored, now_ms)


def flag_txn(conn: Conn, voided: list[tuple[Stored, str]], restored: list[Stored], now_ms: int) -> tuple[int, int]:
    """Flag `voided` (with their reasons) and unflag `restored`, switching each out of or back into the projections
    by its kind's `Switch`, in log order. Returns (flagged, unflagged)."""
    if not voided and not restored:
        return 0, 0
    conn.executemany(
        "INSERT INTO void_records (seq, version, hash, kind, author_id, reason, flagged_ms)"
        " VALUES (?, ?, ?, ?, ?, ?, ?)",
        [(s.seq, s.version, s.hash, s.kind, s.author_id, reason, now_ms) for s, reason in voided],
    )
    conn.executemany("DELETE FROM void_records WHERE seq = ?", [(s.seq,) for s in restored])
    switches = projections.log_of(conn).switches
    changed = sorted([(s, False) for s, _ in voided] + [(s, True) for s in restored], key=lambda sv: sv[0].seq)
    bodies = _bodies(conn, [s.seq for s, _ in changed])
    for stored, valid in changed:
        switch = switches.get(stored.kind)
        if switch is not None:
            switch(conn, stored.seq, stored.hash, bodies[stored.seq], valid, now_ms)
    return len(voided), len(restored)


def _scan_from(conn: Conn, authority: Authority, author: str) -> int:
    """The seq after which `reflag_txn` must read `author`'s records: only a record of a key whose status changed
    since the last reflag (`Authority.changed_keys`) can change verdict, and a record of a key is stored after the
    event that installed it (before it, it waits: docs/format-v3.md 7.1), so the scan starts at the earliest such
    event. Every record (0) for an author not reflagged since the cache was loaded, or when a changed key is its
    first key or one whose event this node dropped; past the log's end when no key changed."""
    _, changed = authority.changed_keys(author)
    if changed is None:
        return 0
    if not changed:
        return 1 << 62
    seqs = []
    for key in changed:
        address = authority.install_address(author, key)
        if address is None:
            return 0
        row = conn.execute("SELECT seq FROM records WHERE hash = ?", (address,)).fetchone()
        if row is None:
            return 0
        seqs.append(int(row[0]))
    return min(seqs)


def _sort(
    stored: Stored,
    verdict: str,
    reason: str | None,
    flagged: set[int],
    voided: list[tuple[Stored, str]],
    restored: list[Stored],
) -> None:
    """Put `stored` with the records to flag (void, not flagged yet) or to unflag (valid, flagged); an undecided one
    keeps its state."""
    if verdict == "void" and stored.seq not in flagged:
        voided.append((stored, reason or "void"))
    elif verdict == "valid" and stored.seq in flagged:
        restored.append(stored)


def listing(conn: Conn, after: int, limit: int) -> list[VoidRow]:
    """Flagged records with seq above `after`, in seq order, at most `limit` (the operator's page)."""
    rows = conn.execute(
        "SELECT seq, hash, version, kind, author_id, reason, flagged_ms FROM void_records WHERE seq > ?"
        " ORDER BY seq LIMIT ?",
        (after, limit),
    ).fetchall()
    return [VoidRow(int(r[0]), r[1], r[2], r[3], r[4], r[5], int(r[6])) for r in rows]


def count(conn: Conn) -> int:
    """How many records are flagged void (`bbs doctor`)."""
    return int(conn.execute("SELECT count(*) FROM void_records").fetchone()[0])


# ---- the substrate's switches: entries and links ------------------------------------------------


def decoded(record: dict[str, Any]) -> Any:
    """A stored record decoded as the log decodes it (`projections.rebuild`)."""
    struct = struct_for(record)
    assert struct is not None, f"the log holds a record of unknown kind {record['kind']!r}"
    return msgspec.convert(record, struct)


def switch_entry(conn: Conn, seq: int, address: str, record: dict[str, Any], valid: bool, now_ms: int) -> None:
    """Show the version of `address` the equivocation rule chooses among the versions not flagged (none when all
    are: `equivocation.shown_member`); an address is `equivocated` only by two statements not flagged."""
    live = equivocation.live_members(conn, address)
    shown = equivocation.shown_seq(conn, address)
    want = equivocation.shown_member(conn, address) if live else None
    if shown != (want[0] if want else None):
        if shown is not None:
            equivocation.unproject_entry_txn(conn, address, shown)
        if want is not None:
            item = projections.Incoming({}, address, decoded(want[1]))
            projections.project_entries(conn, [(want[0], item)], now_ms, notify=False)
        # the search index covers this id already: its indexer redoes the address's document (node/search_index/)
        conn.execute("INSERT INTO search_redo (address) VALUES (?)", (address,))
    if equivocation.statement_count(m for m, _ in live.values()) > 1:
        equivocation.mark_txn(conn, address, str(record["author_id"]), now_ms)
    else:
        conn.execute("DELETE FROM equivocations WHERE hash = ?", (address,))


def switch_link(conn: Conn, seq: int, address: str, record: dict[str, Any], valid: bool, now_ms: int) -> None:
    """A link record's row goes (void) or comes back (valid)."""
    conn.execute("DELETE FROM links WHERE origin_hash = ?", (address,))
    if valid:
        projections.project_link(conn, decoded(record), projections.Projection(seq, address, now_ms, notify=False))


SUBSTRATE_SWITCHES: Mapping[str, projections.Switch] = MappingProxyType({"entry": switch_entry, "link": switch_link})
