"""One body per address: which versions of an address a node keeps, and which one its projections show.

An entry's address (`record_hash`) covers author, created_at, type, performative and content; its signature
covers everything. So an author can sign two bodies under one address: two *versions*, each identified by the
SHA-256 of its signed canonical bytes. The rule is a function of the set of versions only, never of arrival
order, so every node that holds the same versions shows the same one (docs/sync.md, "Versions"):

- precedence key: (scope != 'federation', version): a `federation` version beats a `local` one, then the
  smallest version hex wins;
- a node keeps the two versions with the smallest keys; the winner is the smallest; holding two means the
  address is `equivocated`. A third that does not beat both is refused; one that does evicts the worst.

Re-signed versions (docs/format-v3.md 3.6): versions equal but for `signing_key` and `signature` are one
*statement* (`statement_of`). The rule above ranks statements, each by its best version's key; every version of a
kept statement is kept, and the one shown of a statement is the one whose key is latest in the author's winning
chain (`kept_members`). So a re-signed entry is never a second version against the cap, never `overflow`, never
the author's equivocation.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, NamedTuple

from identity import key_history, records
from node.store.authority import key_events_of
from node.store.conn import POSTGRESQL, Conn, any_of, engine_of

MAX_VERSIONS = 2


class Held(NamedTuple):
    """A stored version of an address."""

    seq: int
    version: str
    scope: str


def precedence(version: str, scope: str) -> tuple[bool, str]:
    """Smaller is better: federation before local, then the smaller version hex."""
    return (scope != "federation", version)


def ranked(versions: Iterable[tuple[str, str]]) -> list[tuple[str, str]]:
    """(version, scope) pairs, best first, each version once."""
    return sorted(set(versions), key=lambda vs: precedence(*vs))


def kept(versions: Iterable[tuple[str, str]]) -> list[tuple[str, str]]:
    """The versions a node keeps of the given set (at most MAX_VERSIONS), winner first."""
    return ranked(versions)[:MAX_VERSIONS]


class Member(NamedTuple):
    """A version of an address as the re-signing rule sees it: its version and scope, its statement (`statement_of`)
    and the key that signed it."""

    version: str
    scope: str
    statement: str
    signer: str


def statement_of(record: Mapping[str, Any]) -> str:
    """What a version says, whoever of its author's keys signed it (`identity.records.statement_of`)."""
    return records.statement_of(dict(record))


def member_of(version: str, scope: str, record: Mapping[str, Any]) -> Member:
    """The `Member` of a version from its record."""
    return Member(version, scope, statement_of(record), key_history.signer_of(dict(record)))


def kept_members(
    members: Iterable[Member], order: Mapping[str, int], verdicts: Mapping[str, str] | None = None
) -> list[Member]:
    """The versions a node keeps of an address, the one its projections show first (a function of the set, in any
    order, given the author's key order `identity.key_history.key_order` and the key verdicts by version; a version
    absent from `verdicts` is valid).

    Statements are ranked by `precedence` of their best version; the best MAX_VERSIONS statements are kept with every
    version of them. The shown version is of the best statement: valid before not valid, then the key latest in
    the winning chain (a key outside it before every key of it), then the smaller version hex.
    """
    verdicts = verdicts or {}
    by_statement: dict[str, dict[str, Member]] = {}
    for m in members:
        by_statement.setdefault(m.statement, {})[m.version] = m
    statements = sorted(by_statement.values(), key=lambda ms: min(precedence(m.version, m.scope) for m in ms.values()))
    out: list[Member] = []
    for group in statements[:MAX_VERSIONS]:
        out.extend(
            sorted(
                group.values(),
                key=lambda m: (verdicts.get(m.version, "valid") != "valid", -order.get(m.signer, -1), m.version),
            )
        )
    return out


def statement_count(members: Iterable[Member]) -> int:
    """How many statements the given versions make: two or more is the author's equivocation."""
    return len({m.statement for m in members})


def key_order_txn(conn: Conn, author: str) -> dict[str, int]:
    """`identity.key_history.key_order` of `author` over the key events in the log (read only when two versions of
    one statement meet: a re-signed entry); only its first key when the author has none."""
    return key_history.key_order(key_history.resolve(author, key_events_of(conn, author)))


def members(conn: Conn, seqs: Iterable[int]) -> dict[int, tuple[Member, dict[str, Any]]]:
    """The `Member` and record of each stored version by seq."""
    test, listed = any_of(conn, sorted(set(seqs)))
    rows = conn.execute(f"SELECT seq, version, scope, body FROM records WHERE seq {test}", (listed,)).fetchall()
    out: dict[int, tuple[Member, dict[str, Any]]] = {}
    for seq, version, scope, body in rows:
        record = json.loads(bytes(body))
        out[int(seq)] = (member_of(version, scope, record), record)
    return out


def statements_held(conn: Conn, held: Mapping[str, list[Held]]) -> dict[str, set[str]]:
    """The statements of the versions held of each address (`held`), for a post whose address holds another
    version: one of the same statement is the entry re-signed, not an equivocation."""
    found = members(conn, [h.seq for versions in held.values() for h in versions])
    out: dict[str, set[str]] = {address: set() for address in held}
    for address, versions in held.items():
        for h in versions:
            if h.seq in found:
                out[address].add(found[h.seq][0].statement)
    return out


def several(conn: Conn) -> set[str]:
    """The addresses the log holds more than one version of (equivocated, or re-signed): `rebuild` replays their
    switches."""
    rows = conn.execute("SELECT hash FROM records WHERE kind = 'entry' GROUP BY hash HAVING count(*) > 1").fetchall()
    return {str(r[0]) for r in rows}


def several_of(conn: Conn, author: str) -> list[str]:
    """The addresses of `author` the log holds more than one version of (a scan: run after a key event reorders
    the author's keys, which is rare)."""
    rows = conn.execute(
        "SELECT hash FROM records WHERE kind = 'entry' AND author_id = ? GROUP BY hash HAVING count(*) > 1", (author,)
    ).fetchall()
    return [str(r[0]) for r in rows]


def shown_seq(conn: Conn, address: str) -> int | None:
    """The seq of the version of `address` its projection shows (its entries row's id), if projected."""
    row = conn.execute("SELECT id FROM entries WHERE record_hash = ?", (address,)).fetchone()
    return None if row is None else int(row[0])


def held(conn: Conn, addresses: Iterable[str]) -> dict[str, list[Held]]:
    """The stored versions of each of `addresses` that has any, best first."""
    test, listed = any_of(conn, sorted(set(addresses)))
    rows = conn.execute(f"SELECT hash, seq, version, scope FROM records WHERE hash {test}", (listed,)).fetchall()
    return held_from(rows)


# `held` of the addresses `:h` (a JSON array) as one JSON array of [hash, seq, version, scope] (`held_from` of
# its decoded rows), for a statement that reads them beside other things (node/entries/store.py `look_ahead_txn`).
# Exact: hashes and versions are hex, scopes ASCII words, seqs integers.
HELD_JSON = (
    "(SELECT json_group_array(json_array(hash, seq, version, scope)) FROM records"
    " WHERE hash IN (SELECT value FROM json_each(:h)))"
)
# HELD_JSON on PostgreSQL, where :h is an array of the addresses: the same JSON text (json_agg is NULL over no rows).
HELD_JSON_PG = (
    "(SELECT coalesce(json_agg(json_build_array(hash, seq, version, scope)), '[]')::text FROM records"
    " WHERE hash = ANY(:h))"
)


def held_from(rows: Iterable[Sequence[Any]]) -> dict[str, list[Held]]:
    """`held` from its rows (hash, seq, version, scope)."""
    out: dict[str, list[Held]] = {}
    for address, seq, version, scope in rows:
        out.setdefault(address, []).append(Held(int(seq), version, scope))
    for versions in out.values():
        versions.sort(key=lambda h: precedence(h.version, h.scope))
    return out


def refuse_txn(conn: Conn, version: str, address: str, now_ms: int) -> None:
    """Remember a version this node will not keep, so it is never fetched again."""
    conn.execute(
        "INSERT INTO refused_versions (version, hash, refused_ms) VALUES (?, ?, ?) ON CONFLICT (version) DO NOTHING",
        (version, address, now_ms),
    )


def forget_refused_txn(conn: Conn, address: str) -> None:
    """Forget the versions of `address` this node refused or evicted (`kept_members`: a statement's rank is its best
    version's, so one that gains a better version may now beat what was kept when they were refused)."""
    conn.execute("DELETE FROM refused_versions WHERE hash = ?", (address,))


def refused(conn: Conn, versions: Iterable[str]) -> set[str]:
    """Those of `versions` this node refused or evicted."""
    test, listed = any_of(conn, versions)
    rows = conn.execute(f"SELECT version FROM refused_versions WHERE version {test}", (listed,)).fetchall()
    return {r[0] for r in rows}


def mark_txn(conn: Conn, address: str, author_id: str, now_ms: int) -> None:
    """Flag an address that now holds two versions."""
    conn.execute(
        "INSERT INTO equivocations (hash, author_id, detected_ms) VALUES (?, ?, ?) ON CONFLICT (hash) DO NOTHING",
        (address, author_id, now_ms),
    )


def by_author(conn: Conn) -> dict[str, int]:
    """Equivocated addresses per author, as this node holds them."""
    rows = conn.execute("SELECT author_id, count(*) FROM equivocations GROUP BY author_id").fetchall()
    return {r[0]: int(r[1]) for r in rows}


def flagged_seqs(conn: Conn, address: str) -> set[int]:
    """The seqs of the versions of `address` flagged void (node/store/void.py): held, but never shown."""
    return {int(r[0]) for r in conn.execute("SELECT seq FROM void_records WHERE hash = ?", (address,)).fetchall()}


def shown_member(conn: Conn, address: str) -> tuple[int, dict[str, Any]] | None:
    """The (seq, record) of the version of `address` its projection must show: `kept_members` over the versions held
    that are not flagged void, under the author's key order; None when every version held is flagged. Also whether
    those versions make two statements (the author's equivocation) is `statement_count` of them."""
    found = live_members(conn, address)
    if not found:
        return None
    author = str(next(iter(found.values()))[1]["author_id"])
    best = kept_members([m for m, _ in found.values()], key_order_txn(conn, author))[0]
    return next((seq, record) for seq, (m, record) in found.items() if m.version == best.version)


def live_members(conn: Conn, address: str) -> dict[int, tuple[Member, dict[str, Any]]]:
    """The `Member` and record of each version of `address` held and not flagged void, by seq."""
    void = flagged_seqs(conn, address)
    return members(conn, [h.seq for h in held(conn, [address]).get(address, []) if h.seq not in void])


def unproject_entry_txn(conn: Conn, address: str, seq: int) -> None:
    """Delete what an entry version projected: its entries row, tags, addressees, the links it asserts and the
    `retracted_by` links derived from it (all keyed by its address or its seq). The search index replaces its
    document by address when it indexes the winner (node/search_index/index.py)."""
    row = conn.execute("SELECT tags, directed_to FROM entries WHERE id = ?", (seq,)).fetchone()
    if row is None:
        return
    tags, directed_to = row
    conn.execute("DELETE FROM entries WHERE id = ?", (seq,))
    if engine_of(conn) == POSTGRESQL:  # the columns hold JSON text: the array parameter is their parse
        conn.execute("DELETE FROM entry_tags WHERE entry_id = ? AND tag = ANY(?)", (seq, json.loads(tags)))
        conn.execute(
            "DELETE FROM entry_directed WHERE entry_id = ? AND agent_id = ANY(?)", (seq, json.loads(directed_to))
        )
    else:
        conn.execute(
            "DELETE FROM entry_tags WHERE entry_id = ? AND tag IN (SELECT value FROM json_each(?))", (seq, tags)
        )
        conn.execute(
            "DELETE FROM entry_directed WHERE entry_id = ? AND agent_id IN (SELECT value FROM json_each(?))",
            (seq, directed_to),
        )
    conn.execute("DELETE FROM links WHERE origin_hash = ?", (address,))
