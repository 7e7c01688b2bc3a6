"""Lease decisions. A task's lease authority is its home node: the node named by its earliest declaration.

Grant decisions run inside one write job on the single writer thread, so liveness is checked and the grant
is appended in the same transaction: the home node can never grant two overlapping leases. Another node
refuses (or forwards) because it cannot know what the home node granted meanwhile.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from typing import Any

from node.errors import BBSError, Conflict, Forbidden, InvalidInput
from node.store.conn import Conn
from node.workflows.store import leases as leases_store
from node.workflows.tasks import lease_live
from wire.unsigned import DONE_STATUSES, OPEN_STATUSES


class NotHome(Exception):
    """This node is not the task's lease authority; `home_node` is."""

    def __init__(self, task_key: str, home_node: str) -> None:
        super().__init__(f"task {task_key} is homed on {home_node}")
        self.task_key = task_key
        self.home_node = home_node


class LeaseAuthorityUnreachable(BBSError):
    status, code, title = 503, "lease_authority_unreachable", "Lease authority unreachable"


class NotLeaseAuthority(BBSError):
    status, code, title = 503, "not_lease_authority", "Not the lease authority"


@dataclass(frozen=True)
class Grant:
    """What a granted lease decision needs to become a record."""

    task_key: str
    extends: bool


def decide_grant(row: sqlite3.Row, node_id: str, agent_id: str, now_ms: int) -> Grant:
    """Decide whether `agent_id` may hold the task's lease now; raise the reason it may not."""
    if row["home_node"] != node_id:
        raise NotHome(row["key"], row["home_node"])
    if row["status"] not in OPEN_STATUSES:
        raise Conflict(f"task {row['key']} is {row['status']}", field="task_id", code="task_closed")
    if row["unmet"] > 0:
        raise Conflict(f"task {row['key']} has dependencies that are not done", field="task_id", code="task_not_ready")
    live = lease_live(row, now_ms)
    if live and row["lease_holder"] != agent_id:
        raise Conflict(
            f"task {row['key']} is leased by {row['lease_holder']} until {row['lease_expires_at']}",
            field="task_id",
            code="lease_held",
        )
    return Grant(task_key=row["key"], extends=live)


def own_live_lease(row: sqlite3.Row, agent_id: str, now_ms: int) -> str | None:
    """The hash of the live lease `agent_id` holds on the task, or None."""
    if lease_live(row, now_ms) and row["lease_holder"] == agent_id:
        return str(row["lease_hash"])
    return None


def check_declare(row: sqlite3.Row, agent_id: str, changed: dict[str, Any], now_ms: int, at: str = "$") -> None:
    """409 `lease_held` when a declaration by someone other than the live lease holder would change the task's
    status or checkpoint: the holder's work is its own until it releases, completes or the lease lapses.
    Title and dependencies stay the planner's to change."""
    if not lease_live(row, now_ms) or row["lease_holder"] == agent_id:
        return
    for name in ("status", "checkpoint"):
        if name in changed:
            raise Conflict(
                f"task {row['key']} is leased by {row['lease_holder']} until {row['lease_expires_at']}:"
                f" only the holder may change its {name} now",
                field=f"{at}.{name}",
                code="lease_held",
            )


def check_release(row: sqlite3.Row, agent_id: str, now_ms: int) -> str:
    """The lease a release by `agent_id` ends; 409 unless it holds a live one."""
    lease = own_live_lease(row, agent_id, now_ms)
    if lease is not None:
        return lease
    if row["lease_holder"] == agent_id:
        raise Conflict(
            f"your lease on {row['key']} expired at {row['lease_expires_at']}", field="task_id", code="lease_expired"
        )
    raise Conflict(f"you hold no lease on {row['key']}", field="task_id", code="lease_not_held")


def check_token(row: sqlite3.Row, agent_id: str, now_ms: int, token: str | None, at: str = "$") -> str | None:
    """Fencing: the caller's live lease on the task (or None), which `token` must name.

    422 `lease_required` when the caller holds a live lease and names none; 409 `stale_lease` when the token is
    not the caller's live lease (it expired, was ended, or another grant replaced it): the work done under it
    may already be someone else's."""
    own = own_live_lease(row, agent_id, now_ms)
    if token is None:
        if own is not None:
            raise InvalidInput(
                f"you hold the live lease {own} on {row['key']}: name it in lease (the fencing token)",
                field=f"{at}.lease",
                code="lease_required",
            )
    elif token != own:
        raise Conflict(
            f"lease {token} is not your live lease on {row['key']}"
            + ("" if own is None else f" (that is {own})")
            + "; lease the task again before you change it",
            field=f"{at}.lease",
            code="stale_lease",
        )
    return own


def check_complete(row: sqlite3.Row, agent_id: str, now_ms: int, node_id: str) -> str | None:
    """The lease a completion by `agent_id` ends (None if it holds none); 409 while another agent holds one.

    Without a lease of its own, an agent completes only what it could lease: a task that is open and ready
    (`task_closed`, `task_not_ready` otherwise), or one already done (a no-op, or a checkpoint merge). The
    holder of a live lease may complete its task even if the planner has since added a dependency. Like a
    grant, this is decided by the task's home node (`node_id` is this node): another node's copy of the graph
    may not have a dependency's completion yet."""
    if lease_live(row, now_ms) and row["lease_holder"] != agent_id:
        raise Conflict(
            f"task {row['key']} is leased by {row['lease_holder']} until {row['lease_expires_at']}",
            field="task_id",
            code="lease_held",
        )
    own = own_live_lease(row, agent_id, now_ms)
    if own is None and row["home_node"] == node_id and row["status"] not in DONE_STATUSES:
        if row["status"] not in OPEN_STATUSES:
            raise Conflict(f"task {row['key']} is {row['status']}", field="task_id", code="task_closed")
        if row["unmet"] > 0:
            raise Conflict(
                f"task {row['key']} has dependencies that are not done", field="task_id", code="task_not_ready"
            )
    return own


# A forwarded lease request's id is kept this long: far beyond the few seconds a peer signature stays fresh.
REQUEST_MEMORY_MS = 24 * 3600 * 1000


def check_agent_home(conn: Conn, agent_id: str, peer_id: str, presented: str | None = None) -> None:
    """403 `not_agent_home` unless the agent's newest identity document names `peer_id` as its home node.

    A peer leases only for its own agents: the newest document of the one this node holds and the one the peer
    presented decides (`presented`: the home node of the presented document when it outranks the one held,
    docs/format-v3.md 3.8: its signature checked, its key allowed by the agent's key history), so a new agent can
    lease before its document has synced here, and an agent that moved cannot be leased for by its old home.
    """
    newest = leases_store.agent_home(conn, agent_id)
    if presented is not None:
        newest = (presented, 0)
    if newest is None or newest[0] != peer_id:
        known = "no agent document" if newest is None else f"an agent document naming {newest[0]} as home node"
        raise Forbidden(
            f"a peer may lease only for agents homed on it; this node knows {known} for {agent_id}",
            field="$.agent_id",
            code="not_agent_home",
        )


def remember_request_txn(conn: Conn, request_id: str, peer_id: str, now_ms: int) -> None:
    """Record a forwarded lease request's id (durably, before it is decided); 409 `request_replayed` if seen."""
    leases_store.forget_requests_txn(conn, now_ms - REQUEST_MEMORY_MS)
    if not leases_store.insert_request_txn(conn, request_id, peer_id, now_ms):
        raise Conflict(
            "this lease request was answered before: a replay is refused; send a new request id",
            field="$.request_id",
            code="request_replayed",
        )
