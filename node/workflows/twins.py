"""Twin tasks: one key first-declared on two nodes that could not see each other (docs/workflows.md, Twin tasks).

Every node folds a key's events into one task whose home node is the earliest declaration's `node_id`; grants
signed by any other node do not count. A node that granted leases on a key while its own first declaration was
the earliest it held acted as the home node of a task of its own: a **twin**, with its own identity (the hash
of that node's first declaration of the key). A lookup by key resolves to the earliest declaration (by
created_at, then hash), the same on every node; the later twins are listed beside it (`TaskOut.twins`).

When the earlier declaration reaches the twin's node (the task's home moves away from it, noted in
`task_home_moves` by the projector in node/workflows/records.py), that node signs one entry directed to the
twin's lease holders and its declarer: a `request` (tier 1 in their inboxes, wherever they are registered)
saying their task has a twin. A twin nobody leased is told too, by the node its declarer posted to: the key's
declaration this node projected first (lowest `seq`) was submitted here (`origin` local), so it created the
task here, and it is no longer the earliest (`declared_here`). Both facts come from this node's log, so only
that node, of all the nodes that hold the declaration, signs the notice. The entry is built only from the log
and Ed25519 signatures are deterministic, so signing it again (a crash before the queue row was cleared, a
rebuild) gives the same record: it is stored, synced and notified once.
"""

from __future__ import annotations

import sqlite3
from typing import Any

from identity import keys
from identity.schema import MAX_DIRECTED
from node.store import projections
from node.store.sealing import SealedRecord, sign_and_check
from wire.api import PostEntry, unsigned_entry
from wire.time import format_ms
from wire.workflows import LeaseOut, TaskTwin

NOTICE_TAG = "task-twin"
MAX_NOTICES_PER_ROUND = 100


def identity(conn: sqlite3.Connection, key: str) -> str:
    """The identity of the task a key resolves to: the hash of its earliest declaration."""
    row = conn.execute(
        "SELECT hash FROM task_events WHERE task_key = ? AND event = 'declare' ORDER BY created_ms, hash LIMIT 1",
        (key,),
    ).fetchone()
    return "" if row is None else str(row[0])


def twin_nodes(conn: sqlite3.Connection, key: str, home_node: str) -> list[str]:
    """The nodes other than the home node that granted a lease on the key (each acted as its home)."""
    rows = conn.execute(
        "SELECT DISTINCT author_id FROM task_events WHERE task_key = ? AND event = 'lease' AND author_id != ?",
        (key, home_node),
    ).fetchall()
    return [str(r[0]) for r in rows]


def twin(conn: sqlite3.Connection, key: str, node_id: str, twin_of: str, now_ms: int) -> TaskTwin | None:
    """The twin of `key` that `node_id` acted as home of; None unless that node declared the key and granted a
    lease on it."""
    first = conn.execute(
        "SELECT hash, author_id, created_at FROM task_events WHERE task_key = ? AND event = 'declare'"
        " AND node_id = ? ORDER BY created_ms, hash LIMIT 1",
        (key, node_id),
    ).fetchone()
    if first is None:
        return None
    grants = conn.execute(
        "SELECT hash, holder, expires_at, expires_ms FROM task_events WHERE task_key = ? AND event = 'lease'"
        " AND author_id = ? ORDER BY created_ms, hash",
        (key, node_id),
    ).fetchall()
    if not grants:  # it declared the key (a title, say) but never acted as its home
        return None
    holders = list(dict.fromkeys(str(g["holder"]) for g in grants))
    newest = grants[-1]
    ended = conn.execute(
        "SELECT 1 FROM task_events WHERE lease_ref = ? AND author_id = ? LIMIT 1", (newest["hash"], newest["holder"])
    ).fetchone()
    live = newest["expires_ms"] > now_ms and ended is None
    return TaskTwin(
        identity=str(first["hash"]),
        twin_of=twin_of,
        home_node=node_id,
        declared_by=str(first["author_id"]),
        declared_at=str(first["created_at"]),
        holders=holders,
        lease=LeaseOut(lease_id=newest["hash"], holder=newest["holder"], expires_at=newest["expires_at"])
        if live
        else None,
    )


def declared_here(conn: sqlite3.Connection, key: str, node_id: str, twin_of: str) -> TaskTwin | None:
    """The later first declaration of `key` made on this node, as a twin nobody leased: the declaration this node
    projected first (it created the task here) was submitted here, and it is not the earliest. None otherwise
    (a declaration that reached this node from a peer, or a title declared here after the task existed)."""
    first = conn.execute(
        "SELECT t.hash, t.author_id, t.created_at, t.node_id, r.origin FROM task_events t"
        " JOIN records r ON r.seq = t.seq WHERE t.task_key = ? AND t.event = 'declare' ORDER BY t.seq LIMIT 1",
        (key,),
    ).fetchone()
    if first is None or first["origin"] != "local" or first["node_id"] != node_id or first["hash"] == twin_of:
        return None
    return TaskTwin(
        identity=str(first["hash"]),
        twin_of=twin_of,
        home_node=node_id,
        declared_by=str(first["author_id"]),
        declared_at=str(first["created_at"]),
        holders=[],
        lease=None,
    )


def twins(conn: sqlite3.Connection, key: str, home_node: str, now_ms: int) -> tuple[str, list[TaskTwin]]:
    """(the identity a key resolves to, its later twins ordered by their first declaration)."""
    main = identity(conn, key)
    found = [t for n in twin_nodes(conn, key, home_node) if (t := twin(conn, key, n, main, now_ms)) is not None]
    return main, sorted(found, key=lambda t: (t.declared_at, t.identity))


def pending(conn: sqlite3.Connection) -> list[str]:
    """Keys whose home moved and that this node has not checked yet."""
    rows = conn.execute("SELECT task_key FROM task_home_moves LIMIT ?", (MAX_NOTICES_PER_ROUND,)).fetchall()
    return [str(r[0]) for r in rows]


def notice(conn: sqlite3.Connection, key: str, node_key: keys.SigningKey, now_ms: int) -> SealedRecord | None:
    """Check one moved key: if this node's own twin of it (leased here, or first declared here) is now a later
    twin, append (once) the entry that tells its holders and declarer. Clears the key from the queue in the same
    transaction. The notice, or None."""
    conn.execute("DELETE FROM task_home_moves WHERE task_key = ?", (key,))
    row = conn.execute("SELECT home_node FROM tasks WHERE key = ?", (key,)).fetchone()
    if row is None or row[0] == node_key.did:
        return None
    main = identity(conn, key)
    mine = twin(conn, key, node_key.did, main, now_ms) or declared_here(conn, key, node_key.did, main)
    if mine is None:
        return None
    sealed = sign_and_check(_notice_draft(conn, key, mine, str(row[0])), node_key)
    projections.append(conn, *sealed, origin="local", now_ms=now_ms)
    return sealed


def _notice_draft(conn: sqlite3.Connection, key: str, mine: TaskTwin, home_node: str) -> dict[str, Any]:
    """The notice entry, from the log alone: dated 1 ms after the newest event it speaks of."""
    newest = conn.execute(
        "SELECT max(created_ms) FROM task_events"
        " WHERE task_key = ? AND (hash IN (?, ?) OR author_id = ? AND event = 'lease')",
        (key, mine.twin_of, mine.identity, mine.home_node),
    ).fetchone()[0]
    told = sorted({mine.declared_by, *mine.holders})[:MAX_DIRECTED]
    leased = (
        f" task, and the leases node {mine.home_node} granted on its own twin do not count there. Read the"
        " task, lease it again before going on, and merge or drop the work done under the twin."
        if mine.holders
        else " task, and your declaration only adds to it (nobody leased the twin). Read the task and check that"
        " it is the one you meant."
    )
    body = PostEntry(
        entry_type="task",
        performative="request",
        content=(
            f"Task {key} has a twin. It was first declared on node {home_node} too (identity {mine.twin_of}),"
            f" earlier than on node {mine.home_node} (identity {mine.identity}), so the key now resolves to that"
            + leased
        ),
        confidence=1.0,
        tags=[NOTICE_TAG],
        directed_to=told,
        metadata={"task_key": key, "identity": mine.identity, "twin_of": mine.twin_of, "home_node": home_node},
    )
    return unsigned_entry(body, mine.home_node, format_ms(int(newest) + 1), [])
