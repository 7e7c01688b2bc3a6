"""One body per address: which versions of an address a node keeps, and which one its projections show.

An entry's address (`record_hash`) covers author, created_at, type, performative and content; its signature
covers everything. So an author can sign two bodies under one address: two *versions*, each identified by the
SHA-256 of its signed canonical bytes. The rule is a function of the set of versions only, never of arrival
order, so every node that holds the same versions shows the same one (docs/sync.md, "Versions"):

- precedence key: (scope != 'federation', version): a `federation` version beats a `local` one, then the
  smallest version hex wins;
- a node keeps the two versions with the smallest keys; the winner is the smallest; holding two means the
  address is `equivocated`. A third that does not beat both is refused; one that does evicts the worst.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any, NamedTuple

from node.store.conn import Conn

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


def held(conn: Conn, addresses: Iterable[str]) -> dict[str, list[Held]]:
    """The stored versions of each of `addresses` that has any, best first."""
    rows = conn.execute(
        "SELECT hash, seq, version, scope FROM records WHERE hash IN (SELECT value FROM json_each(?))",
        (json.dumps(sorted(set(addresses))),),
    ).fetchall()
    return held_from(rows)


# `held` of the addresses `:h` (a JSON array) as one JSON array of [hash, seq, version, scope] (`held_from` of
# its decoded rows), for a statement that reads them beside other things (node/entries/store.py `look_ahead_txn`).
# Exact: hashes and versions are hex, scopes ASCII words, seqs integers.
HELD_JSON = (
    "(SELECT json_group_array(json_array(hash, seq, version, scope)) FROM records"
    " WHERE hash IN (SELECT value FROM json_each(:h)))"
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


def refused(conn: Conn, versions: Iterable[str]) -> set[str]:
    """Those of `versions` this node refused or evicted."""
    rows = conn.execute(
        "SELECT version FROM refused_versions WHERE version IN (SELECT value FROM json_each(?))",
        (json.dumps(list(versions)),),
    ).fetchall()
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


def unproject_entry_txn(conn: Conn, address: str, seq: int) -> None:
    """Delete what an entry version projected: its entries row, tags, addressees, the links it asserts and the
    `retracted_by` links derived from it (all keyed by its address or its seq). The search index replaces its
    document by address when it indexes the winner (node/search_index/index.py)."""
    row = conn.execute("SELECT tags, directed_to FROM entries WHERE id = ?", (seq,)).fetchone()
    if row is None:
        return
    tags, directed_to = row
    conn.execute("DELETE FROM entries WHERE id = ?", (seq,))
    conn.execute("DELETE FROM entry_tags WHERE entry_id = ? AND tag IN (SELECT value FROM json_each(?))", (seq, tags))
    conn.execute(
        "DELETE FROM entry_directed WHERE entry_id = ? AND agent_id IN (SELECT value FROM json_each(?))",
        (seq, directed_to),
    )
    conn.execute("DELETE FROM links WHERE origin_hash = ?", (address,))
