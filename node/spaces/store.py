"""The SQL of spaces (issues 37 and 38; docs/spaces.md): the projection of `space`, `space_member`, `space_admin` and
`space_host` records, and the reads every space rule needs.

A space's records (and the vouch pages of its removals) are listed in `space_records` as they are projected
(node/spaces/vouched_set.py); each projected record recomputes the one space
it touches with `identity.spaces.resolve` over that space's records and their key verdicts (from the key events the
log holds), and writes the outcome to `spaces` (the valid space: owner, name, description), `space_roles` (every
agent with a role) and `space_hosts` (every hosting node, `identity.space_rules.hosting`: the ones its admins name,
and this node when the space was created here). A function of the set of records held, never of their order: `bbs
rebuild` gives the same rows.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any, NamedTuple

from identity import key_history, spaces
from identity.space_rules import READ_ROLES, hosting
from node.redaction import store as redaction_store
from node.spaces.sight import OPERATOR, Sight, Viewer
from node.store.authority import key_events_of, vouch_pages_of
from node.store.conn import POSTGRESQL, Conn, any_of, engine_of

SPACE_TABLES: tuple[str, ...] = ("space_records", "spaces", "space_roles", "space_hosts")
SPACE_KINDS: tuple[str, ...] = ("space", "space_member", "space_admin", "space_host")


class SpaceRow(NamedTuple):
    """A valid space as the projection holds it."""

    space_id: str
    owner: str
    name: str
    description: str
    created_at: str


def space_of(kind: str, record_hash: str, record: dict[str, Any]) -> str:
    """The space a record belongs to: a creation's own hash, else its `space` member."""
    return record_hash if kind == "space" else str(record["space"])


def list_record_txn(conn: Conn, seq: int, space_id: str, kind: str, author: str) -> None:
    """List the record at `seq` among the records of `space_id` (`space_records`)."""
    if engine_of(conn) == POSTGRESQL:  # no INSERT OR IGNORE there (docs/decisions.md record 50)
        conn.execute(
            "INSERT INTO space_records (seq, space_id, kind, author_id) VALUES (?, ?, ?, ?) ON CONFLICT DO NOTHING",
            (seq, space_id, kind, author),
        )
        return
    conn.execute(
        "INSERT OR IGNORE INTO space_records (seq, space_id, kind, author_id) VALUES (?, ?, ?, ?)",
        (seq, space_id, kind, author),
    )


def held_records(conn: Conn, space_id: str) -> list[spaces.Held]:
    """Every record of `space_id` the log holds (not flagged void), as `identity.spaces.Held`, in log order."""
    rows = conn.execute(
        "SELECT r.hash, r.version, r.body FROM space_records s JOIN records r ON r.seq = s.seq"
        " WHERE s.space_id = ? AND s.seq NOT IN (SELECT seq FROM void_records) ORDER BY s.seq",
        (space_id,),
    ).fetchall()
    return [spaces.Held(str(r[0]), str(r[1]), json.loads(bytes(r[2]))) for r in rows]


def held_addresses(conn: Conn, space_id: str) -> list[tuple[str, str]]:
    """(address, author) of every record of `space_id` `held_records` gives, in the same order: what its resolution
    is a function of, without a body (node/spaces/judged.py)."""
    rows = conn.execute(
        "SELECT r.hash, s.author_id FROM space_records s JOIN records r ON r.seq = s.seq"
        " WHERE s.space_id = ? AND s.seq NOT IN (SELECT seq FROM void_records) ORDER BY s.seq",
        (space_id,),
    ).fetchall()
    return [(str(r[0]), str(r[1])) for r in rows]


def key_addresses(conn: Conn, authors: Iterable[str]) -> list[str]:
    """The addresses of the key events and vouch pages of `authors` in the log, sorted: what `key_verdicts_txn` of
    those authors is a function of (node/spaces/judged.py)."""
    test, listed = any_of(conn, sorted(set(authors)))
    rows = conn.execute(
        f"SELECT hash FROM records WHERE kind IN ('key_event', 'vouch_page') AND author_id {test} ORDER BY hash",
        (listed,),
    ).fetchall()
    return [str(r[0]) for r in rows]


def key_verdicts_txn(conn: Conn, authors: Iterable[str]) -> spaces.KeyVerdicts:
    """The key verdicts of the records of `authors`, from the key events and vouch pages the log holds."""
    histories: dict[str, key_history.History] = {}
    pages: dict[tuple[str, str], dict[int, list[str]]] = {}
    for author in sorted(set(authors)):
        events = key_events_of(conn, author)
        if not events:
            continue
        histories[author] = key_history.resolve(author, events)
        for _, page in vouch_pages_of(conn, author):
            if "space" not in page:
                pages.setdefault((page["event"], page["subject"]), {})[page["page"]] = page["versions"]
    return spaces.key_verdicts(histories, pages)


def resolve_txn(conn: Conn, space_id: str, extra: Iterable[spaces.Held] = ()) -> spaces.Spaces:
    """`identity.spaces.resolve` over the records of `space_id` the log holds, and `extra` (a record on its way in)."""
    held = [*held_records(conn, space_id), *extra]
    return spaces.resolve(held, key_verdicts_txn(conn, (h.record["author_id"] for h in held)))


def recompute_txn(conn: Conn, space_id: str) -> tuple[spaces.Space | None, list[spaces.Held]]:
    """Write the space's row, its roles and its hosts as `resolve` decides them over the records held; an agent that
    may no longer read the space loses its pending notifications of the space's entries (`forget_notifications_txn`).
    Returns the space as resolved (None: not valid) and the records held, for `node.spaces.vouched_set`."""
    held = held_records(conn, space_id)
    resolved = spaces.resolve(held, key_verdicts_txn(conn, (h.record["author_id"] for h in held))).spaces.get(space_id)
    readers_before = _readers(conn, space_id)
    conn.execute("DELETE FROM space_roles WHERE space_id = ?", (space_id,))
    conn.execute("DELETE FROM space_hosts WHERE space_id = ?", (space_id,))
    if resolved is None:
        conn.execute("DELETE FROM spaces WHERE space_id = ?", (space_id,))
        forget_notifications_txn(conn, space_id, readers_before)
        return None, held
    row = conn.execute(
        "SELECT r.body, r.origin FROM space_records s JOIN records r ON r.seq = s.seq"
        " WHERE s.space_id = ? AND s.kind = 'space'",
        (space_id,),
    ).fetchone()
    creation = json.loads(bytes(row[0]))
    created_here = this_node(conn) if row[1] == "local" else None
    hosts = hosting(resolved.hosts, created_here, resolved.host_chains)
    conn.executemany(
        "INSERT INTO space_hosts (space_id, node_id) VALUES (?, ?)", [(space_id, node) for node in sorted(hosts)]
    )
    conn.execute(
        "INSERT INTO spaces (space_id, owner, name, description, created_at) VALUES (?, ?, ?, ?, ?)"
        " ON CONFLICT (space_id) DO NOTHING",
        (space_id, resolved.owner, creation["name"], creation["description"], creation["created_at"]),
    )
    conn.executemany(
        "INSERT INTO space_roles (space_id, agent_id, role) VALUES (?, ?, ?)",
        [(space_id, agent, role) for agent, role in sorted(resolved.roles.items())],
    )
    forget_notifications_txn(conn, space_id, readers_before - _readers(conn, space_id))
    return resolved, held


def flagged_authors(conn: Conn, space_id: str, reason_prefix: str) -> set[str]:
    """The authors of the records of `space_id` flagged void with a reason starting `reason_prefix`."""
    rows = conn.execute(
        "SELECT DISTINCT v.author_id FROM void_records v JOIN records r ON r.seq = v.seq"
        " WHERE r.space = ? AND v.reason LIKE ?",
        (space_id, reason_prefix + "%"),
    ).fetchall()
    return {str(r[0]) for r in rows}


def posts_by(
    conn: Conn, space_id: str, authors: Iterable[str], before: int | None
) -> list[tuple[int, str, spaces.Held]]:
    """(seq, kind, held) of every post (`identity.spaces.POST_KINDS`) of `authors` in the space the log holds,
    flagged or not, stored before seq `before` (None: all), in log order."""
    marks = ", ".join("?" * len(spaces.POST_KINDS))
    test, listed = any_of(conn, sorted(set(authors)))
    rows = conn.execute(
        f"SELECT seq, kind, hash, version, body FROM records WHERE space = ? AND kind IN ({marks})"
        f" AND author_id {test} AND seq < ? ORDER BY seq",
        (space_id, *sorted(spaces.POST_KINDS), listed, 1 << 62 if before is None else before),
    ).fetchall()
    return [(int(r[0]), str(r[1]), spaces.Held(str(r[2]), str(r[3]), json.loads(bytes(r[4])))) for r in rows]


def this_node(conn: Conn) -> str | None:
    """This node's id as its database records it (None in a database no node was initialised on)."""
    row = conn.execute("SELECT value FROM node_meta WHERE key = 'node_id'").fetchone()
    return None if row is None else str(row[0])


def hosts(conn: Conn, space_id: str) -> list[str]:
    """The nodes that host the space (`identity.space_rules.hosting`), by node id."""
    rows = conn.execute("SELECT node_id FROM space_hosts WHERE space_id = ? ORDER BY node_id", (space_id,))
    return [str(r[0]) for r in rows.fetchall()]


def hosts_of_hosted(conn: Conn, node_id: str) -> dict[str, frozenset[str]]:
    """Every space `node_id` hosts, with all its hosting nodes: what the serving filter asks `may_receive` about."""
    rows = conn.execute(
        "SELECT h.space_id, h.node_id FROM space_hosts h"
        " WHERE h.space_id IN (SELECT space_id FROM space_hosts WHERE node_id = ?)",
        (node_id,),
    ).fetchall()
    out: dict[str, set[str]] = {}
    for space_id, node in rows:
        out.setdefault(str(space_id), set()).add(str(node))
    return {space_id: frozenset(nodes) for space_id, nodes in out.items()}


def created_here(conn: Conn, space_id: str) -> bool:
    """Whether the space's creation record was stored on this node from a client (its origin `local`): this node
    then hosts the space implicitly (`identity.space_rules.hosting`)."""
    row = conn.execute(
        "SELECT 1 FROM space_records s JOIN records r ON r.seq = s.seq"
        " WHERE s.space_id = ? AND s.kind = 'space' AND r.origin = 'local'",
        (space_id,),
    ).fetchone()
    return row is not None


def hosted_by(conn: Conn, node_id: str) -> frozenset[str]:
    """The spaces `node_id` hosts, as this node's projection says."""
    rows = conn.execute("SELECT space_id FROM space_hosts WHERE node_id = ?", (node_id,)).fetchall()
    return frozenset(str(r[0]) for r in rows)


def _readers(conn: Conn, space_id: str) -> set[str]:
    marks = ", ".join("?" * len(READ_ROLES))
    rows = conn.execute(
        f"SELECT agent_id FROM space_roles WHERE space_id = ? AND role IN ({marks})", (space_id, *sorted(READ_ROLES))
    ).fetchall()
    return {str(r[0]) for r in rows}


def forget_notifications_txn(conn: Conn, space_id: str, agents: Iterable[str]) -> None:
    """Expire the pending and leased notifications of `space_id`'s entries held by `agents` (who may no longer read
    the space): neither a poll nor a push delivers them (docs/spaces.md, "Read paths")."""
    conn.executemany(
        "UPDATE notifications SET status = 'expired' WHERE agent_id = ? AND status IN ('pending', 'leased')"
        " AND entry_id IN (SELECT id FROM entries WHERE space = ?)",
        [(agent, space_id) for agent in sorted(agents)],
    )


def may_read_sql(space: str, agent: str) -> str:
    """A SQL condition that the agent in column `agent` may read a record of the space in column `space` (NULL:
    public): `readable_spaces` as a condition, for statements that decide many agents at once (the inbox's
    fan-out)."""
    roles = ", ".join(f"'{role}'" for role in sorted(READ_ROLES))
    return (
        f"({space} IS NULL OR EXISTS (SELECT 1 FROM space_roles sr WHERE sr.space_id = {space}"
        f" AND sr.agent_id = {agent} AND sr.role IN ({roles})))"
    )


def space(conn: Conn, space_id: str) -> SpaceRow | None:
    """The valid space `space_id`, or None (not held, or its creation not valid)."""
    row = conn.execute(
        "SELECT space_id, owner, name, description, created_at FROM spaces WHERE space_id = ?", (space_id,)
    ).fetchone()
    return None if row is None else SpaceRow(*row)


def role(conn: Conn, space_id: str, agent_id: str) -> str:
    """The agent's role in the space: owner, admin, writer, reader, or none."""
    row = conn.execute(
        "SELECT role FROM space_roles WHERE space_id = ? AND agent_id = ?", (space_id, agent_id)
    ).fetchone()
    return "none" if row is None else str(row[0])


def roles(conn: Conn, space_id: str) -> list[tuple[str, str]]:
    """(agent, role) of every member of the space, by agent."""
    rows = conn.execute(
        "SELECT agent_id, role FROM space_roles WHERE space_id = ? ORDER BY agent_id", (space_id,)
    ).fetchall()
    return [(str(r[0]), str(r[1])) for r in rows]


def spaces_of(conn: Conn, agent_id: str) -> list[tuple[SpaceRow, str]]:
    """Every valid space the agent has a role in, with the role, by space id."""
    rows = conn.execute(
        "SELECT s.space_id, s.owner, s.name, s.description, s.created_at, m.role FROM space_roles m"
        " JOIN spaces s ON s.space_id = m.space_id WHERE m.agent_id = ? ORDER BY s.space_id",
        (agent_id,),
    ).fetchall()
    return [(SpaceRow(*r[:5]), str(r[5])) for r in rows]


def every_space(conn: Conn) -> list[SpaceRow]:
    """Every valid space the node holds, by space id (the operator's view: docs/spaces.md)."""
    rows = conn.execute("SELECT space_id, owner, name, description, created_at FROM spaces ORDER BY space_id")
    return [SpaceRow(*r) for r in rows.fetchall()]


def readable_spaces(conn: Conn, agent_id: str) -> frozenset[str]:
    """The spaces `agent_id` may read (`identity.space_rules.may_read`: owner, admins, writers, readers): the one
    function every read path asks (docs/spaces.md)."""
    marks = ", ".join("?" * len(READ_ROLES))
    rows = conn.execute(
        f"SELECT space_id FROM space_roles WHERE agent_id = ? AND role IN ({marks})", (agent_id, *sorted(READ_ROLES))
    ).fetchall()
    return frozenset(str(r[0]) for r in rows)


def named_records(conn: Conn, addresses: Sequence[str]) -> dict[str, str | None]:
    """The space of each of these addresses held in the log, of any kind, flagged void or not (None: public);
    addresses not held are absent. The space of a record is a function of the record (`space` is inside its
    address: docs/format-v3.md 4.7), so what a record naming it may do is too."""
    test, listed = any_of(conn, addresses)
    rows = conn.execute(f"SELECT DISTINCT hash, space FROM records WHERE hash {test}", (listed,)).fetchall()
    return {str(r[0]): None if r[1] is None else str(r[1]) for r in rows}


def naming_spaces(conn: Conn, addresses: Sequence[str]) -> list[tuple[str, str | None]]:
    """(address, space of the record naming it) for every stored link naming one of `addresses`: the space of the
    link's source entry, None when that is public or not held here."""
    test, listed = any_of(conn, addresses)
    rows = conn.execute(
        "SELECT l.target_hash, s.space FROM links l LEFT JOIN entries s ON s.record_hash = l.source_hash"
        f" WHERE l.target_hash {test}",
        (listed,),
    ).fetchall()
    return [(str(r[0]), None if r[1] is None else str(r[1])) for r in rows]


MAX_REFUSED_REMEMBERED = 100_000  # rows of `refused_space_records`: past it, a refusal is not remembered (a link waits)


_REMEMBER_REFUSED = (
    "INSERT INTO refused_space_records (hash, space, reason, refused_ms)"
    " SELECT value ->> 0, value ->> 1, value ->> 2, ? FROM json_each(?)"
    " WHERE (SELECT count(*) FROM refused_space_records) < ? ON CONFLICT (hash) DO NOTHING"
)
# _REMEMBER_REFUSED on PostgreSQL: the JSON array's rows by jsonb_array_elements (record 50)
_REMEMBER_REFUSED_PG = (
    "INSERT INTO refused_space_records (hash, space, reason, refused_ms)"
    " SELECT value ->> 0, value ->> 1, value ->> 2, ? FROM jsonb_array_elements(CAST(? AS jsonb)) AS j(value)"
    " WHERE (SELECT count(*) FROM refused_space_records) < ? ON CONFLICT (hash) DO NOTHING"
)


def remember_refused_txn(
    conn: Conn, refused: Sequence[tuple[str, str, str]], now_ms: int, cap: int = MAX_REFUSED_REMEMBERED
) -> None:
    """Remember the space of each (hash, space, reason) of a space's record refused as void, unless the table holds
    `cap` rows already (then a link naming one waits for it, as before docs/decisions.md record 75)."""
    if not refused:
        return
    conn.execute(
        _REMEMBER_REFUSED_PG if engine_of(conn) == POSTGRESQL else _REMEMBER_REFUSED,
        (now_ms, json.dumps([list(r) for r in refused]), cap),
    )


def refused_records(conn: Conn, addresses: Sequence[str]) -> dict[str, str]:
    """The space of each of these addresses that the space gate refused as void (`remember_refused_txn`)."""
    test, listed = any_of(conn, addresses)
    rows = conn.execute(f"SELECT hash, space FROM refused_space_records WHERE hash {test}", (listed,)).fetchall()
    return {str(r[0]): str(r[1]) for r in rows}


class Naming(NamedTuple):
    """A record in the log, not flagged void, holding a link (an entry's link, a link record) that names `named`."""

    seq: int
    hash: str
    version: str
    kind: str
    author_id: str
    space: str | None
    named: str


def naming_records(conn: Conn, addresses: Sequence[str]) -> list[Naming]:
    """Every record of the log not flagged void whose links name one of `addresses` (as a link's target, or a link
    record's source), in log order, once per address it names (two indexed lookups per address: `links_target`,
    `links_source`)."""
    pg = engine_of(conn) == POSTGRESQL  # the addresses as an array there (record 50)
    named = "SELECT unnest(CAST(? AS text[]))" if pg else "SELECT value FROM json_each(?)"
    rows = conn.execute(
        f"WITH named(address) AS ({named}),"
        " hits(origin, address) AS ("
        " SELECT l.origin_hash, n.address FROM named n JOIN links l ON l.target_hash = n.address"
        " UNION SELECT l.origin_hash, n.address FROM named n JOIN links l ON l.source_hash = n.address)"
        " SELECT r.seq, r.hash, r.version, r.kind, r.author_id, r.space, h.address FROM hits h"
        " JOIN records r ON r.hash = h.origin"
        " WHERE NOT EXISTS (SELECT 1 FROM void_records v WHERE v.seq = r.seq) ORDER BY r.seq",
        (list(addresses) if pg else json.dumps(list(addresses)),),
    ).fetchall()
    return [Naming(int(r[0]), str(r[1]), str(r[2]), str(r[3]), str(r[4]), r[5], str(r[6])) for r in rows]


def sight_of(conn: Conn, viewer: Viewer) -> Sight:
    """The sight of `viewer` on this node (`node.spaces.sight`): for an agent, the spaces `readable_spaces` says it
    may read; every space for the node's operator (None); a Sight given stays as it is."""
    if viewer is None:
        return OPERATOR
    if isinstance(viewer, Sight):
        return viewer
    return Sight(readable_spaces(conn, viewer))


def roles_of(conn: Conn, pairs: Iterable[tuple[str, str]]) -> dict[tuple[str, str], str | None]:
    """The role of each (space, agent) pair: owner, admin, writer, reader or none; None when the space is not a
    valid space here. One statement for all of them (a run of posts into spaces)."""
    wanted = sorted(set(pairs))
    pg = engine_of(conn) == POSTGRESQL  # the pairs' rows by jsonb_array_elements there (record 50)
    pairs_sql = "jsonb_array_elements(CAST(? AS jsonb)) AS p(value)" if pg else "json_each(?) p"
    rows = conn.execute(
        "SELECT p.value ->> 0, p.value ->> 1, s.space_id IS NOT NULL,"
        " (SELECT r.role FROM space_roles r WHERE r.space_id = p.value ->> 0 AND r.agent_id = p.value ->> 1)"
        f" FROM {pairs_sql} LEFT JOIN spaces s ON s.space_id = p.value ->> 0",
        (json.dumps(wanted),),
    ).fetchall()
    return {(str(r[0]), str(r[1])): (None if not r[2] else str(r[3] or "none")) for r in rows}


def spaces_with_entries(conn: Conn, cap: int) -> list[str] | None:
    """Every space an entry held here was posted into (`entry_spaces`, kept by a trigger: a superset, never less),
    or None when there are more than `cap`."""
    rows = conn.execute("SELECT space FROM entry_spaces LIMIT ?", (cap + 1,)).fetchall()
    return None if len(rows) > cap else [str(r[0]) for r in rows]


def posts_of(conn: Conn, space_id: str, author: str) -> list[str]:
    """The versions of `author`'s posts in the space that the log holds (entries: the only posts a space takes so
    far) and of its redactions there (what it did as an admin: docs/format-v3.md 5.2; the redaction feature's store
    reads them), sorted: what a removal vouches for by default, so a demotion keeps the member's past work and
    moderation standing."""
    rows = conn.execute(
        "SELECT r.version FROM entries e JOIN records r ON r.seq = e.id WHERE e.space = ? AND e.author_id = ?",
        (space_id, author),
    ).fetchall()
    return sorted({str(r[0]) for r in rows}.union(redaction_store.versions_by(conn, space_id, author)))
