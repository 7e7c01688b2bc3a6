"""Links: a link record between two entries, node-signed or signed by its author."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NoReturn

from identity import canonical
from identity.schema import LinkRecord
from identity.schema_v3 import space_of
from node.entries import store
from node.entries.queries import LinkOut
from node.errors import InvalidInput, Located, NotFound
from node.spaces import posts as posts_check
from node.spaces.sight import Sight, stored_scope
from node.spaces.store import sight_of
from node.store import idempotency, projections
from node.store.authority import Authority, authorize_txn
from node.store.conn import Conn
from node.store.db import Database
from node.store.sealing import Sealing, sign_and_check
from wire.api import PostLink, SignedSubmission
from wire.time import format_ms


class Links:
    """Linking entries on one node."""

    def __init__(self, db: Database, sealing: Sealing, now_ms: Callable[[], int]) -> None:
        self.db = db
        self.sealing = sealing
        self.now_ms = now_ms

    async def create(
        self, agent_id: str, body: PostLink | SignedSubmission, idempotency_key: str | None
    ) -> tuple[LinkOut, bool]:
        """Store a link record (node-signed or author-signed). Returns (link, created)."""
        key = idempotency.request_key(idempotency_key, body.idempotency_key)
        if key is not None:  # a replay answers with the original link, whatever this body says
            replayed = await self.db.read(lambda c: replayed_link(c, agent_id, key), quick=True)
            if replayed is not None:
                return replayed, False
        at = Located("$.record" if isinstance(body, SignedSubmission) else "$")  # where source and target sit
        if isinstance(body, SignedSubmission):
            if body.record.get("kind") == "link" and body.record.get("source") == body.record.get("target"):
                with at:  # records.check refuses it too (any node does), but the API names it precisely
                    refuse_self_link()
            record, record_hash, decoded = self.sealing.check_signed(body.record, "link", agent_id)
        else:
            signer = await self.sealing.signer(agent_id)
            source, target = await self.db.read(lambda c: ends(c, body, sight_of(c, agent_id)), quick=True)
            if source == target:
                refuse_self_link()
            unsigned = unsigned_link(
                agent_id, self.now_ms(), source, target, body.link_type, body.annotation, body.space
            )
            record, record_hash, decoded = sign_and_check(unsigned, signer)
        assert isinstance(decoded, LinkRecord)
        link_id, created = await self.db.write(
            lambda c: store_txn(c, agent_id, key, record, record_hash, decoded, at, self.now_ms, self.sealing.authority)
        )
        return await self.db.read(lambda c: store.link_by_id(c, link_id), quick=True), created


def unsigned_link(
    author_id: str,
    created_ms: int,
    source: str,
    target: str,
    link_type: str,
    annotation: str = "",
    space: str | None = None,
) -> dict[str, Any]:
    """The unsigned record of a link the node signs for `author_id` (in `space`, when given)."""
    in_space = {} if space is None else {"space": space}
    return {
        **in_space,
        "kind": "link",
        "schema_version": canonical.SCHEMA_VERSION,
        "author_id": author_id,
        "created_at": format_ms(created_ms),
        "source": source,
        "target": target,
        "link_type": link_type,
        "annotation": canonical.normalize_value(annotation),
    }


def refuse_self_link() -> NoReturn:
    """400 `self_link`: a link from an entry to itself."""
    raise InvalidInput("an entry cannot link to itself", field="$.target", code="self_link")


def ends(conn: Conn, body: PostLink, sight: Sight) -> tuple[str, str]:
    """The record hashes of a node-signed link's source (an entry on this node) and target (any entry), as the
    author's `sight` sees them."""
    source = store.require_ref(
        conn, body.source, "source entry", sight, field="$.source", code="source_not_found", stored=True
    )
    target = store.require_ref(conn, body.target, "target", sight, field="$.target", code="target_not_found")
    return source, target


def store_txn(
    conn: Conn,
    agent_id: str,
    key: str | None,
    record: dict[str, Any],
    record_hash: str,
    decoded: LinkRecord,
    at: Located,
    now_ms: Callable[[], int],
    authority: Authority,
) -> tuple[int, bool]:
    """Append the link unless its author already asserted the same link; (link id, created)."""
    if key is not None:
        done = idempotency.replayed(conn, agent_id, key, "link", field="$.idempotency_key")
        if done is not None:
            return store.link_id_of_txn(conn, done), False
    space = space_of(decoded)
    same = store.same_link_txn(conn, decoded.source, decoded.target, decoded.link_type, agent_id, space)
    if same is not None:  # the same author asserting the same link again: one link
        same_id, origin_hash, origin_kind = same
        if key is not None and origin_kind == "link":  # the key now names that link (and no other use)
            idempotency.remember(conn, agent_id, key, "link", origin_hash, now_ms())
        return same_id, False
    if not store.entry_stored_txn(conn, decoded.source):
        with at:
            raise NotFound("source entry is not on this node", field="$.source", code="source_not_found")
    with at:  # the key that signed it may sign for its author (docs/format-v3.md 3.5)
        authorize_txn(conn, authority, [(record, record_hash, "$")])
    state = space is not None and decoded.link_type == "supersedes"  # changes its target's state: its own space only
    names = [
        posts_check.Name(decoded.source, "$.source", "source_not_found", state, link=True),
        posts_check.Name(decoded.target, "$.target", "target_not_found", state, link=True),
    ]
    posts_check.check_posts_txn(conn, [posts_check.Post(record_hash, agent_id, space, names, at.where)])
    projections.append(conn, record, record_hash, decoded, origin="local", now_ms=now_ms(), scope=stored_scope(space))
    if key is not None:
        idempotency.remember(conn, agent_id, key, "link", record_hash, now_ms())
    return store.link_id_of_txn(conn, record_hash), True


def replayed_link(conn: Conn, agent_id: str, key: str) -> LinkOut | None:
    """The link the agent's idempotency `key` stored, or None (409 if the key did something else)."""
    done = idempotency.replayed(conn, agent_id, key, "link", field="$.idempotency_key")
    if done is None:
        return None
    return store.link_by_origin(conn, done)
