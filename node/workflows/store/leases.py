"""What a lease asked across nodes reads and writes: `peer_lease_requests` (the ids of the lease requests peers
forwarded, so none is answered twice), an agent's home node and identity document, and a peer's URL.

node/workflows/leases.py decides a forwarded request (the home node's side); node/workflows/forward.py asks a
home node (the asking node's side).
"""

from __future__ import annotations

from node.store.conn import POSTGRESQL, Conn, engine_of


def forget_requests_txn(conn: Conn, before_ms: int) -> None:
    """Drop the ids of forwarded lease requests received before `before_ms`."""
    conn.execute("DELETE FROM peer_lease_requests WHERE received_ms < ?", (before_ms,))


def insert_request_txn(conn: Conn, request_id: str, peer_id: str, now_ms: int) -> bool:
    """Record a forwarded lease request's id; False when it is already recorded (a replay)."""
    inserted = conn.execute(
        "INSERT INTO peer_lease_requests (request_id, peer_id, received_ms) VALUES (?, ?, ?) ON CONFLICT DO NOTHING"
        if engine_of(conn) == POSTGRESQL  # record 50: only the id's conflict is skipped; no column is ever NULL
        else "INSERT OR IGNORE INTO peer_lease_requests (request_id, peer_id, received_ms) VALUES (?, ?, ?)",
        (request_id, peer_id, now_ms),
    ).rowcount
    return bool(inserted)


def agent_home(conn: Conn, agent_id: str) -> tuple[str, int] | None:
    """(home node, created time) of the agent's newest identity document held here, or None."""
    row = conn.execute("SELECT home_node, created_ms FROM agents WHERE id = ?", (agent_id,)).fetchone()
    return None if row is None else (str(row[0]), int(row[1]))


def agent_document(conn: Conn, agent_id: str) -> bytes | None:
    """The canonical bytes of the agent's newest identity document held here, or None."""
    row = conn.execute(
        "SELECT r.body FROM agents a JOIN records r ON r.hash = a.doc_hash WHERE a.id = ?", (agent_id,)
    ).fetchone()
    if row is None:
        return None
    body: bytes = row[0]
    return body


def peer_url(conn: Conn, node_id: str) -> str | None:
    """The URL of the peer `node_id` from this node's peer list, or None when it is not a peer."""
    row = conn.execute("SELECT url FROM peers WHERE node_id = ?", (node_id,)).fetchone()
    return None if row is None else str(row[0])
