"""The inbox: an agent's subscriptions, and polling, acknowledging and expiring its notifications.

Notifications are made when entries are appended (node/inbox/notify.py, the fan-out); this is the agent's side.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable

import msgspec

from identity import canonical
from node.agents import refs as agent_refs
from node.entries.queries import parse_since
from node.errors import Conflict, NotFound
from node.inbox import notify, store
from node.spaces.store import sight_of
from node.store.conn import Conn
from node.store.db import Database
from wire.api import AckOut, Envelope, InboxQuery, InboxResult, SubscriptionIn, SubscriptionOut
from wire.time import format_ms

MAX_SUBSCRIPTIONS = 100


class Inbox:
    """Subscriptions and notifications of one node's agents."""

    def __init__(self, db: Database, now_ms: Callable[[], int]) -> None:
        self.db = db
        self.now_ms = now_ms

    async def subscribe(self, agent_id: str, sub: SubscriptionIn) -> tuple[SubscriptionOut, bool]:
        """Add a notification filter (the same filter again is the existing one). Returns (filter, created)."""
        if not agent_refs.all_dids(sub.authors):  # authors named by local name
            authors = await self.db.read(lambda c: agent_refs.resolve_all(c, sub.authors, "$.authors"), quick=True)
            sub = msgspec.structs.replace(sub, authors=authors)
        dims, filter_key = subscription_filter(sub)
        now = self.now_ms()
        return await self.db.write(lambda c: subscribe_txn(c, agent_id, dims, filter_key, sub.directed, now))

    async def subscriptions(self, agent_id: str) -> list[SubscriptionOut]:
        """The agent's filters, oldest first."""
        return await self.db.read(lambda c: subscriptions(c, agent_id), quick=True)

    async def unsubscribe(self, agent_id: str, sub_id: int) -> None:
        """Remove one of the agent's filters (404 if it has no such filter)."""
        await self.db.write(lambda c: unsubscribe_txn(c, agent_id, sub_id))

    async def poll(self, agent_id: str, q: InboxQuery) -> InboxResult:
        """Lease the agent's pending notifications (metadata only), oldest first."""
        since_ms = parse_since(q.since, "$.since")
        now = self.now_ms()
        rows: list[sqlite3.Row] = []
        # An empty inbox (the usual poll) is answered by a read: only a poll with something to lease needs the
        # writer. Expiry of any agent's notifications runs in those (take_inbox), so it waits for one.
        if q.space is not None:  # one space's notifications: a space the agent reads (as one never created otherwise)
            wanted = q.space
            if not await self.db.read(lambda c: sight_of(c, agent_id).sees(wanted), quick=True):
                raise NotFound("no such space here", field="$.space", code="unknown_space")
        if await self.db.read(lambda c: store.has_deliverable(c, agent_id, now), quick=True):
            rows = await self.db.write(
                lambda c: notify.take_inbox(
                    c,
                    agent_id,
                    limit=q.limit,
                    since_ms=since_ms,
                    mark_delivered=q.mark_delivered,
                    now_ms=now,
                    space=q.space,
                )
            )
        return InboxResult(notifications=[envelope(r) for r in rows], lease_seconds=notify.LEASE_MS // 1000)

    async def ack(self, agent_id: str, ids: list[int]) -> AckOut:
        """Acknowledge the agent's notifications by id: they are not delivered again."""
        now = self.now_ms()
        return AckOut(acknowledged=await self.db.write(lambda c: store.ack_txn(c, agent_id, ids, now)))

    async def expire_notifications(self) -> int:
        """Mark notifications past their expiry, any agent's; how many. Polls that lease do this too; this is for
        a node whose polls find nothing to lease (answered without the writer). A writer job only when needed."""
        now = self.now_ms()
        if not await self.db.read(lambda c: store.expired_waiting(c, now), quick=True):
            return 0
        return await self.db.write(lambda c: store.expire_txn(c, now))


def subscription_filter(sub: SubscriptionIn) -> tuple[dict[str, list[str]], str]:
    """A filter's dimensions (normalised, sorted, without repeats) and its key (equal filters, equal keys)."""
    dims = {
        "tags": sorted(set(canonical.normalize_value(sub.tags))),
        "entry_types": sorted(set(sub.entry_types)),
        "performatives": sorted(set(sub.performatives)),
        "authors": sorted(set(sub.authors)),
    }
    keyed = {**dims, "directed": sub.directed}
    spaces = sorted(set(sub.spaces))
    if spaces:  # only then part of the key: a filter without spaces keeps the key it had before spaces existed
        keyed["spaces"] = spaces
    return {**dims, "spaces": spaces}, canonical.canonical_bytes(keyed).decode()


def subscribe_txn(
    conn: Conn, agent_id: str, dims: dict[str, list[str]], filter_key: str, directed: bool, now: int
) -> tuple[SubscriptionOut, bool]:
    """Store the filter unless the agent has it already; read it back inside the write (a concurrent
    unsubscribe cannot make the answer vanish)."""
    row = store.subscription_by_filter(conn, agent_id, filter_key)
    if row is not None:
        return subscription_out(row), False
    sight = sight_of(conn, agent_id)
    for i, space in enumerate(dims["spaces"]):
        if not sight.sees(space):  # a subscription to a space one may not read: as to one never created
            raise NotFound("no such space here", field=f"$.spaces[{i}]", code="unknown_space")
    if store.subscription_count(conn, agent_id) >= MAX_SUBSCRIPTIONS:
        raise Conflict(f"an agent may hold at most {MAX_SUBSCRIPTIONS} subscriptions", code="too_many_subscriptions")
    sub_id = store.insert_subscription_txn(conn, agent_id, dims, filter_key, directed, now)
    return subscription_out(store.subscription(conn, sub_id)), True


def subscriptions(conn: Conn, agent_id: str) -> list[SubscriptionOut]:
    """The agent's filters, oldest first."""
    return [subscription_out(r) for r in store.agent_subscriptions(conn, agent_id)]


def unsubscribe_txn(conn: Conn, agent_id: str, sub_id: int) -> None:
    """Delete one of the agent's filters, or 404 `subscription_not_found`."""
    if store.delete_subscription_txn(conn, agent_id, sub_id) == 0:
        raise NotFound(f"no subscription {sub_id} of yours", code="subscription_not_found")


def subscription_out(row: sqlite3.Row) -> SubscriptionOut:
    """Render a subscriptions row."""
    return SubscriptionOut(
        id=row["id"],
        agent_id=row["agent_id"],
        tags=json.loads(row["tags"]),
        entry_types=json.loads(row["entry_types"]),
        performatives=json.loads(row["performatives"]),
        authors=json.loads(row["authors"]),
        directed=bool(row["directed"]),
        created_at=format_ms(row["created_ms"]),
        spaces=json.loads(row["spaces"]),
    )


def envelope(row: sqlite3.Row) -> Envelope:
    """Render a leased notification (a row of `notify.take_inbox`)."""
    return Envelope(
        notification_id=row["notification_id"],
        entry_id=row["entry_id"],
        record_hash=row["record_hash"],
        author=row["author_id"],
        created_at=row["created_at"],
        entry_type=row["entry_type"],
        performative=row["performative"],
        tags=json.loads(row["tags"]),
        confidence=row["confidence"],
        directed_to_me=bool(row["directed_to_me"]),
        link_targets=json.loads(row["link_targets"] or "[]"),
        tier=row["tier"],
        reason=row["reason"],
        attempt=row["attempt_count"] + 1,
        space=row["space"],
        redaction=row["redaction"],
    )
