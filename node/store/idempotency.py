"""Idempotency keys: what a key of an agent already produced, and remembering what it produces.

Every write that honours `Idempotency-Key` (entries, links, messages, task release and complete) runs these
inside its write transaction, so two concurrent requests with one key store one record. A key belongs to one
agent and one operation: reused for another operation it is `409 idempotency_key_reused`.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from node.errors import Conflict, InvalidInput
from node.store.conn import POSTGRESQL, Conn, engine_of

HEADER = "Idempotency-Key"


def request_key(header: str | None, body_field: str | None) -> str | None:
    """The request's idempotency key, from the Idempotency-Key header or the body field (they must agree)."""
    if header is not None and body_field is not None and header != body_field:
        raise InvalidInput(
            "the Idempotency-Key header and the idempotency_key field differ",
            field="$.idempotency_key",
            code="idempotency_key_mismatch",
        )
    return header if header is not None else body_field


def replayed(conn: Conn, agent_id: str, key: str, operation: str, *, field: str) -> str | None:
    """The hash of the record `key` already produced for `operation`, or None if the key is unused.

    Raises 409 `idempotency_key_reused` (naming `field`) if the agent used the key for another operation.
    """
    row = conn.execute(
        "SELECT operation, record_hash FROM idempotency WHERE agent_id = ? AND idem_key = ?", (agent_id, key)
    ).fetchone()
    return replay_of(row, operation, field=field)


def replay_of(used: Sequence[str] | None, operation: str, *, field: str) -> str | None:
    """`replayed`'s answer from what the key did (operation, record_hash), or None when it is unused. A key whose
    record was redacted or purged since (`forget_record_txn`) answers 409 `redacted`: the retry must not store the
    body again."""
    if used is None:
        return None
    if used[0] != operation:
        raise Conflict(f"idempotency key already used for a {used[0]}", field=field, code="idempotency_key_reused")
    if used[1] == DROPPED:
        raise Conflict("the record this idempotency key stored was redacted or purged here", field=field,
                       code="redacted")  # fmt: skip
    return str(used[1])


DROPPED = "dropped"  # the record_hash of a key whose record was redacted or purged (never a hash: not 64 hex)


def forget_record_txn(conn: Conn, record_hash: str) -> None:
    """The record at `record_hash` was redacted or purged: the keys that stored it answer 409 `redacted` from now on
    (`replay_of`), so a retry neither finds it nor stores its body again."""
    conn.execute("UPDATE idempotency SET record_hash = ? WHERE record_hash = ?", (DROPPED, record_hash))


def used(conn: Conn, keys: Sequence[tuple[str, str]]) -> dict[tuple[str, str], tuple[str, str]]:
    """What each of the (agent, key) pairs already did, (operation, record_hash), for those used, in one
    statement (`replay_of` each to decide)."""
    if not keys:
        return {}
    if engine_of(conn) == POSTGRESQL:  # the pairs as two arrays, side by side (record 50)
        rows = conn.execute(
            "SELECT i.agent_id, i.idem_key, i.operation, i.record_hash FROM unnest(?::text[], ?::text[]) k(a, key)"
            " JOIN idempotency i ON i.agent_id = k.a AND i.idem_key = k.key",
            ([agent for agent, _ in keys], [key for _, key in keys]),
        ).fetchall()
    else:
        rows = conn.execute(
            "SELECT i.agent_id, i.idem_key, i.operation, i.record_hash FROM json_each(?) k"
            " JOIN idempotency i ON i.agent_id = k.value ->> 0 AND i.idem_key = k.value ->> 1",
            (json.dumps(keys),),
        ).fetchall()
    return {(agent_id, key): (operation, record_hash) for agent_id, key, operation, record_hash in rows}


# The head of `remember`'s statement, for `db.insert_rows` of many (agent, key, operation, record_hash, now_ms)
# rows at once (entries.store_all): this module imports no I/O (node/default_mode's runtime uses it).
REMEMBER = "INSERT INTO idempotency (agent_id, idem_key, operation, record_hash, created_ms)"


def remember(conn: Conn, agent_id: str, key: str, operation: str, record_hash: str, now_ms: int) -> None:
    """Record that `key` produced `record_hash` by `operation` (in the transaction that appended it)."""
    conn.execute(REMEMBER + " VALUES (?, ?, ?, ?, ?)", (agent_id, key, operation, record_hash, now_ms))
