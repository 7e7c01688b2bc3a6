"""The SQL of the agents feature: local agents (`local_agents`), the agents a node knows (`agents`), bearer
credentials (`credentials`, `credential_epoch`), key-proof sessions (`auth_sessions`) and, on a node of several
processes, pending key-proof challenges (`key_challenges`).

Store functions (docs/architecture.md, "Where SQL lives"): those ending in `_txn` write and run on the writer
thread, inside a `db.write` job; the others only read, but the challenges' (async, on the process's own connection,
node/store/side.py). The services (node/agents/service.py, refs.py, portable.py, sessions.py, challenges.py) decide
what to ask and what an answer means.
"""

from __future__ import annotations

from typing import Any

from node.store.conn import POSTGRESQL, Conn, engine_of
from node.store.side import SideConnection

# ---- local agents -----------------------------------------------------------------------------------------------


def agent_id_by_name(conn: Conn, name: str) -> str | None:
    """The did of the local agent registered under `name`, or None."""
    row = conn.execute("SELECT agent_id FROM local_agents WHERE name = ?", (name,)).fetchone()
    return None if row is None else str(row[0])


def name_taken(conn: Conn, name: str) -> bool:
    """Whether a local agent is registered under `name`."""
    return bool(conn.execute("SELECT 1 FROM local_agents WHERE name = ?", (name,)).fetchone())


def did_registered(conn: Conn, agent_id: str) -> bool:
    """Whether the identity `agent_id` is registered here as a local agent."""
    return bool(conn.execute("SELECT 1 FROM local_agents WHERE agent_id = ?", (agent_id,)).fetchone())


def local_agent(conn: Conn, agent_id: str) -> Any:
    """The local agent's row (`name`, `agent_id`), or None."""
    return conn.execute("SELECT name, agent_id FROM local_agents WHERE agent_id = ?", (agent_id,)).fetchone()


def insert_local_agent_txn(conn: Conn, name: str, agent_id: str, key_seed: bytes | None, now_ms: int) -> None:
    """Register `agent_id` under the local `name`, with its key's seed when the node keeps it."""
    conn.execute(
        "INSERT INTO local_agents (name, agent_id, key_seed, created_ms) VALUES (?, ?, ?, ?)",
        (name, agent_id, key_seed, now_ms),
    )


def set_key_seed_txn(conn: Conn, agent_id: str, key_seed: bytes) -> None:
    """Keep `key_seed` as the local agent's signing key from now on (a rotation: the old seed is forgotten)."""
    conn.execute("UPDATE local_agents SET key_seed = ? WHERE agent_id = ?", (key_seed, agent_id))


def key_seed(conn: Conn, agent_id: str) -> bytes | None:
    """The seed of a local agent's key, or None when the agent is not local or the node does not keep its key."""
    row = conn.execute("SELECT key_seed FROM local_agents WHERE agent_id = ?", (agent_id,)).fetchone()
    if row is None or row[0] is None:
        return None
    return bytes(row[0])


def kept_with_key_events(conn: Conn) -> list[tuple[str, bytes]]:
    """(agent id, seed of the key kept) of the local agents whose key the node keeps and of which the log holds a key
    event (rotated or recovered)."""
    return [
        (str(row[0]), bytes(row[1]))
        for row in conn.execute(
            # the key events through their partial index (records_authority), then the agents among their authors
            "SELECT agent_id, key_seed FROM local_agents WHERE key_seed IS NOT NULL AND agent_id IN"
            " (SELECT author_id FROM records WHERE kind IN ('key_event', 'vouch_page') AND kind = 'key_event')"
        )
    ]


def exported_identity(conn: Conn, name: str) -> Any:
    """The local agent `name`'s (`agent_id`, `key_seed`, identity record body), or None if no agent has it."""
    return conn.execute(
        "SELECT l.agent_id, l.key_seed, r.body FROM local_agents l JOIN agents a ON a.id = l.agent_id"
        " JOIN records r ON r.hash = a.doc_hash WHERE l.name = ?",
        (name,),
    ).fetchone()


# ---- every agent this node knows ----------------------------------------------------------------------------


def agent_known(conn: Conn, agent_id: str) -> bool:
    """Whether this node holds the identity document of `agent_id` (registered here or arrived by sync)."""
    return conn.execute("SELECT 1 FROM agents WHERE id = ?", (agent_id,)).fetchone() is not None


def agent(conn: Conn, agent_id: str) -> Any:
    """The `agents` row of `agent_id` with its entry count as `n` (public entries: docs/spaces.md), or None."""
    return conn.execute(
        "SELECT a.*, (SELECT count(*) FROM entries e WHERE e.author_id = a.id AND e.space IS NULL) AS n"
        " FROM agents a WHERE a.id = ?",
        (agent_id,),
    ).fetchone()


def agent_page(conn: Conn, after: str | None, local: bool, limit: int) -> list[Any]:
    """Up to `limit` agents in did order after `after` (with `local`, only those registered here): their
    identity, local name, whether the key is kept (`key_kept`) and entry count (`n`)."""
    # PostgreSQL cannot type a parameter that is only tested for NULL: the cast says it (record 50)
    after_sql = "CAST(:after AS text)" if engine_of(conn) == POSTGRESQL else ":after"
    return conn.execute(
        "SELECT a.id, l.name, a.display_name, a.description, a.agent_type, a.home_node, a.created_at,"
        " l.key_seed IS NOT NULL AS key_kept,"
        " (SELECT count(*) FROM entries e WHERE e.author_id = a.id AND e.space IS NULL) AS n"
        " FROM agents a LEFT JOIN local_agents l ON l.agent_id = a.id"
        f" WHERE ({after_sql} IS NULL OR a.id > :after) AND (:local = 0 OR l.name IS NOT NULL)"
        " ORDER BY a.id LIMIT :limit",
        {"after": after, "local": int(local), "limit": limit},
    ).fetchall()


# ---- credentials ----------------------------------------------------------------------------------------------


def insert_credential_txn(
    conn: Conn, key_id: str, role: str, agent_id: str | None, secret_sha256: str, now_ms: int
) -> None:
    """Store a credential by its key id and the SHA-256 of its secret."""
    conn.execute(
        "INSERT INTO credentials (key_id, role, agent_id, secret_sha256, created_ms) VALUES (?, ?, ?, ?, ?)",
        (key_id, role, agent_id, secret_sha256, now_ms),
    )


def delete_agent_credentials_txn(conn: Conn, agent_id: str) -> None:
    """Delete every API key of the agent (its credential epoch moves, by trigger)."""
    conn.execute("DELETE FROM credentials WHERE role = 'agent' AND agent_id = ?", (agent_id,))


def credential(conn: Conn, key_id: str) -> Any:
    """The credential `key_id` (`role`, `agent_id`, `secret_sha256`), or None."""
    return conn.execute("SELECT role, agent_id, secret_sha256 FROM credentials WHERE key_id = ?", (key_id,)).fetchone()


def credential_epoch(conn: Conn) -> int:
    """The counter every deletion or change of a credential moves (a trigger, whichever process made it)."""
    return int(conn.execute("SELECT n FROM credential_epoch WHERE id = 1").fetchone()[0])


# ---- key-proof sessions ---------------------------------------------------------------------------------------


def open_session_txn(
    conn: Conn, key_id: str, agent_id: str, signing_key: str, secret_sha256: str, expires_ms: int, now_ms: int
) -> None:
    """Drop the sessions expired at `now_ms`, and store a new one of `agent_id`, proved by `signing_key`, until
    `expires_ms`."""
    conn.execute("DELETE FROM auth_sessions WHERE expires_ms <= ?", (now_ms,))
    conn.execute(
        "INSERT INTO auth_sessions (key_id, agent_id, signing_key, secret_sha256, expires_ms) VALUES (?, ?, ?, ?, ?)",
        (key_id, agent_id, signing_key, secret_sha256, expires_ms),
    )


def session(conn: Conn, key_id: str) -> Any:
    """The session `key_id` (`agent_id`, `secret_sha256`, `expires_ms`, the key that proved it), or None."""
    return conn.execute(
        "SELECT agent_id, secret_sha256, expires_ms, coalesce(signing_key, agent_id) FROM auth_sessions"
        " WHERE key_id = ?",
        (key_id,),
    ).fetchone()


# ---- pending key-proof challenges of a node of several processes (node/agents/challenges.py) ----------------------
# Run on the process's own connection (node/store/side.py), each statement its own transaction, never the writer's.

# The ring: a challenge takes slot `seq % total`, so the table never holds more than `total` rows and a new one
# evicts the oldest overall, with no count. Then the agent's own beyond `per_agent` (the oldest) are deleted; asks of
# one agent at the same instant at two processes may leave one more until the next ask of that agent.
_ISSUE_CHALLENGE = """
INSERT INTO key_challenges (slot, seq, nonce, agent_id, expires_ms)
SELECT n.v %% %s, n.v, %s, %s, %s FROM (SELECT nextval('key_challenge_seq') AS v) AS n
ON CONFLICT (slot) DO UPDATE SET seq = excluded.seq, nonce = excluded.nonce, agent_id = excluded.agent_id,
    expires_ms = excluded.expires_ms
"""
_TRIM_CHALLENGES = """
DELETE FROM key_challenges WHERE agent_id = %s AND seq <= (
    SELECT seq FROM key_challenges WHERE agent_id = %s ORDER BY seq DESC OFFSET %s LIMIT 1
)
"""
_TAKE_CHALLENGE = "DELETE FROM key_challenges WHERE nonce = %s AND agent_id = %s RETURNING expires_ms"
_SWEEP_CHALLENGES = "DELETE FROM key_challenges WHERE expires_ms < %s"


async def issue_challenge(side: SideConnection, total: int, nonce: str, agent_id: str, expires_ms: int) -> None:
    """Hold the challenge `nonce` of `agent_id` in the ring of `total` slots (evicting the oldest overall). Not run a
    second time after a lost connection: the first run may have held the nonce."""
    await side.fetch(_ISSUE_CHALLENGE, (total, nonce, agent_id, expires_ms), again=False)


async def trim_challenges(side: SideConnection, agent_id: str, per_agent: int) -> None:
    """Delete the challenges of `agent_id` beyond its newest `per_agent`."""
    await side.fetch(_TRIM_CHALLENGES, (agent_id, agent_id, per_agent))


async def take_challenge(side: SideConnection, nonce: str, agent_id: str) -> int | None:
    """Delete the challenge `nonce` of `agent_id`: its expiry (ms), or None when none is held (decided once)."""
    rows = await side.fetch(_TAKE_CHALLENGE, (nonce, agent_id))
    return int(rows[0][0]) if rows else None


async def sweep_challenges(side: SideConnection, now_ms: int) -> None:
    """Delete the challenges expired before `now_ms`."""
    await side.fetch(_SWEEP_CHALLENGES, (now_ms,))


async def count_challenges(side: SideConnection) -> int:
    """How many challenges the node holds."""
    rows = await side.fetch("SELECT count(*) FROM key_challenges", ())
    return int(rows[0][0])
