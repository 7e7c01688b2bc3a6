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

from typing import Any

from identity import keys
from identity.schema import MAX_DIRECTED
from node.spaces.sight import kept_local
from node.store import projections
from node.store.conn import Conn
from node.store.sealing import SealedRecord, sign_and_check
from node.workflows import scope
from node.workflows.store import tasks as task_store
from node.workflows.store import twins as twin_store
from wire.api import PostEntry, unsigned_entry
from wire.time import format_ms
from wire.workflows import LeaseOut, TaskTwin

NOTICE_TAG = "task-twin"
MAX_NOTICES_PER_ROUND = 100


def identity(conn: Conn, key: str) -> str:
    """The identity of the task a key resolves to: the hash of its earliest declaration."""
    return twin_store.first_declaration(conn, key) or ""


def twin_nodes(conn: Conn, key: str, home_node: str) -> list[str]:
    """The nodes other than the home node that granted a lease on the key (each acted as its home)."""
    return twin_store.lease_granters(conn, key, home_node)


def twin(conn: Conn, key: str, node_id: str, twin_of: str, now_ms: int) -> TaskTwin | None:
    """The twin of `key` that `node_id` acted as home of; None unless that node declared the key and granted a
    lease on it."""
    first = twin_store.first_declaration_by(conn, key, node_id)
    if first is None:
        return None
    grants = twin_store.grants_by(conn, key, node_id)
    if not grants:  # it declared the key (a title, say) but never acted as its home
        return None
    holders = list(dict.fromkeys(str(g["holder"]) for g in grants))
    newest = grants[-1]
    live = newest["expires_ms"] > now_ms and not twin_store.grant_ended(conn, newest["hash"], newest["holder"])
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


def declared_here(conn: Conn, key: str, node_id: str, twin_of: str) -> TaskTwin | None:
    """The later first declaration of `key` made on this node, as a twin nobody leased: the declaration this node
    projected first (it created the task here) was submitted here, and it is not the earliest. None otherwise
    (a declaration that reached this node from a peer, or a title declared here after the task existed)."""
    first = twin_store.first_projected_declaration(conn, key)
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


def twins(conn: Conn, key: str, home_node: str, now_ms: int) -> tuple[str, list[TaskTwin]]:
    """(the identity a key resolves to, its later twins ordered by their first declaration)."""
    main = identity(conn, key)
    found = [t for n in twin_nodes(conn, key, home_node) if (t := twin(conn, key, n, main, now_ms)) is not None]
    return main, sorted(found, key=lambda t: (t.declared_at, t.identity))


def pending(conn: Conn) -> list[str]:
    """Keys whose home moved and that this node has not checked yet."""
    return twin_store.pending_moves(conn, MAX_NOTICES_PER_ROUND)


def notice_txn(
    conn: Conn, key: str, node_key: keys.SigningKey, now_ms: int, node_id: str | None = None
) -> SealedRecord | None:
    """Check one moved key: if this node's own twin of it (leased here, or first declared here) is now a later
    twin, append (once) the entry that tells its holders and declarer. Clears the key from the queue in the same
    transaction. The notice, or None. `node_id`: the node's, when `node_key` is not its first key (a rotation)."""
    node_id = node_id or node_key.did
    twin_store.clear_move_txn(conn, key)
    home_node = task_store.home_node(conn, key)
    if home_node is None or home_node == node_id:
        return None
    main = identity(conn, key)
    mine = twin(conn, key, node_id, main, now_ms) or declared_here(conn, key, node_id, main)
    if mine is None:
        return None
    sealed = sign_and_check(_notice_draft(conn, key, mine, home_node), node_key)
    projections.append(conn, *sealed, origin="local", now_ms=now_ms, scope=kept_local(scope.split(key)[0]))
    return sealed


def _notice_draft(conn: Conn, key: str, mine: TaskTwin, home_node: str) -> dict[str, Any]:
    """The notice entry, from the log alone: dated 1 ms after the newest event it speaks of; in the task's space
    (`key` is its scoped key), as every record of a task is."""
    newest = twin_store.newest_of(conn, key, (mine.twin_of, mine.identity), mine.home_node)
    space, plain = scope.split(key)
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
            f"Task {plain} has a twin. It was first declared on node {home_node} too (identity {mine.twin_of}),"
            f" earlier than on node {mine.home_node} (identity {mine.identity}), so the key now resolves to that"
            + leased
        ),
        confidence=1.0,
        tags=[NOTICE_TAG],
        directed_to=told,
        metadata={"task_key": plain, "identity": mine.identity, "twin_of": mine.twin_of, "home_node": home_node},
        space=space,
    )
    return unsigned_entry(body, mine.home_node, format_ms(newest + 1), [])
