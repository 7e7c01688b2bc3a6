"""The message bus of a node, once: sending (node-signed or signed by the sender) and reading messages.

Messages are signed records appended through `projections.append` inside one write job; node/workflows/bus.py
holds their SQL. Built once by `Node` (`node.bus`); REST is node/workflows/routes.py.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import msgspec

from identity import keys
from identity.schema_v3 import space_of
from node.agents import refs as agent_refs
from node.errors import Forbidden
from node.spaces import posts as posts_check
from node.spaces.sight import Viewer, stored_scope
from node.spaces.store import sight_of
from node.store import idempotency, projections
from node.store.authority import Authority, authorize_txn
from node.store.conn import Conn
from node.store.db import Database
from node.store.sealing import HashTaken, SealedRecord, Sealing, sign_and_check, until_hash_free
from node.workflows import bus
from wire.api import SignedSubmission
from wire.time import format_ms
from wire.workflows import MessageOut, MessagePage, MessageQuery, PostMessage


async def _named(db: Database, body: PostMessage) -> PostMessage:
    """The message with its agents named by did (each may be given as a did or a local name)."""
    if agent_refs.all_dids(ref for ref in (body.to_agent, body.from_agent) if ref is not None):
        return body
    to_agent, from_agent = await db.read(
        lambda c: (
            agent_refs.resolve_optional(c, body.to_agent, "$.to_agent"),
            agent_refs.resolve_optional(c, body.from_agent, "$.from_agent"),
        ),
        quick=True,
    )
    return msgspec.structs.replace(body, to_agent=to_agent, from_agent=from_agent)


class Bus:
    """The bus on one node: messages that are never consumed or deleted (built once, by `Node`)."""

    def __init__(self, db: Database, sealing: Sealing, now_ms: Callable[[], int]) -> None:
        self.db = db
        self.sealing = sealing
        self.now_ms = now_ms

    async def post_message(
        self, agent_id: str, body: PostMessage | SignedSubmission, idempotency_key: str | None = None
    ) -> tuple[MessageOut, bool]:
        """Append a message (node-signed, or a record the sender signed). Returns (message, created)."""
        idem = idempotency.request_key(idempotency_key, body.idempotency_key)
        signer: keys.SigningKey | None = None
        created_ms = 0
        if isinstance(body, SignedSubmission):
            sealed = self.sealing.check_signed(body.record, "message", agent_id)
        else:
            body = await _named(self.db, body)
            if body.from_agent is not None and body.from_agent != agent_id:
                raise Forbidden("from_agent must be the authenticated agent", field="$.from_agent")
            signer = await self.sealing.signer(agent_id)
            created_ms = self.now_ms()
            sealed = sign_and_check(bus.unsigned_message(agent_id, body, format_ms(created_ms)), signer)

        async def one_ms_later(taken: list[Any]) -> None:  # only a node-signed message's hash is ever taken
            nonlocal sealed, created_ms
            assert isinstance(body, PostMessage) and signer is not None
            created_ms += 1
            sealed = sign_and_check(bus.unsigned_message(agent_id, body, format_ms(created_ms)), signer)

        message_id, created = await until_hash_free(
            lambda: self.db.write(
                lambda c: append_message(
                    c, agent_id, idem, sealed, signer is not None, self.now_ms(), self.sealing.authority
                )
            ),
            one_ms_later,
            "message",
        )
        return await self.db.read(lambda c: bus.message_by_id(c, message_id), quick=True), created

    async def messages(self, q: MessageQuery, viewer: Viewer) -> MessagePage:
        """Read the bus as `viewer` may (`node.spaces.store.sight_of`: public messages and those of its spaces):
        filtered by project, agent (either end, a did or a local name), type or space."""
        named = q.agent
        if named is not None and not agent_refs.is_did(named):
            did = await self.db.read(lambda c: agent_refs.resolve(c, named, "$.agent"), quick=True)
            q = msgspec.structs.replace(q, agent=did)
        return await self.db.read(lambda c: bus.list_messages(c, q, sight_of(c, viewer)), quick=True)


def append_message(
    conn: Conn,
    agent_id: str,
    idem: str | None,
    sealed: SealedRecord,
    node_signed: bool,
    now: int,
    authority: Authority,
) -> tuple[int, bool]:
    """Append a message record (or answer a replayed key with its message): (message id, created).

    An identical node-signed send in the same millisecond is HashTaken: a second message all the same, 1 ms later.
    """
    if idem is not None:
        replay = bus.replayed_message(conn, agent_id, idem)
        if replay is not None:
            return replay, False
    where = "$" if node_signed else "$.record"
    authorize_txn(conn, authority, [(sealed[0], sealed[1], where)])  # its key may sign for its author (format-v3 3.5)
    _, record_hash, decoded = sealed
    space = space_of(decoded)
    # a writer of the space, to a reader of it, naming no entry its readers may not read (docs/spaces.md)
    names = [
        posts_check.Name(dep, f"$.dependency_ids[{i}]", "dependency_not_found")
        for i, dep in enumerate(decoded.dependency_ids)
        if posts_check.is_address(dep)
    ]
    posts_check.check_posts_txn(conn, [posts_check.Post(record_hash, agent_id, space, names, where)])
    if space is not None:
        posts_check.check_addressee_txn(conn, space, decoded.to_agent, where)
    seq, inserted = projections.append(conn, *sealed, origin="local", now_ms=now, scope=stored_scope(space))
    if not inserted and node_signed:
        raise HashTaken([sealed[1]])
    if idem is not None:
        idempotency.remember(conn, agent_id, idem, "message", sealed[1], now)
    return seq, inserted
