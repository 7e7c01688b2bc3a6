"""The task operations of a node, once: declarations, the ready set, leases, the graph (the bus: messaging.py).

REST (node/workflows/routes.py), MCP and the CLI parse and format; the work happens here. Every shared
write is a signed record appended through `projections.append` inside one write job.
"""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any, NamedTuple

import msgspec

from identity import canonical, keys, records
from identity.schema_v3 import space_of
from node.agents import refs as agent_refs
from node.errors import BBSError, Conflict, Forbidden, InvalidInput
from node.spaces import posts as posts_check
from node.spaces.sight import Viewer, kept_local
from node.spaces.store import sight_of
from node.store import agent_docs, idempotency, projections
from node.store.authority import Authority, authorize_txn
from node.store.conn import Conn
from node.store.db import Database
from node.store.sealing import SealedRecord, Sealing, sign_and_check
from node.workflows import forward, graph, leases, relay, scope, tasks, twins
from node.workflows.fence import LeaseFence
from node.workflows.store import events as event_store
from node.workflows.store import tasks as task_store
from sync.auth import NodeKeyRotatedOut, NodeSigner
from wire import unsigned
from wire.api import SignedSubmission
from wire.time import format_ms, parse_ms
from wire.workflows import (
    DeclareTask,
    FinishIn,
    Graph,
    GraphQuery,
    LeaseIn,
    PeerLeaseIn,
    PeerTaskEventIn,
    PeerTaskEventOut,
    ReadyList,
    TaskOut,
)

log = logging.getLogger("bbs.leases")
# Ready lists of up to this many tasks are read on the event loop (Database.read quick): rendering a page of
# 1,000 tasks takes several milliseconds of Python, which the SQL budget cannot stop.
QUICK_READY_PAGE = 100


def _finished_before(conn: Conn, agent_id: str, idem_key: str, operation: str, task_key: str) -> bool:
    """Whether this idempotency key already did this release or complete of this task (the request is a retry).

    409 `idempotency_key_reused` when the key did anything else (another operation, or another task).
    """
    done = idempotency.replayed(conn, agent_id, idem_key, operation, field=idempotency.HEADER)
    if done is None:
        return False
    used_on = event_store.event_task_key(conn, done)
    if used_on != task_key:
        raise Conflict(
            f"idempotency key already used for a {operation} of task {used_on}",
            field=idempotency.HEADER,
            code="idempotency_key_reused",
        )
    return True


def _present(decoded: Any, names: tuple[str, ...]) -> dict[str, Any]:
    return {n: getattr(decoded, n) for n in names if getattr(decoded, n) is not msgspec.UNSET}


def _check_in_space(conn: Conn, sealed: SealedRecord, where: str) -> str:
    """An agent's task event of a space: its author a writer there (`node.spaces.posts`: 404 `unknown_space`, 403
    `not_a_writer`); the scope it is stored with (`kept_local`: a space's task stays on this node for now)."""
    _, record_hash, decoded = sealed
    space = space_of(decoded)
    if space is not None:
        posts_check.check_posts_txn(conn, [posts_check.Post(record_hash, decoded.author_id, space, [], where)])
    return kept_local(space)


def _agent_document(document: dict[str, Any], agent_id: str) -> tuple[str, Any]:
    """A presented agent identity document, verified: (its address, its decoded record); 422 otherwise."""
    try:
        address, decoded = records.check(document, v3="signing_key" in document)  # a rotated key names itself
    except records.RecordError as exc:
        raise InvalidInput(f"agent_document: {exc}", field="$.agent_document", code="invalid_record") from None
    if decoded.kind != "agent" or decoded.author_id != agent_id:
        raise InvalidInput(
            "agent_document must be the identity document of agent_id", field="$.agent_document", code="wrong_record"
        )
    return address, decoded


async def resolve_agent(db: Database, agent_id: str, given: str | None) -> None:
    """A lease's `agent` field, when given, must name the caller (its did or its local name)."""
    if given is None or given == agent_id:
        return
    if await db.read(lambda c: agent_refs.resolve(c, given, "$.agent"), quick=True) != agent_id:
        raise Forbidden("an agent can only lease tasks for itself", field="$.agent", code="lease_for_other")


class TaskReads:
    """The task graph's reads, each as its viewer may see it (docs/spaces.md, "Read paths"): a task, the ready
    set, the graph."""

    db: Database
    now_ms: Callable[[], int]

    async def task(self, ref: str, viewer: Viewer, space: str | None = None) -> TaskOut:
        """One task by local id or key (of `space`; the public one without it) as `viewer` may see it
        (`node.spaces.store.sight_of`: a task of a space it does not read is 404 `task_not_found`; required, so no
        caller forgets it), its lease checked against the clock."""
        now = self.now_ms()
        return await self.db.read(
            lambda c: tasks.task_out(c, tasks.task_row(c, ref, sight_of(c, viewer), space), now), quick=True
        )

    async def task_at(self, scoped_key: str) -> TaskOut:
        """The task of a scoped key (node/workflows/scope.py) this node has just written or decided."""
        now = self.now_ms()
        return await self.db.read(lambda c: tasks.task_out(c, tasks.task_at(c, scoped_key), now), quick=True)

    async def ready(
        self, viewer: Viewer, limit: int = 100, after: int | None = None, space: str | None = None
    ) -> ReadyList:
        """Exactly the tasks that can start now (every dependency done or completed, no live lease) that `viewer`
        sees, of `space` only when given."""
        now = self.now_ms()
        return await self.db.read(
            lambda c: tasks.ready(c, now, limit, after, sight_of(c, viewer), space), quick=limit <= QUICK_READY_PAGE
        )

    async def graph(self, q: GraphQuery, viewer: Viewer) -> Graph:
        """The task graph as nodes and `precedes` edges: the tasks `viewer` sees (of `q.space` only when given)."""
        now = self.now_ms()
        return await self.db.read(lambda c: graph.build(c, now, q.limit, sight_of(c, viewer), q.space))


class Workflows(TaskReads):
    """Task operations on one node: declarations, leases and the graph (built once, by `Node`)."""

    def __init__(
        self,
        db: Database,
        sealing: Sealing,
        key: keys.SigningKey | NodeSigner,
        now_ms: Callable[[], int],
        fence_path: Path,
    ) -> None:
        self.db = db
        self.sealing = sealing
        # the node's keys: the newest signs the leases it grants as a task's home node; requests to a home node
        # are signed by the one that node holds (sync/auth.py NodeSigner)
        self.signer = key if isinstance(key, NodeSigner) else NodeSigner.single(key)
        self.now_ms = now_ms
        self.fence = LeaseFence(fence_path, self.signer.node_id)  # what this node granted, kept outside its database

    @property
    def node_id(self) -> str:
        return self.signer.node_id

    @property
    def key(self) -> keys.SigningKey:
        """The node key that signs this node's records now (its newest); 409 `node_key_rotated_out` when the
        database was restored from before a rotation of it (node/store/key_fence.py)."""
        try:
            return self.signer.current
        except NodeKeyRotatedOut as exc:
            raise Conflict(exc.detail, code="node_key_rotated_out") from None

    # ---- tasks ----------------------------------------------------------------------------------------

    async def declare(self, agent_id: str, body: DeclareTask | SignedSubmission) -> tuple[TaskOut, bool]:
        """Create or update a task by key. Returns (task, created). Appends nothing when nothing changes."""
        signed: SealedRecord | None = None
        signer: keys.SigningKey | None = None
        token: str | None = None
        if isinstance(body, SignedSubmission):
            signed = self.sealing.check_signed(body.record, "task_event", agent_id)
            decoded = signed[2]
            if decoded.event != "declare":
                raise InvalidInput("POST /tasks takes a declare event", field="$.record.event", code="wrong_event")
            if decoded.node_id != self.node_id:
                raise InvalidInput(
                    "a declaration names the node that accepts it: set node_id to this node's id",
                    field="$.record.node_id",
                    code="wrong_node",
                )
            fields = {"task_key": decoded.task_key}
            if space_of(decoded) is not None:
                fields["space"] = space_of(decoded)
            fields.update(_present(decoded, ("title", "depends_on", "status", "checkpoint")))
        else:
            signer = await self.sealing.signer(agent_id)
            token = body.lease
            try:
                fields = unsigned.declared_fields(body)
            except canonical.CanonicalError as exc:
                raise InvalidInput(str(exc), field=exc.field) from None
        home = await self.db.read(lambda c: relay.declared_elsewhere(c, fields, self.node_id))
        if home is not None:  # another node's task: its home node decides a status or checkpoint change
            if signed is None:
                assert signer is not None
                changes = {k: v for k, v in fields.items() if k != "task_key"} | {"node_id": self.node_id}
                signed = await relay.sign_event(self.db, signer, fields["task_key"], "declare", changes, self.now_ms())
            await self._at_home(home, signed, agent_id, token, None, signer is not None)
            return await self.task_at(scope.scoped(fields.get("space"), fields["task_key"])), False
        if not set(fields) <= relay.LOCAL_FIELDS:
            await self.fenced()
        created = await self.db.write(
            lambda c: declare_task_txn(
                c, agent_id, fields, signed, signer, self.node_id, self.now_ms, token, authority=self.sealing.authority
            )
        )
        return await self.task_at(scope.scoped(fields.get("space"), fields["task_key"])), created

    # ---- leases ---------------------------------------------------------------------------------------

    async def lease(self, agent_id: str, ref: str, body: LeaseIn, space: str | None = None) -> tuple[TaskOut, bool]:
        """Grant or extend the caller's lease for `body.seconds` (a key names the task of `space`). Returns (task,
        newly granted).

        Only the task's home node decides; the check and the grant record share one write transaction.
        On another node the request is forwarded to the home node, or refused while it cannot be reached.
        """
        await resolve_agent(self.db, agent_id, body.agent)
        try:
            try:
                key, granted, _ = await self.grant(agent_id, ref, body.seconds, space)
                how = "granted" if granted else "extended"
            except leases.NotHome as exc:
                key, granted = await self._lease_elsewhere(exc, agent_id, body.seconds)
                how = f"{'granted' if granted else 'extended'} by home node {exc.home_node}"
        except BBSError as exc:
            log.info("lease refused: task %s for %s: %s", ref, agent_id, exc.code)
            raise
        log.info("lease %s: task %s to %s for %d s", how, key, agent_id, body.seconds)
        return await self.task_at(key), granted

    async def grant(
        self, agent_id: str, ref: str, seconds: int, space: str | None = None
    ) -> tuple[str, bool, dict[str, Any]]:
        """As the home node: grant or extend `agent_id`'s lease on the task `ref` names (a key: of `space`). Returns
        (task's scoped key, newly granted, grant record).

        Raises leases.NotHome when another node is the task's lease authority, and 503
        `lease_authority_restored` while a detected restore may hide a grant (node/workflows/fence.py).
        """
        await self.fenced(check=False)
        key, node_id = self.key, self.node_id
        return await self.db.write(
            lambda c: grant_lease_txn(c, ref, agent_id, seconds, key, self.now_ms(), self.fence, node_id, space)
        )

    async def grant_for_peer(self, peer_id: str, body: PeerLeaseIn) -> tuple[str, bool, dict[str, Any]]:
        """As the home node, decide a lease request a peer forwarded. Returns (task key, newly granted, grant).

        The request id is remembered (committed) before the decision, so a replay is refused even if the first
        request was refused, and even after a restart; the agent must be homed on the asking peer."""
        now, authority = self.now_ms(), self.sealing.authority
        presented = None if body.agent_document is None else _agent_document(body.agent_document, body.agent_id)
        await self.db.write(lambda c: admit_peer_request_txn(c, authority, peer_id, body, presented, now))
        return await self.grant(body.agent_id, body.task_key, body.seconds)

    async def fenced(self, *, check: bool = True) -> None:
        """Load the lease fence (once per process); with `check`, 503 `lease_authority_restored` while a
        detected restore may hide a grant: a completion or status change decided now could contradict it."""
        if not self.fence.loaded:
            await self.db.write(lambda c: self.fence.load_txn(c, self.now_ms()))
        if check:
            # sync may have brought every grant back, or the wait ran out; with several processes (PostgreSQL),
            # another may have found a loss, or the database's history may have changed: the node-wide check
            if self.fence.hold_until_ms or self.fence.multi:
                await self.db.write(lambda c: self.fence.settle_txn(c, self.now_ms()))
            self.fence.check(self.now_ms())

    async def _lease_elsewhere(self, exc: leases.NotHome, agent_id: str, seconds: int) -> tuple[str, bool]:
        """Ask the home node for the lease; store the grant it signed, so this node's ready set excludes the task."""
        record, granted = await forward.request_lease(
            self.db, self.signer, exc.home_node, exc.task_key, agent_id, seconds
        )
        try:
            record_hash, decoded = records.check(record, v3="signing_key" in record)  # a rotated node key names itself
        except records.RecordError as error:
            raise leases.LeaseAuthorityUnreachable(
                f"the home node {exc.home_node} answered with an invalid grant: {error}", field="task_id"
            ) from None
        if not (
            decoded.kind == "task_event"
            and decoded.event == "lease"
            and decoded.author_id == exc.home_node
            and decoded.task_key == exc.task_key
            and decoded.holder == agent_id
        ):
            raise leases.LeaseAuthorityUnreachable(
                f"the home node {exc.home_node} answered with a record that is not this lease", field="task_id"
            )
        now = self.now_ms()

        def store_grant_txn(c: Conn) -> None:
            # the grant's key may sign for the home node (docs/format-v3.md 3.5: vouched for after a rotation)
            authorize_txn(c, self.sealing.authority, [(record, record_hash, "$")])
            projections.append(c, record, record_hash, decoded, origin=exc.home_node, now_ms=now)

        await self.db.write(store_grant_txn)
        return exc.task_key, granted

    async def release(
        self,
        agent_id: str,
        ref: str,
        body: FinishIn | SignedSubmission,
        idempotency_key: str | None = None,
        space: str | None = None,
    ) -> TaskOut:
        """End the caller's live lease early, optionally merging a checkpoint; the task is ready again.

        A retry with the same idempotency key returns the task without releasing again."""
        return await self._finish("release", agent_id, (ref, space), body, idempotency_key)

    async def complete(
        self,
        agent_id: str,
        ref: str,
        body: FinishIn | SignedSubmission,
        idempotency_key: str | None = None,
        space: str | None = None,
    ) -> TaskOut:
        """Mark the task done (ending the caller's lease), optionally merging a final checkpoint.

        A retry with the same idempotency key returns the task without completing again."""
        return await self._finish("complete", agent_id, (ref, space), body, idempotency_key)

    async def _finish(
        self, event: str, agent_id: str, ref: Ref, body: FinishIn | SignedSubmission, idem: str | None
    ) -> TaskOut:
        try:
            task = await self._finish_event(event, agent_id, ref, body, idem)
        except BBSError as exc:
            log.info("%s refused: task %s by %s: %s", event, ref, agent_id, exc.code)
            raise
        log.info("%s: task %s by %s", event, task.key, agent_id)
        return task

    async def _finish_event(
        self, event: str, agent_id: str, ref: Ref, body: FinishIn | SignedSubmission, idem: str | None
    ) -> TaskOut:
        finish: Finish
        if isinstance(body, SignedSubmission):
            signed = self.sealing.check_signed(body.record, "task_event", agent_id)
            if signed[2].event != event:
                raise InvalidInput(f"this endpoint takes a {event} event", field="$.record.event", code="wrong_event")
            finish = SignedFinish(signed)
        else:
            signer = await self.sealing.signer(agent_id)
            checkpoint: dict[str, Any] | None = None
            if body.checkpoint is not None:
                try:
                    checkpoint = canonical.normalize_value(body.checkpoint, "$.checkpoint")
                except canonical.CanonicalError as exc:
                    raise InvalidInput(str(exc), field=exc.field) from None
            finish = NodeSignedFinish(signer, checkpoint, body.lease)
        elsewhere = await self.db.read(lambda c: relay.homed_elsewhere(c, *ref, agent_id, self.node_id))
        if elsewhere is not None:  # another node's task: only its home node knows every grant
            return await self._finish_at_home(event, agent_id, *elsewhere, finish, idem)
        if event == "complete":
            await self.fenced()
        key = await self.db.write(
            lambda c: finish_task_txn(
                c, event, agent_id, ref, idem, finish, self.node_id, self.now_ms(), authority=self.sealing.authority
            )
        )
        return await self.task_at(key)

    async def _finish_at_home(
        self, event: str, agent_id: str, key: str, home: str, finish: Finish, idem: str | None
    ) -> TaskOut:
        """A release or completion of a task homed on another node: decided there, then stored here."""
        operation = f"task_{event}"
        if idem is not None and await self.db.read(lambda c: _finished_before(c, agent_id, idem, operation, key)):
            return await self.task_at(key)
        if isinstance(finish, SignedFinish):
            sealed = finish.sealed
            if sealed[2].task_key != key:
                raise InvalidInput("the record's task_key is not the task in the path", field="$.record.task_key")
        else:
            patch = {} if finish.checkpoint is None else {"checkpoint": finish.checkpoint}
            fields = unsigned.finish_fields(patch, finish.token)
            sealed = await relay.sign_event(self.db, finish.signer, key, event, fields, self.now_ms())
        await self._at_home(home, sealed, agent_id, None, None if idem is None else (idem, operation), True)
        return await self.task_at(key)

    async def _at_home(
        self,
        home: str,
        sealed: SealedRecord,
        agent_id: str,
        token: str | None,
        idem: tuple[str, str] | None,
        signed_here: bool,
    ) -> None:
        """Have the home node decide an event; store it here once the home node has stored it."""
        if await relay.decide_at_home(self.db, self.signer, home, sealed, token, signed_here):
            now = self.now_ms()
            await self.db.write(lambda c: relay.store_txn(c, sealed, agent_id, idem, now))

    async def notice_twins(self) -> int:
        """Tell the lease holders and the declarer of each task of this node that became a later twin (its home
        moved to an earlier declaration: node/workflows/twins.py), once; how many notices were signed."""
        told = 0
        for key in await self.db.read(twins.pending, quick=True):
            job = partial(twins.notice_txn, key=key, node_key=self.key, now_ms=self.now_ms(), node_id=self.node_id)
            sealed = await self.db.write(job)
            if sealed is not None:
                told += 1
                log.warning("task %s became a later twin here: told %s", key, ", ".join(sealed[2].directed_to))
        return told

    async def accept_forwarded(self, peer_id: str, body: PeerTaskEventIn) -> PeerTaskEventOut:
        """As the home node: decide a task event a peer sent (signed by its agent) as this node decides its own."""
        author = body.record.get("author_id")
        if not isinstance(author, str):
            raise InvalidInput("the record names no author", field="$.record.author_id", code="record_malformed")
        if "space" in body.record:  # a space's records do not leave the node until spaces part 2 (docs/spaces.md)
            raise InvalidInput(
                "a task event of a space is not taken from peers here yet", field="$.record.space", code="too_new"
            )
        sealed = self.sealing.check_signed(body.record, "task_event", author)
        if sealed[2].event != "release":
            await self.fenced()
        now = self.now_ms()
        authority = self.sealing.authority
        stored = await self.db.write(
            lambda c: accept_event_txn(c, peer_id, sealed, body.lease, self.node_id, now, authority=authority)
        )
        return PeerTaskEventOut(task=await self.task_at(sealed[2].task_key), stored=stored)


async def check_fence(workflows: Workflows) -> None:
    """The periodic node-wide check of the lease fence on PostgreSQL (node/web/background.py): notice a restore or a
    change of the database's history, check in after one, and vouch for processes joining the node, even while this
    process grants nothing. Nothing on SQLite."""
    if workflows.db.pg_url is None:
        return
    await workflows.fenced(check=False)
    await workflows.db.write(lambda c: workflows.fence.settle_txn(c, workflows.now_ms()))


# ---- transaction bodies -------------------------------------------------------------------------------------


def admit_peer_request_txn(
    conn: Conn, authority: Authority, peer_id: str, body: PeerLeaseIn, presented: tuple[str, Any] | None, now_ms: int
) -> None:
    """Admit a lease request `peer_id` forwarded: the agent must be homed on that peer (by the document held here,
    or the presented one when it outranks it), and the request id is remembered before the decision."""
    home = None
    if presented is not None and body.agent_document is not None:
        address, decoded = presented
        # its key may sign for the agent (a thief's copy by a revoked key is 422 not_current_key), and it counts
        # only if it outranks the document held here by the agent's key history
        authorize_txn(conn, authority, [(body.agent_document, address, "$.agent_document")])
        if agent_docs.outranks_txn(conn, decoded, address):
            home = decoded.home_node
    leases.check_agent_home(conn, body.agent_id, peer_id, home)
    leases.remember_request_txn(conn, body.request_id, peer_id, now_ms)


def declare_task_txn(
    conn: Conn,
    agent_id: str,
    fields: dict[str, Any],
    signed: SealedRecord | None,
    signer: keys.SigningKey | None,
    node_id: str,
    now_ms: Callable[[], int],
    token: str | None = None,
    fenced: bool = False,
    *,
    authority: Authority,
) -> bool:
    """Append a declare event if it changes the task (the agent's signed one, or one signed here by `signer`).
    True when it created the task. `token`: the fencing token of a node-signed declaration (its `lease`), or of
    a signed one a peer forwarded (`fenced`)."""
    key, space = fields["task_key"], fields.get("space")
    skey = scope.scoped(space, key)  # the task's identity: (space, key)
    at = "$.record" if signed is not None else "$"
    if space is not None:  # a writer of the space declares its tasks (nothing read of it otherwise)
        posts_check.check_writer_txn(conn, space, agent_id, at)
    row, changed = tasks.plan_declare(conn, fields, at)
    if row is not None and not changed:
        return False
    if "depends_on" in changed:
        tasks.check_deps_in_space(conn, skey, changed["depends_on"], sight_of(conn, agent_id), at)
    now = now_ms()
    if row is None and token is not None:
        raise Conflict(f"task {key} has no lease: lease {token} is stale", field="$.lease", code="stale_lease")
    if row is not None:
        leases.check_declare(row, agent_id, changed, now, at)
        if (signed is None or fenced) and (token is not None or "status" in changed or "checkpoint" in changed):
            leases.check_token(row, agent_id, now, token)
        if signed is not None:
            tasks.check_after_newest(conn, skey, signed[2].created_at)
    if signed is None:
        assert signer is not None
        created_at = format_ms(tasks.next_event_ms(conn, skey, now))
        signed = sign_and_check(unsigned.unsigned_declare(key, agent_id, created_at, node_id, changed, space), signer)
    authorize_txn(conn, authority, [(signed[0], signed[1], at)])  # its key may sign for its author (format-v3 3.5)
    projections.append(conn, *signed, origin="local", now_ms=now, scope=_check_in_space(conn, signed, at))
    return row is None


def grant_lease_txn(
    conn: Conn,
    ref: str,
    agent_id: str,
    seconds: int,
    node_key: keys.SigningKey,
    now: int,
    fence: LeaseFence,
    node_id: str | None = None,
    space: str | None = None,
) -> tuple[str, bool, dict[str, Any]]:
    """As the home node, decide and append a lease grant signed by `node_key`: (task's scoped key, newly granted,
    record). `node_id`: the node's, when `node_key` is not its first key (after a rotation: named in
    `signing_key`). A key `ref` names the task of `space`; a task of a space is leased to its writers only.

    The grant's expiry goes into the fence file before the transaction commits (node/workflows/fence.py)."""
    node_id = node_id or node_key.did
    row = tasks.task_row(conn, ref, sight_of(conn, agent_id), space)
    if row["space"] is not None:
        posts_check.check_holder_txn(conn, row["space"], agent_id)
    decision = leases.decide_grant(row, node_id, agent_id, now)
    fence.settle_txn(conn, now)
    fence.check(now)
    start = tasks.next_event_ms(conn, decision.task_key, now)
    # the lease runs by this node's clock; `start` may sit a little later (see next_event_ms)
    expires_ms = max(now + seconds * 1000, start + 1)
    task_space, key = scope.split(decision.task_key)  # the grant follows its task's space
    draft = unsigned.unsigned_task_event(
        key, node_id, format_ms(start), "lease", task_space, holder=agent_id, expires_at=format_ms(expires_ms)
    )
    rec, rec_hash, dec = sign_and_check(draft, node_key)
    fence.advance(parse_ms(dec.expires_at), conn)
    projections.append(conn, rec, rec_hash, dec, origin="local", now_ms=now, scope=kept_local(task_space))
    return decision.task_key, not decision.extends, rec


class SignedFinish(NamedTuple):
    """A release or complete event its agent signed."""

    sealed: SealedRecord


class NodeSignedFinish(NamedTuple):
    """A release or complete to sign here, with the checkpoint to merge (normalised) if any."""

    signer: keys.SigningKey
    checkpoint: dict[str, Any] | None
    token: str | None = None  # the fencing token the caller presented (FinishIn.lease)


Finish = SignedFinish | NodeSignedFinish
Ref = tuple[str, str | None]  # a path's task reference and the space a key names a task of (None: public)


def finish_task_txn(
    conn: Conn,
    event: str,
    agent_id: str,
    ref: str | Ref,
    idem: str | None,
    finish: Finish,
    node_id: str,
    now: int,
    *,
    authority: Authority,
) -> str:
    """Append the release or complete event of the caller's task (`event`), unless it is a retry or would change
    nothing; the task's scoped key. `ref`: a path's reference (and the space a key names a task of), or a scoped
    key already decided (a forwarded event, public)."""
    path_ref, space = (ref, None) if isinstance(ref, str) else ref
    row = tasks.task_row(conn, path_ref, sight_of(conn, agent_id), space)
    key: str = row["key"]
    if isinstance(finish, SignedFinish):
        _, record_hash, decoded = finish.sealed
        if _scoped_of(decoded) == key and event_store.record_stored(conn, record_hash):
            return key  # the same signed record again (a retry): it was applied once
    if idem is not None and _finished_before(conn, agent_id, idem, f"task_{event}", key):
        return key
    if isinstance(finish, SignedFinish) and _scoped_of(finish.sealed[2]) != key:
        _check_same_task(finish.sealed[2], row)
    if event == "release":
        lease: str | None = leases.check_release(row, agent_id, now)
    else:
        lease = leases.check_complete(row, agent_id, now, node_id)
    if isinstance(finish, NodeSignedFinish):
        leases.check_token(row, agent_id, now, finish.token)
    if isinstance(finish, SignedFinish):
        sealed = _signed_finish(conn, event, row, lease, finish.sealed)
    else:
        sealed = _node_signed_finish(conn, event, agent_id, row, lease, finish, now)
    if sealed is None:
        return key
    where = "$.record" if isinstance(finish, SignedFinish) else "$"
    authorize_txn(conn, authority, [(sealed[0], sealed[1], where)])  # its key may sign for its author (format-v3 3.5)
    projections.append(conn, *sealed, origin="local", now_ms=now, scope=_check_in_space(conn, sealed, where))
    if idem is not None:
        idempotency.remember(conn, agent_id, idem, f"task_{event}", sealed[1], now)
    return key


def _scoped_of(decoded: Any) -> str:
    """The scoped key of the task a decoded task event is of (node/workflows/scope.py)."""
    return scope.scoped(space_of(decoded), decoded.task_key)


def _check_same_task(decoded: Any, row: sqlite3.Row) -> None:
    """Refuse a signed event that is not of the task in the path: 409 `wrong_space` when it names the task's key in
    another space (every event of a task is in the task's space), 422 otherwise."""
    if decoded.task_key == scope.key_of(row["key"]):
        raise Conflict(
            "every event of a task is in the task's space: sign it with the task's space",
            field="$.record.space",
            code="wrong_space",
        )
    raise InvalidInput("the record's task_key is not the task in the path", field="$.record.task_key")


def _signed_finish(
    conn: Conn, event: str, row: sqlite3.Row, lease: str | None, sealed: SealedRecord
) -> SealedRecord | None:
    """The agent's signed event checked against the task (None: appending it would change nothing)."""
    key, decoded = row["key"], sealed[2]
    tasks.check_after_newest(conn, key, decoded.created_at)
    if decoded.lease is not msgspec.UNSET and decoded.lease != lease:
        raise Conflict(
            "the record's lease is not your live lease on this task (it expired, ended, or was replaced)",
            field="$.record.lease",
            code="stale_lease",
        )
    if decoded.lease is msgspec.UNSET and lease is not None:
        # unnamed, the lease would outlive the release or completion (the fold ends only the one named)
        raise InvalidInput(
            f"you hold the live lease {lease} on this task: a {event} names it",
            field="$.record.lease",
            code="lease_required",
        )
    merges: dict[str, Any] = {}
    if decoded.checkpoint is not msgspec.UNSET:
        fields = {"task_key": decoded.task_key, "space": row["space"], "checkpoint": decoded.checkpoint}
        _, merges = tasks.plan_declare(conn, fields, "$.record")
    if event == "complete" and tasks.is_done(row) and lease is None and not merges:
        return None  # as on the node-signed path: appending would change nothing
    return sealed


def _node_signed_finish(
    conn: Conn,
    event: str,
    agent_id: str,
    row: sqlite3.Row,
    lease: str | None,
    finish: NodeSignedFinish,
    now: int,
) -> SealedRecord | None:
    """The event signed here (None: already done, nothing held, nothing to merge: appending would change nothing)."""
    key = row["key"]
    space, plain = scope.split(key)
    changed: dict[str, Any] = {}
    if finish.checkpoint is not None:
        _, changed = tasks.plan_declare(conn, {"task_key": plain, "space": space, "checkpoint": finish.checkpoint})
    fields = unsigned.finish_fields(changed, lease)
    if event == "complete" and tasks.is_done(row) and not fields:
        return None
    created_at = format_ms(tasks.next_event_ms(conn, key, now))
    draft = unsigned.unsigned_task_event(plain, agent_id, created_at, event, space, **fields)
    return sign_and_check(draft, finish.signer)


def accept_event_txn(
    conn: Conn,
    peer_id: str,
    sealed: SealedRecord,
    token: str | None,
    node_id: str,
    now: int,
    *,
    authority: Authority,
) -> bool:
    """As the home node, decide a task event forwarded by `peer_id` as if its agent had sent it here; whether it
    was stored (False: a retry of a stored event, or a change that changes nothing)."""
    decoded = sealed[2]
    key = decoded.task_key
    if task_store.home_node(conn, key) != node_id:
        raise leases.NotLeaseAuthority(
            f"this node is not the home node of task {key}", field="$.record.task_key", code="not_home_node"
        )
    if event_store.record_stored(conn, sealed[1]):
        return False
    if decoded.event == "declare":
        if decoded.node_id != peer_id:
            raise InvalidInput(
                "a forwarded declaration names the node that forwards it", field="$.record.node_id", code="wrong_node"
            )
        fields = {"task_key": key} | _present(decoded, ("title", "depends_on", "status", "checkpoint"))
        declare_task_txn(
            conn, decoded.author_id, fields, sealed, None, node_id, lambda: now, token, fenced=True, authority=authority
        )
    elif decoded.event in ("release", "complete"):
        finish_task_txn(
            conn, decoded.event, decoded.author_id, key, None, SignedFinish(sealed), node_id, now, authority=authority
        )
    else:
        raise InvalidInput(
            "only declare, release and complete events are sent to a home node",
            field="$.record.event",
            code="wrong_event",
        )
    return event_store.record_stored(conn, sealed[1])
