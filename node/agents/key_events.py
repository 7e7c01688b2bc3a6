"""Key events over REST: a client's signed `key_event` (and its vouch pages), and the rotation of a node-kept key.

Both are decided by the writer's authority cache (`node.store.authority`) with the functions sync ingest uses
(`Authority.judge_event`, `Authority.judge_page`): one rule decides which key may sign for an author, whoever
brought the record. Unlike a peer's, a client's record never waits (docs/format-v3.md 7.1): a key event whose
`prior` is not held is refused (`unknown_prior`). A stored key event re-checks, in its transaction, the peers'
records waiting for it (`node.federation.store.recheck_waiting_txn`), exactly as one that arrived by sync.

A node-kept agent's rotation (`bbs agent rotate-signing-key`, `POST /v1/agents/{agent_id}/signing-key`): the node
makes a new key, signs a `rotate` event with the current key, vouching for every record of the agent the log holds
signed by that key (with its vouch pages), stores it, and keeps the new key's seed in place of the old one; from
then on the node signs the agent's records with the new key, named in `signing_key` (docs/decisions.md, record 55).
The old key is written to the key fence (node/store/key_fence.py) before the rotation commits, so a database
restored from before the rotation signs nothing with it (409 `signing_key_rotated_out`, record 60).
"""

from __future__ import annotations

import asyncio
import bisect
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

from identity import canonical, keys, records, vouching
from node.agents import recovery_file, store
from node.agents import refs as agent_refs
from node.agents.service import read_key_history
from node.errors import Conflict, Forbidden, InvalidInput, NotFound
from node.federation.store import holds_key_event, recheck_waiting_txn, settle_authority_txn, store_epoch
from node.store import equivocation, projections, submission, void, waiting
from node.store.authority import (
    LOSING_BRANCH,
    Authority,
    author_deps,
    event_dep,
    judge_event_txn,
    pages_dep,
    versions_signed_by,
)
from node.store.conn import Conn, ConnectionLost
from node.store.db import Database
from node.store.key_fence import FenceNotDurable, KeyFence
from node.store.sealing import Sealing, record_error, sign_and_check_body
from sync.store import Verified
from wire.api import (
    KeyEventIn,
    KeyEventOut,
    KeyHistory,
    RotatedKey,
    SignedVersions,
    SignedVersionsQuery,
    VoidRecord,
    VoidRecordPage,
    VoidRecordsQuery,
)
from wire.time import format_ms

log = logging.getLogger("bbs.node")

KEY_EVENT = "key_event"
VOUCH_PAGE = "vouch_page"


async def put_back_unless_committed(
    db: Database, fence: KeyFence, fenced: list[dict[str, str]], exc: BaseException
) -> None:
    """After a rotation's write job failed (`exc`) with its fence entry written (`fenced`, empty when the job did not
    get that far): take the entry out when the rotation surely did not commit, mark it committed when it did.

    Whether it did is asked of the database. Not when the answer cannot be trusted: a cancelled wait says nothing of
    the job, which runs on, and a connection lost on PostgreSQL may have been lost during a COMMIT the server
    finishes after a read made now. The entry then stays unmarked, and `NodeKeys.settle` (a start, or every
    30 s while serving) marks it once its event is held or forgets it a minute on if the event is not: until
    then the old key is refused, the safe side of the two. Never raises: the caller re-raises `exc`."""
    if not fenced:
        return
    entry = fenced[0]
    if isinstance(exc, asyncio.CancelledError | ConnectionLost):
        log.warning("key fence: rotation %s may have committed (%r); its entry stays unsettled", entry["event"], exc)
        return
    try:
        held = await db.read(lambda conn: holds_key_event(conn, entry["identity"], entry["event"]))
        await asyncio.to_thread(fence.committed if held else fence.put_back, entry)
    except FenceNotDurable as failed:
        log.warning("key fence: rotation %s settled, but %s", entry["event"], failed)
    except Exception as failed:
        log.warning("key fence: rotation %s left unsettled (%r)", entry["event"], failed)


def kept_rotations(conn: Conn, authority: Authority, node_id: str, node_key: str) -> list[tuple[str, str, str, str]]:
    """The rotations and recoveries in the key histories of the identities whose key this node keeps (the node,
    signing with `node_key` now, and node-kept agents) that lead to the key it keeps, as (identity, key taken out,
    key installed, key event): what the key fence of each process should list, wherever they were made
    (`KeyFence.learn`, record 92). An event after the kept key's (a thief's rotation by a stolen key) is not one:
    fencing the key it took out would refuse the recovery built on it. Read in a write transaction (the authority
    cache is the writer's)."""
    authority.ensure_txn(conn)
    kept = {node_id: node_key} | {
        agent_id: keys.SigningKey.from_seed(seed).did for agent_id, seed in store.kept_with_key_events(conn)
    }
    found = []
    for identity, key in kept.items():
        history = authority.history(identity)
        at = {event: place for place, event in enumerate(history.chain)}
        installed_at = max((at[e] for e in history.chain if history.states[e].key == key), default=-1)
        for retired, event in history.removed_by.items():
            installed = history.states[event].key
            if installed is not None and at[event] <= installed_at:
                found.append((identity, retired, installed, event))
    return found


def submit_txn(
    conn: Conn, authority: Authority, event: Verified, pages: list[Verified], now_ms: int
) -> tuple[bool, int]:
    """Store a submitted key event (unless held) and its vouch pages, decided as sync ingest decides them, then
    re-check the waiting records they resolve. Returns (event new here, pages stored). Raises 422 on a refusal: the
    cache may then hold an event the rollback removed from the log, which the next job that needs the cache notices
    by the count (`Authority.ensure_txn`), and the caller drops the cache too."""
    authority.ensure_txn(conn)
    author = str(event.record["author_id"])
    new = not authority.holds_event(event.hash, author)
    stored: list[Verified] = []
    resolved: list[waiting.Dep] = []
    if new:
        verdict, reason = judge_event_txn(conn, authority, event.hash, event.record, now_ms)
        prior = event.record.get("prior")
        if verdict == "waiting" and not equivocation.refused(conn, [str(prior)]):
            raise InvalidInput(
                f"the key event's prior {prior} is not held here; submit the events before it first",
                field="$.record.prior",
                code="unknown_prior",
            )
        if reason == LOSING_BRANCH:
            raise Conflict(
                "this key event is allowed but would not be kept: the chain and a better event at its place are held"
                " (docs/format-v3.md 3.4); sign after the chain's head, or with a better role (the recovery key)",
                field="$.record.prior",
                code=LOSING_BRANCH,
            )
        if verdict != "valid":
            raise InvalidInput(
                f"this key event may never count: {reason or 'prior_refused'} (docs/format-v3.md 3.3)",
                field="$.record",
                code="unauthorized_key_event",
            )
        authority.add_event(event.hash, event.record)
        waiting.forget_void_txn(conn, author)
        resolved += [event_dep(event.hash), author_deps(author)]
        stored.append(event)
    for i, page in enumerate(pages):
        if page.record["event"] != event.hash:
            raise InvalidInput("a page of another key event", field=f"$.pages[{i}].event", code="page_not_of_event")
        if authority.holds_page(page.hash) or any(page.hash == s.hash for s in stored):
            continue
        verdict, _ = authority.judge_page(page.hash, page.record)
        if verdict != "valid":
            raise InvalidInput(
                "the page is not signed by the event's signer or its proof does not verify against the event's vouch",
                field=f"$.pages[{i}]",
                code="bad_vouch_page",
            )
        authority.add_page(page.hash, page.record)
        resolved.append(pages_dep(event.hash, str(page.record["subject"])))
        stored.append(page)
    incoming = [projections.Incoming(v.record, v.hash, v.decoded, "federation", v.body) for v in stored]
    projections.append_many(conn, incoming, origin="local", now_ms=now_ms)
    waiting.remove_versions_txn(conn, [v.version for v in stored])  # a copy a peer sent is decided with it
    if resolved:
        recheck_waiting_txn(authority, tuple(resolved), 0, now_ms, conn)
    if stored:  # the author's records already in the log may change verdict (docs/format-v3.md 7.6)
        settle_authority_txn(conn, authority, {author}, now_ms)
    return new, len(stored) - int(new)


def rotation_records(
    author: str, current: keys.SigningKey, new: keys.SigningKey, seq: int, prior: str | None, versions: list[str]
) -> tuple[Verified, list[Verified]]:
    """A `rotate` event of `author` signed by `current`, installing `new` and vouching for `versions` (the
    current key's records), and its vouch pages: each signed and checked as any receiving node checks it."""
    return key_event_records(author, current, "rotate", seq, prior, current.did, versions, key=new.did)


def key_event_records(
    author: str,
    signer: keys.SigningKey,
    kind: str,
    seq: int,
    prior: str | None,
    subject: str | None,
    versions: list[str],
    *,
    key: str | None,
    recovery: str | None = None,
) -> tuple[Verified, list[Verified]]:
    """A key event `kind` (rotate, revoke, recover) of `author` signed by `signer`, installing `key` (and setting
    `recovery` when given), whose vouch for `subject` (the key it takes authority from; None: the state has no
    key, no vouch) names `versions`; and its vouch pages, signed by `signer`. Each is signed and checked as any
    receiving node checks it."""
    vouches = [] if subject is None else [vouching.vouch(subject, versions)]
    body: dict[str, Any] = {
        "kind": KEY_EVENT,
        "schema_version": canonical.SCHEMA_VERSION,
        "author_id": author,
        "created_at": canonical.now_created_at(),
        "event": kind,
        "seq": seq,
        "vouches": [v.as_json() for v in vouches],
    }
    if key is not None:
        body["key"] = key
    if recovery is not None:
        body["recovery"] = recovery
    if prior is not None:
        body["prior"] = prior
    event = _sealed(body, signer)
    pages = []
    if subject is not None:
        members = vouching.sorted_versions(versions)
        for i in range(vouching.page_count(vouches[0].count)):
            page_versions, proof = vouching.page(members, i)
            page = {
                "kind": VOUCH_PAGE,
                "schema_version": canonical.SCHEMA_VERSION,
                "author_id": author,
                "created_at": body["created_at"],
                "event": event.hash,
                "subject": subject,
                "page": i,
                "versions": page_versions,
                "proof": proof,
            }
            pages.append(_sealed(page, signer))
    return event, pages


def _sealed(unsigned: dict[str, Any], signer: keys.SigningKey) -> Verified:
    (record, record_hash, decoded), body = sign_and_check_body(unsigned, signer)
    return Verified(record_hash, body, record, decoded)


def rotate_txn(
    conn: Conn, authority: Authority, ref: str, new: keys.SigningKey, now_ms: int, recovery: str | None = None
) -> tuple[str, str, Verified, int]:
    """Rotate the node-kept key of the local agent `ref` to `new` (see the module's docstring), in one
    transaction: (name, agent id, the event, records vouched for). `recovery` (the node's agent recovery key,
    node/agents/recovery.py) is set by the rotation when the history has no recovery key yet (docs/format-v3.md
    3.7: whoever sets one first holds the identity)."""
    did = agent_refs.resolve(conn, ref, "agent_id")
    row = store.local_agent(conn, did)
    if row is None:
        raise NotFound(f"no agent {ref!r} on this node", code="agent_not_found", field="agent_id")
    seed = store.key_seed(conn, did)
    if seed is None:
        raise Conflict("this node does not keep that agent's key: the agent rotates it", code="key_not_kept")
    current = keys.SigningKey.from_seed(seed)
    authority.ensure_txn(conn)
    history = authority.history(did)
    if history.state.key != current.did:
        raise Conflict(
            "the key this node keeps is no longer the agent's signing key (another key event replaced it)",
            code="key_not_current",
        )
    if history.state.next is not None:
        raise Conflict(
            "the agent's history commits to a next key: only that key may rotate (docs/format-v3.md 3.3)",
            code="next_key_committed",
        )
    versions = versions_signed_by(conn, did, current.did)
    prior = history.chain[-1] if history.chain else None
    seq = len(history.chain) + 1
    setting = recovery if history.state.recovery is None else None
    event, pages = key_event_records(did, current, "rotate", seq, prior, current.did, versions, key=new.did,
                                     recovery=setting)  # fmt: skip
    submit_txn(conn, authority, event, pages, now_ms)
    store.set_key_seed_txn(conn, did, new.seed)
    return str(row["name"]), did, event, len(versions)


class KeyEvents:
    """Key events of one node's identities: submitted by clients, made for node-kept agents, and shown."""

    def __init__(
        self, db: Database, sealing: Sealing, now_ms: Callable[[], int], recovery_path: Path | None = None
    ) -> None:
        self.db = db
        self.sealing = sealing
        self.now_ms = now_ms
        self.recovery_path = recovery_path  # the node's agent recovery key file (node/agents/recovery.py)

    def recovery_key(self) -> keys.SigningKey | None:
        """The node's recovery key for the agents whose keys it keeps, made on first use; None without a file."""
        return None if self.recovery_path is None else recovery_file.load_or_create(self.recovery_path)

    @property
    def authority(self) -> Authority:
        """The writer's authority cache (shared with sync ingest and every local write)."""
        return self.sealing.authority

    def check(self, body: KeyEventIn, agent_id: str) -> tuple[Verified, list[Verified]]:
        """Check a submission as any receiving node checks its records: the event's kind, author, spelling,
        signature against its named key and schema, and its pages'. Raises 422 with the member's path."""
        event = self._checked(body.record, KEY_EVENT, "$.record")
        if event.record["author_id"] != agent_id:
            raise Forbidden("the key event is not this agent's", field="$.record.author_id")
        self.sealing.check_clock(str(event.record["created_at"]), "$.record.created_at")
        pages = [self._checked(p, VOUCH_PAGE, f"$.pages[{i}]") for i, p in enumerate(body.pages)]
        for i, page in enumerate(pages):
            if page.record["author_id"] != agent_id:
                raise Forbidden("the vouch page is not this agent's", field=f"$.pages[{i}].author_id")
        return event, pages

    @staticmethod
    def _checked(record: dict[str, Any], kind: str, where: str) -> Verified:
        if record.get("kind") != kind:
            raise InvalidInput(f"record kind must be {kind!r}", field=f"{where}.kind", code="record_malformed")
        try:
            body = records.canonical_body(record)
            record_hash, decoded = records.check(record, body=body, v3=True)
        except records.RecordError as exc:
            raise record_error(exc, where) from None
        submission.check_record(record, where)
        return Verified(record_hash, body, record, decoded)

    async def submit(self, agent_id: str, body: KeyEventIn) -> KeyEventOut:
        """Store a client's key event and pages (`submit_txn`); answer with the identity's history after it."""
        if not agent_refs.is_did(agent_id):
            raise InvalidInput("agent_id must be a did:key", field="agent_id")
        event, pages = await self.sealing.off_loop(1 + len(body.pages), self.check, body, agent_id)
        authority = self.authority

        def job(conn: Conn) -> tuple[bool, int, KeyHistory]:
            new, stored = submit_txn(conn, authority, event, pages, self.now_ms())
            return new, stored, read_key_history(conn, agent_id)

        try:
            new, stored, history = await self.db.write(job)
        except BaseException:
            authority.invalidate()
            raise
        if new:
            self.sealing.forget(agent_id)
        return KeyEventOut(address=event.hash, created=new, pages_stored=stored, key_history=history)

    async def rotate(self, ref: str) -> RotatedKey:
        """Rotate a node-kept agent's signing key (`rotate_txn`); the node signs with the new key from now on."""
        new = keys.SigningKey.generate()
        authority, fence = self.authority, self.sealing.key_fence
        recovery_key = self.recovery_key()
        recovery = None if recovery_key is None else recovery_key.did
        fenced: list[dict[str, str]] = []

        def job(conn: Conn) -> tuple[str, str, Verified, int, KeyHistory]:
            name, did, event, vouched = rotate_txn(conn, authority, ref, new, self.now_ms(), recovery)
            history = read_key_history(conn, did)
            # the job's last step, before its commit: a restore of a database from before it cannot sign with it
            retired = str(event.record["vouches"][0]["subject"])
            fenced.append(fence.record(did, retired, new.did, event.hash, store_epoch(conn), self.now_ms()))
            return name, did, event, vouched, history

        try:
            name, did, event, vouched, history = await self.db.write(job)
        except BaseException as exc:
            authority.invalidate()
            await put_back_unless_committed(self.db, fence, fenced, exc)
            raise
        self.sealing.forget(did)
        log.info("signing key of agent %s (%s) rotated to %s by key event %s", name, did, new.did, event.hash)
        await asyncio.to_thread(fence.committed, fenced[0])  # last, as in recovery.py
        return RotatedKey(
            name=name, agent_id=did, signing_key=new.did, event=event.hash, vouched=vouched, key_history=history
        )

    async def signed_versions(self, agent_id: str, query: SignedVersionsQuery) -> SignedVersions:
        """A page of the versions of `agent_id`'s records the log holds signed by `query.key` (6.1: what a vouch of
        that key names; a client builds its rotation's or revocation's vouch from them). Scans the agent's records:
        a rotation is rare."""
        versions = await self.db.read(lambda c: versions_signed_by(c, agent_id, query.key))
        start = 0 if query.after is None else bisect.bisect_right(versions, query.after)
        page = versions[start : start + query.limit]
        more = start + query.limit < len(versions)
        return SignedVersions(versions=page, next_after=page[-1] if more and page else None)

    async def void_records(self, q: VoidRecordsQuery) -> VoidRecordPage:
        """A page of the records flagged void (node/store/void.py), for the operator."""

        def run(conn: Conn) -> VoidRecordPage:
            rows = void.listing(conn, q.after, q.limit + 1)
            more = len(rows) > q.limit
            rows = rows[: q.limit]
            return VoidRecordPage(
                records=[
                    VoidRecord(r.seq, r.hash, r.version, r.kind, r.author_id, r.reason, format_ms(r.flagged_ms))
                    for r in rows
                ],
                next_after=rows[-1].seq if more else None,
                total=void.count(conn),
            )

        return await self.db.read(run)

    async def history(self, agent_id: str) -> KeyHistory:
        """The key history of `agent_id` as the log holds it."""
        return await self.db.read(lambda c: read_key_history(c, agent_id), quick=True)
