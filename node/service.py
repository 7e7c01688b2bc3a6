"""The service layer: every operation of the node, once. REST, MCP and the CLI only parse and format."""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import json
import logging
import os
import sqlite3
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from types import TracebackType
from typing import Any, Literal, NamedTuple, NoReturn, TypeVar

from identity import canonical, keys, records
from identity.schema import EntryRecord, LinkRecord
from node import __version__, agents, idempotency, notify, projections, queries, trust
from node.datadir import DataDir
from node.db import Database, Mergeable
from node.errors import BBSError, Conflict, Forbidden, InvalidInput, NotFound
from node.queries import ENTRY_COLUMNS, entry_out
from node.wire.api import (
    MAX_BATCH,
    MAX_HOPS,
    AckOut,
    AgentOut,
    CreatedAgent,
    Envelope,
    InboxQuery,
    InboxResult,
    NodeInfo,
    PostEntry,
    PostLink,
    ReadQuery,
    ReadResult,
    SearchQuery,
    SearchResult,
    SignedSubmission,
    SubscriptionIn,
    SubscriptionOut,
    unsigned_entry,
)
from node.wire.time import format_ms, parse_ms

log = logging.getLogger("bbs.node")

MAX_FUTURE_SKEW_MS = 5 * 60 * 1000
MAX_SUBSCRIPTIONS = 100
# Look-ups before a write run as quick reads (Database.read) up to this many (ids, keys, link targets): each is
# a small statement, and the budget is looked at only every 1,000 SQLite instructions, so hundreds of them with
# their Python could run well past it. A batch of 100 posts with many links takes the reader threads, where the
# hand-off is a small share of the request.
QUICK_LOOKUPS = 32
CRYPTO_THREADS = max(1, (os.cpu_count() or 2) - 1)  # see Node.off_loop
MAX_HASH_RETRIES = 16  # node-signed posts whose record hash is taken by a different entry move 1 ms later


@dataclass(eq=False)
class _Post:
    """One entry on its way in: the request item, where it sits in the request, and what sealing made of it."""

    body: PostEntry | SignedSubmission
    key: str | None
    where: str  # JSON path of the item in the request: `$`, or `$.entries[i]` in a batch
    replay: queries.EntryOut | None = None
    sealed: Sealed | None = None

    @property
    def seal(self) -> Sealed:
        assert self.sealed is not None, "sealed by Node._seal before it is stored"
        return self.sealed

    @property
    def record_where(self) -> str:
        """JSON path of the record's fields: the item itself, or its `record` when the author signed it."""
        return self.where + ".record" if isinstance(self.body, SignedSubmission) else self.where


class Sealed(NamedTuple):
    """A signed record ready to append: the record, its hash, and its decoded form."""

    record: dict[str, Any]
    record_hash: str
    decoded: EntryRecord


def _subscription_out(row: sqlite3.Row) -> SubscriptionOut:
    return SubscriptionOut(
        id=row["id"],
        agent_id=row["agent_id"],
        tags=json.loads(row["tags"]),
        entry_types=json.loads(row["entry_types"]),
        performatives=json.loads(row["performatives"]),
        authors=json.loads(row["authors"]),
        directed=bool(row["directed"]),
        created_at=format_ms(row["created_ms"]),
    )


class _CrossRequest(Exception):
    """A `supersedes` link (a retraction's too) between entries of two requests of one merged run: one request's
    answer would depend on the other (a retraction of a target stored later; the `retracted`/`superseded` flags
    an earlier request would read back), so the writer runs each request alone instead."""


class _HashTaken(Exception):
    """Node-signed entries whose hashes belong to different stored records (same words, same millisecond)."""

    def __init__(self, posts: list[_Post]) -> None:
        super().__init__(", ".join(post.where for post in posts))
        self.posts = posts


class Located:
    """`with Located(where):` errors raised inside name their field under `where`, the JSON path of one item
    of a batch request (`$` leaves them as they are). A plain class: it is entered several times per post."""

    __slots__ = ("where",)

    def __init__(self, where: str) -> None:
        self.where = where

    def __enter__(self) -> None:
        return None

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> Literal[False]:
        where = self.where
        if isinstance(exc, BBSError) and where != "$":
            exc.field = where + exc.field[1:] if exc.field and exc.field.startswith("$") else exc.field or where
        return False


def _stored_body(conn: sqlite3.Connection, record_hash: str) -> bytes:
    return bytes(conn.execute("SELECT body FROM records WHERE hash = ?", (record_hash,)).fetchone()[0])


T = TypeVar("T")


def record_error(exc: records.RecordError, prefix: str = "$") -> InvalidInput:
    """Map a record verification failure to the client-facing error; `prefix` is where the record sits."""
    field = prefix + exc.field[1:] if exc.field.startswith("$") else exc.field
    return InvalidInput(str(exc), field=field, code=f"record_{exc.reason}")


class Node:
    """One node: its key, its database and the operations on them."""

    def __init__(self, data_dir: Path, *, clock: Callable[[], float] = time.time) -> None:
        self.data = DataDir(data_dir)
        self.clock = clock
        self.key = keys.load_key(self.data.key_path)
        self.db = Database(self.data.db_path)
        self._stores = Mergeable(self._store_all)  # concurrent posts: one append (see Database.write_merged)
        self.heavy_words = queries.HeavyWords()  # search words whose searches run on a reader thread
        self._agent_keys: dict[str, keys.SigningKey | None] = {}
        self.tokens = agents.TokenCache()
        self._credentials_checked_ms = -agents.CREDENTIALS_CHECK_MS  # the first request looks
        self._crypto: concurrent.futures.ThreadPoolExecutor | None = None

    @property
    def node_id(self) -> str:
        return self.key.did

    def now_ms(self) -> int:
        return int(self.clock() * 1000)

    def open(self) -> None:
        self.db.open()

    def close(self) -> None:
        self.db.close()
        if self._crypto is not None:
            self._crypto.shutdown(wait=True)
            self._crypto = None

    async def off_loop(self, items: int, fn: Callable[..., T], *args: Any) -> T:
        """Run CPU-bound work on `items` records (Ed25519 signing and verification, canonical checks): on the
        crypto threads when there are several, on the event loop for one.

        `cryptography` releases the GIL inside Ed25519, so another core verifies a batch while the event loop
        serves other requests. For one record the hand-off costs more than the work: a thread switch each way,
        futures, and a third thread contending for the GIL with the loop and the writer (single posts were
        19-32% faster inline, docs/performance.md). There are CRYPTO_THREADS threads, one fewer than the cores:
        more would compete with the event loop and the writer thread for the same cores.
        """
        if items <= 1:
            return fn(*args)
        if self._crypto is None:
            self._crypto = concurrent.futures.ThreadPoolExecutor(CRYPTO_THREADS, thread_name_prefix="bbs-crypto")
        return await asyncio.get_running_loop().run_in_executor(self._crypto, functools.partial(fn, *args))

    # ---- identity and auth ----------------------------------------------------------------------------

    async def authenticate(self, token: str) -> agents.Principal | None:
        """The principal of an API key or admin token (verified ones are cached: `agents.TokenCache`)."""
        now = self.now_ms()
        if now >= self._credentials_checked_ms + agents.CREDENTIALS_CHECK_MS:
            self._credentials_checked_ms = now  # before the await: one look per interval, not one per request
            self.tokens.observe(await self.db.read(agents.credential_epoch, quick=True))
        principal = self.tokens.get(token, now)
        if principal is None:
            generation = self.tokens.generation
            principal = await self.db.read(lambda c: agents.authenticate(c, token))
            if principal is not None:
                self.tokens.put(token, principal, now, generation=generation)
        return principal

    def info(self) -> NodeInfo:
        from identity import schema

        return NodeInfo(
            node_id=self.node_id,
            public_key=keys.b64u(keys.public_key_bytes(self.key.public_key)),
            software="agent-bbs",
            version=__version__,
            schema_version=self.db.schema_version,
            record_schema=canonical.SCHEMA_VERSION,
            limits={
                "max_record_bytes": schema.MAX_RECORD_BYTES,
                "max_content_chars": schema.MAX_CONTENT_CHARS,
                "max_tags": schema.MAX_TAGS,
                "max_directed_to": schema.MAX_DIRECTED,
                "max_links_per_entry": schema.MAX_LINKS_PER_ENTRY,
                "max_hops": MAX_HOPS,
                "max_page": 200,
                "max_subscriptions": MAX_SUBSCRIPTIONS,
                "max_batch_entries": MAX_BATCH,
            },
        )

    async def create_agent(self, name: str, display_name: str | None, description: str = "") -> CreatedAgent:
        """Create an agent whose key this node keeps; the API key is returned once (REST and CLI share this)."""
        agents.check_name(name)
        key = keys.SigningKey.generate()
        record = agents.identity_record(key, display_name or name, description, self.node_id)
        api_key = await self.db.write(
            lambda c: agents.register(c, name=name, key=key, keep_key=True, record=record, now_ms=self.now_ms())
        )
        return CreatedAgent(name=name, agent_id=key.did, api_key=api_key)

    async def rotate_api_key(self, ref: str) -> CreatedAgent:
        """Give a local agent (by name or did) a new API key; every key it had stops working at once here."""
        name, agent_id, api_key = await self.db.write(lambda c: agents.rotate_api_key(c, ref, self.now_ms()))
        self.tokens.clear()
        log.info("api key rotated for agent %s (%s); its previous keys are revoked", name, agent_id)
        return CreatedAgent(name=name, agent_id=agent_id, api_key=api_key)

    async def get_agent(self, agent_id: str) -> AgentOut:
        def fetch(conn: sqlite3.Connection) -> AgentOut:
            row = conn.execute(
                "SELECT a.*, (SELECT count(*) FROM entries e WHERE e.author_id = a.id) AS n FROM agents a"
                " WHERE a.id = ?",
                (agent_id,),
            ).fetchone()
            if row is None:
                raise NotFound(f"no agent {agent_id}", code="agent_not_found")
            return AgentOut(
                agent_id=row["id"],
                display_name=row["display_name"],
                description=row["description"],
                home_node=row["home_node"],
                created_at=row["created_at"],
                entry_count=row["n"],
                trust=trust.agent_trust(conn, agent_id),
            )

        return await self.db.read(fetch, quick=True)

    async def _signing_key(self, agent_id: str) -> keys.SigningKey | None:
        if agent_id not in self._agent_keys:
            self._agent_keys[agent_id] = await self.db.read(lambda c: agents.signing_key(c, agent_id))
        return self._agent_keys[agent_id]

    # ---- post -----------------------------------------------------------------------------------------

    async def post_entry(
        self, agent_id: str, body: PostEntry | SignedSubmission, idempotency_key: str | None
    ) -> tuple[queries.EntryOut, bool]:
        """Store a new entry (node-signed or author-signed). Returns (entry, created)."""
        key = idempotency.request_key(idempotency_key, body.idempotency_key)
        (result,) = await self._post([_Post(body, key, "$")], agent_id)
        return result

    async def post_entries(
        self, agent_id: str, bodies: list[PostEntry | SignedSubmission]
    ) -> list[tuple[queries.EntryOut, bool]]:
        """Store several entries in one transaction, all or nothing; returns (entry, created) per item in order.

        Each item is what `post_entry` takes, with its own idempotency key (a replayed key returns the original
        entry, created false). An error names its item: `$.entries[i]...`, and nothing is stored.
        """
        posts = [_Post(body, body.idempotency_key, f"$.entries[{i}]") for i, body in enumerate(bodies)]
        first_use: dict[str, int] = {}
        for i, post in enumerate(posts):
            if post.key is None:
                continue
            if post.key in first_use:
                raise InvalidInput(
                    f"this idempotency key is already used by entries[{first_use[post.key]}] of this batch",
                    field=f"{post.where}.idempotency_key",
                    code="idempotency_key_repeated",
                )
            first_use[post.key] = i
        return await self._post(posts, agent_id)

    async def _post(self, posts: list[_Post], agent_id: str) -> list[tuple[queries.EntryOut, bool]]:
        """The one write path of entries posted by agents: replays, then sign or verify, then one transaction."""
        keyed = [post for post in posts if post.key is not None]
        if keyed:

            def replays(conn: sqlite3.Connection) -> list[queries.EntryOut | None]:
                found = []
                for post in keyed:
                    assert post.key is not None
                    with Located(post.where):
                        found.append(self._replayed_entry(conn, agent_id, post.key))
                return found

            for post, replay in zip(keyed, await self.db.read(replays, quick=len(keyed) <= QUICK_LOOKUPS), strict=True):
                post.replay = replay
        fresh = [post for post in posts if post.replay is None]
        if not fresh:
            return [(post.replay, False) for post in posts if post.replay is not None]
        await self._seal(fresh, agent_id)
        retracting = [post for post in fresh if post.seal.decoded.performative == "retract"]
        if retracting:  # refused here, a retraction of someone else's entry never sends its run to the slow path
            own = frozenset(post.seal.record_hash for post in fresh)

            def check_early(conn: sqlite3.Connection) -> None:
                for post in retracting:
                    with Located(post.record_where):
                        self._check_links(conn, post.seal.decoded, early=True, own=own)

            await self.db.read(check_early, quick=len(retracting) <= QUICK_LOOKUPS)
        for _ in range(MAX_HASH_RETRIES):
            try:
                return await self.db.write_merged(self._stores, (agent_id, posts))
            except _HashTaken as taken:
                await self._seal_later(taken, agent_id)
        raise Conflict("could not find a free created_at for this entry; retry", code="hash_taken")

    async def _seal_later(self, taken: _HashTaken, agent_id: str) -> None:
        """Re-sign every post whose hash was taken 1 ms later, together: a concurrent batch with the same words
        collides with many of a batch's posts at once, and moving one per retry would exhaust the retries."""
        later = max(parse_ms(post.seal.decoded.created_at) for post in taken.posts) + 1
        await self._seal(taken.posts, agent_id, later)

    async def post_entry_with(
        self,
        agent_id: str,
        body: PostEntry | SignedSubmission,
        idempotency_key: str,
        *,
        derived_from: list[str],
        then: Callable[[sqlite3.Connection, queries.EntryOut], None],
    ) -> tuple[queries.EntryOut, bool]:
        """`post_entry`, plus in the same transaction: a node-signed `derived_from` link record from the entry to
        each of `derived_from` (the agent's own, if it already has one), then `then(conn, entry)`.

        All of it commits or none: a crash never leaves the entry without its links or its caller's mark. A
        replay of the key (an older, interrupted attempt) adds what that attempt left out.
        """
        post = _Post(body, idempotency_key, "$")
        post.replay = await self.db.read(lambda c: self._replayed_entry(c, agent_id, idempotency_key), quick=True)
        signer = await self._signing_key(agent_id) if derived_from else None
        if derived_from and signer is None:
            raise InvalidInput(
                "only an agent whose key this node keeps gets links signed for it", code="agent_signs_own_records"
            )
        if post.replay is None:
            await self._seal([post], agent_id)

        def job(conn: sqlite3.Connection) -> tuple[queries.EntryOut, bool]:
            ((entry, created),) = self._store_all(conn, [(agent_id, [post])])[0]
            now = self.now_ms()
            for target in derived_from:
                assert signer is not None
                if conn.execute(
                    "SELECT 1 FROM links WHERE source_hash = ? AND target_hash = ? AND link_type = 'derived_from'"
                    " AND author_id = ? AND ordinal >= 0 LIMIT 1",
                    (entry.record_hash, target, agent_id),
                ).fetchone():
                    continue
                unsigned = {
                    "kind": "link",
                    "schema_version": canonical.SCHEMA_VERSION,
                    "author_id": agent_id,
                    "created_at": format_ms(now),
                    "source": entry.record_hash,
                    "target": target,
                    "link_type": "derived_from",
                    "annotation": "",
                }
                record, record_hash, decoded = sign_and_check(unsigned, signer)
                projections.append(conn, record, record_hash, decoded, origin="local", now_ms=now)
            then(conn, entry)
            return entry, created

        for _ in range(MAX_HASH_RETRIES):
            try:
                return await self.db.write(job)
            except _HashTaken as taken:
                await self._seal_later(taken, agent_id)
        raise Conflict("could not find a free created_at for this entry; retry", code="hash_taken")

    async def _seal(self, posts: list[_Post], agent_id: str, created_ms: int | None = None) -> None:
        """Give each post its signed record: signed here for node-kept keys, verified for records signed by
        their author. Link targets resolve in one read; the Ed25519 work runs in one call (`off_loop`)."""
        to_sign = [(post, post.body) for post in posts if isinstance(post.body, PostEntry)]
        signer = await self._signing_key(agent_id) if to_sign else None
        if signer is None and to_sign:
            with Located(to_sign[0][0].where):
                raise InvalidInput(
                    "this agent holds its own key: sign the record and submit it as {'record': ...}",
                    code="agent_signs_own_records",
                )
        targets: list[list[str]] = [[] for _ in to_sign]
        if any(body.links for _, body in to_sign):

            def resolve(conn: sqlite3.Connection) -> list[list[str]]:
                resolved = []
                for post, body in to_sign:
                    with Located(post.where):
                        resolved.append([self._target_hash(conn, ln.target, i) for i, ln in enumerate(body.links)])
                return resolved

            targets = await self.db.read(resolve, quick=sum(len(b.links) for _, b in to_sign) <= QUICK_LOOKUPS)
        created_at = format_ms(self.now_ms() if created_ms is None else created_ms)
        unsigned: dict[int, dict[str, Any]] = {}
        for (post, body), post_targets in zip(to_sign, targets, strict=True):
            with Located(post.where):
                try:
                    unsigned[id(post)] = unsigned_entry(body, agent_id, created_at, post_targets)
                except canonical.CanonicalError as exc:
                    raise InvalidInput(str(exc), field=exc.field) from None

        def seal_all() -> None:
            for post in posts:
                with Located(post.where):
                    if isinstance(post.body, SignedSubmission):
                        post.sealed = Sealed(*self._check_signed(post.body.record, "entry", agent_id))
                    else:
                        assert signer is not None
                        post.sealed = Sealed(*sign_and_check(unsigned[id(post)], signer))

        await self.off_loop(len(posts), seal_all)

    def _store_all(
        self, conn: sqlite3.Connection, requests: list[tuple[str, list[_Post]]]
    ) -> list[list[tuple[queries.EntryOut, bool]]]:
        """Append the sealed posts of one or more requests (agent, posts) in one set-based append, then read
        them all back inside the write; one list of (entry, created) per request.

        Idempotency keys are checked again first (a request with the same key may have committed since the
        read in `_post`); retractions are checked after the append, so a batch may retract its own entries.
        Concurrent requests reach here together through `Database.write_merged`; if one of them fails, the
        writer rolls this back and runs each request alone.
        """
        now = self.now_ms()
        posts = [(agent_id, post) for agent_id, request in requests for post in request]
        request_of = [r for r, (_, request) in enumerate(requests) for _ in request]
        stored: dict[int, tuple[queries.EntryOut | int, bool]] = {}
        to_append: list[int] = []
        for i, (agent_id, post) in enumerate(posts):
            replay: queries.EntryOut | int | None = post.replay
            if replay is None and post.key is not None:
                with Located(post.where):
                    done = idempotency.replayed(conn, agent_id, post.key, "post", field="$.idempotency_key")
                if done is not None:
                    replay = int(conn.execute("SELECT seq FROM records WHERE hash = ?", (done,)).fetchone()[0])
            if replay is not None:
                stored[i] = (replay, False)
            else:
                to_append.append(i)
        appended = projections.append_many(
            conn,
            [projections.Incoming(*posts[i][1].seal, scope=posts[i][1].seal.decoded.scope) for i in to_append],
            origin="local",
            now_ms=now,
        )
        stored_by = {
            posts[i][1].seal.record_hash: request_of[i] for i, (_, new) in zip(to_append, appended, strict=True) if new
        }
        taken: list[_Post] = []
        for i, (seq, inserted) in zip(to_append, appended, strict=True):
            agent_id, post = posts[i]
            record, record_hash, decoded = post.seal
            with Located(post.record_where):
                if any(
                    link.link_type == "supersedes" and stored_by.get(link.target, request_of[i]) != request_of[i]
                    for link in decoded.links
                ):
                    raise _CrossRequest()
                self._check_links(conn, decoded)
            with Located(post.where):
                if (
                    not inserted
                    and isinstance(post.body, PostEntry)
                    and _stored_body(conn, record_hash) != canonical.canonical_bytes(record)
                ):
                    taken.append(post)  # a different entry has this hash: rolled back, re-signed 1 ms later
                    continue
                if post.key is not None:
                    idempotency.remember(conn, agent_id, post.key, "post", record_hash, now)
            stored[i] = (seq, inserted)
        if taken:
            raise _HashTaken(taken)
        ids = [ref for ref, _ in stored.values() if isinstance(ref, int)]
        by_id = {out.id: out for out in queries.entries_by_ids(conn, ids)}
        results = [
            (by_id[ref] if isinstance(ref, int) else ref, created)
            for ref, created in map(stored.__getitem__, range(len(posts)))
        ]
        answers, start = [], 0
        for _, request in requests:
            answers.append(results[start : start + len(request)])
            start += len(request)
        return answers

    def _check_signed(self, record: dict[str, Any], kind: str, agent_id: str) -> tuple[dict[str, Any], str, Any]:
        if record.get("kind") != kind:
            raise InvalidInput(f"record kind must be {kind!r}", field="$.record.kind", code="record_malformed")
        try:
            record_hash, decoded = records.check(record)
        except records.RecordError as exc:
            raise record_error(exc, "$.record") from None
        if decoded.author_id != agent_id:
            raise Forbidden("an agent can only write records it authored", field="$.record.author_id")
        self._check_clock(decoded.created_at, "$.record.created_at")
        return record, record_hash, decoded

    def _check_clock(self, created_at: str, field: str) -> None:
        if parse_ms(created_at) > self.now_ms() + MAX_FUTURE_SKEW_MS:
            raise InvalidInput("created_at is more than 5 minutes in the future", field=field, code="clock_skew")

    def _target_hash(self, conn: sqlite3.Connection, ref: str, index: int) -> str:
        record_hash, _ = queries.resolve_ref(conn, ref)
        if record_hash is None:
            raise NotFound(
                f"link target {ref!r} is not a known entry id or a record hash",
                field=f"$.links[{index}].target",
                code="target_not_found",
            )
        return record_hash

    @staticmethod
    def _replayed_link(conn: sqlite3.Connection, agent_id: str, key: str) -> queries.LinkOut | None:
        done = idempotency.replayed(conn, agent_id, key, "link", field="$.idempotency_key")
        if done is None:
            return None
        row = conn.execute(
            f"SELECT {queries.LINK_COLUMNS} FROM links l WHERE l.origin_hash = ? AND l.ordinal = 0", (done,)
        ).fetchone()
        return queries.link_out(row)

    @staticmethod
    def _refuse_self_link() -> NoReturn:
        raise InvalidInput("an entry cannot link to itself", field="$.target", code="self_link")

    @staticmethod
    def _retracted(rec: EntryRecord) -> list[tuple[int, str]]:
        """(link index, target hash) of what a retract entry withdraws; [] for any other entry."""
        if rec.performative != "retract":
            return []
        targets = [(i, link.target) for i, link in enumerate(rec.links) if link.link_type == "supersedes"]
        if not targets:
            raise InvalidInput(
                "a retract entry must name the entry it withdraws with a 'supersedes' link",
                field="$.links",
                code="retract_without_target",
            )
        return targets

    def _check_links(
        self, conn: sqlite3.Connection, rec: EntryRecord, *, early: bool = False, own: frozenset[str] = frozenset()
    ) -> None:
        """Retractions: a retract entry names, by a supersedes link, an entry of its own author that exists here.

        `early` is the read before the write, which decides only what cannot change by then: a target stored
        under another author (403). A target not stored yet may still be stored ahead of this entry, and the
        request's own entries (`own`: a batch may retract its own) are skipped; the writer decides those.
        """
        for i, target in self._retracted(rec):
            if target in own:
                continue
            row = conn.execute("SELECT author_id FROM entries WHERE record_hash = ?", (target,)).fetchone()
            if row is None:
                if early:
                    continue
                raise NotFound(
                    "the entry to retract is not on this node", field=f"$.links[{i}].target", code="target_not_found"
                )
            if row[0] != rec.author_id:
                raise Forbidden(
                    "an agent can only retract its own entries", field=f"$.links[{i}].target", code="retract_not_own"
                )

    @staticmethod
    def _replayed_entry(conn: sqlite3.Connection, agent_id: str, key: str) -> queries.EntryOut | None:
        done = idempotency.replayed(conn, agent_id, key, "post", field="$.idempotency_key")
        if done is None:
            return None
        row = conn.execute(f"SELECT {ENTRY_COLUMNS} FROM entries e WHERE e.record_hash = ?", (done,)).fetchone()
        return entry_out(row)

    async def _entry_by_id(self, entry_id: int) -> queries.EntryOut:
        return await self.db.read(lambda c: self._fetch_entry(c, entry_id), quick=True)

    @staticmethod
    def _fetch_entry(conn: sqlite3.Connection, entry_id: int) -> queries.EntryOut:
        row = conn.execute(f"SELECT {ENTRY_COLUMNS} FROM entries e WHERE e.id = ?", (entry_id,)).fetchone()
        if row is None:
            raise NotFound(f"no entry {entry_id}", code="entry_not_found")
        return entry_out(row)

    # ---- link -----------------------------------------------------------------------------------------

    async def create_link(
        self, agent_id: str, body: PostLink | SignedSubmission, idempotency_key: str | None
    ) -> tuple[queries.LinkOut, bool]:
        """Store a link record (node-signed or author-signed). Returns (link, created)."""
        key = idempotency.request_key(idempotency_key, body.idempotency_key)
        if key is not None:  # a replay answers with the original link, whatever this body says
            replayed = await self.db.read(lambda c: self._replayed_link(c, agent_id, key), quick=True)
            if replayed is not None:
                return replayed, False
        at = Located("$.record" if isinstance(body, SignedSubmission) else "$")  # where source and target sit
        if isinstance(body, SignedSubmission):
            if body.record.get("kind") == "link" and body.record.get("source") == body.record.get("target"):
                with at:  # records.check refuses it too (any node does), but the API names it precisely
                    self._refuse_self_link()
            record, record_hash, decoded = self._check_signed(body.record, "link", agent_id)
        else:
            signer = await self._signing_key(agent_id)
            if signer is None:
                raise InvalidInput(
                    "this agent holds its own key: sign the record and submit it as {'record': ...}",
                    code="agent_signs_own_records",
                )

            def refs(conn: sqlite3.Connection) -> tuple[str, str]:
                source, source_id = queries.resolve_ref(conn, body.source)
                if source is None or source_id is None:
                    raise NotFound(
                        f"source entry {body.source!r} is not on this node", field="$.source", code="source_not_found"
                    )
                target, _ = queries.resolve_ref(conn, body.target)
                if target is None:
                    raise NotFound(
                        f"target {body.target!r} is not a known entry id or a record hash",
                        field="$.target",
                        code="target_not_found",
                    )
                return source, target

            source, target = await self.db.read(refs, quick=True)
            if source == target:
                self._refuse_self_link()
            unsigned = {
                "kind": "link",
                "schema_version": canonical.SCHEMA_VERSION,
                "author_id": agent_id,
                "created_at": format_ms(self.now_ms()),
                "source": source,
                "target": target,
                "link_type": body.link_type,
                "annotation": canonical.normalize_value(body.annotation),
            }
            record = records.sign(unsigned, signer)
            try:
                record_hash, decoded = records.check(record)
            except records.RecordError as exc:
                raise record_error(exc) from None
        assert isinstance(decoded, LinkRecord)

        def job(conn: sqlite3.Connection) -> tuple[int, bool]:
            if key is not None:
                done = idempotency.replayed(conn, agent_id, key, "link", field="$.idempotency_key")
                if done is not None:
                    row = conn.execute("SELECT id FROM links WHERE origin_hash = ? AND ordinal = 0", (done,)).fetchone()
                    return int(row[0]), False
            same = conn.execute(
                "SELECT l.id, l.origin_hash, r.kind FROM links l JOIN records r ON r.hash = l.origin_hash"
                " WHERE l.source_hash = ? AND l.target_hash = ? AND l.link_type = ? AND l.author_id = ?"
                " AND l.ordinal >= 0 ORDER BY l.id LIMIT 1",
                (decoded.source, decoded.target, decoded.link_type, agent_id),
            ).fetchone()
            if same is not None:  # the same author asserting the same link again: one link
                if key is not None and same[2] == "link":  # the key now names that link (and no other use)
                    idempotency.remember(conn, agent_id, key, "link", same[1], self.now_ms())
                return int(same[0]), False
            if not conn.execute("SELECT 1 FROM entries WHERE record_hash = ?", (decoded.source,)).fetchone():
                with at:
                    raise NotFound("source entry is not on this node", field="$.source", code="source_not_found")
            projections.append(conn, record, record_hash, decoded, origin="local", now_ms=self.now_ms())
            if key is not None:
                idempotency.remember(conn, agent_id, key, "link", record_hash, self.now_ms())
            row = conn.execute("SELECT id FROM links WHERE origin_hash = ? AND ordinal = 0", (record_hash,)).fetchone()
            return int(row[0]), True

        link_id, created = await self.db.write(job)

        def fetch(conn: sqlite3.Connection) -> queries.LinkOut:
            row = conn.execute(f"SELECT {queries.LINK_COLUMNS} FROM links l WHERE l.id = ?", (link_id,)).fetchone()
            return queries.link_out(row)

        return await self.db.read(fetch, quick=True), created

    # ---- read and search ------------------------------------------------------------------------------

    async def read(self, refs: list[str], q: ReadQuery) -> ReadResult:
        """Entries by id or hash with their neighbourhood."""

        def run(conn: sqlite3.Connection) -> ReadResult:
            seeds: list[str] = []
            missing: list[str] = []
            for ref in dict.fromkeys(refs):  # a ref given twice is read (or missing) once
                record_hash, entry_id = queries.resolve_ref(conn, ref)
                if entry_id is None or record_hash is None:
                    missing.append(ref)
                else:
                    seeds.append(record_hash)
            hashes, links, truncated = queries.traverse(
                conn, seeds, hops=q.hops, link_types=q.link_types, direction=q.direction, include_links=q.include_links
            )
            entries = queries.entries_by_hashes(conn, hashes, q.include_synthetic)
            return ReadResult(entries=entries, links=links, missing=missing, truncated=truncated)

        return await self.db.read(run, quick=True)

    async def search(self, q: SearchQuery) -> SearchResult:
        since_ms = parse_since(q.since, "$.since")
        if q.q is not None and q.q.strip() and queries.fts_query(q.q) is None:
            raise InvalidInput("q has no searchable words", field="$.q", code="invalid_query")

        def run(conn: sqlite3.Connection) -> SearchResult:
            page = queries.search(conn, q, since_ms)
            links: list[queries.LinkOut] = []
            truncated = False
            entries = page
            if q.hops > 0:
                hashes, links, truncated = queries.traverse(
                    conn,
                    [e.record_hash for e in page],
                    hops=q.hops,
                    link_types=q.link_types,
                    direction=q.direction,
                    include_links=True,
                )
                found = {e.record_hash for e in page}
                extra = [
                    e
                    for e in queries.entries_by_hashes(conn, hashes, q.include_synthetic)
                    if e.record_hash not in found
                ]
                entries = page + extra
            return SearchResult(
                entries=entries,
                links=links,
                limit=q.limit,
                offset=q.offset,
                next_offset=q.offset + q.limit if len(page) == q.limit else None,
                truncated=truncated,
            )

        # On the event loop unless its words made earlier searches hold the loop too long (queries.HeavyWords).
        words = queries.search_words(q.q) if q.q else []
        quick = not self.heavy_words.any_of(words)
        started = time.perf_counter()
        result = await self.db.read(run, quick=quick)
        if quick and words:
            self.heavy_words.observe(words, overran=time.perf_counter() - started > self.db.inline_budget_s)
        return result

    # ---- subscriptions and inbox ----------------------------------------------------------------------

    async def subscribe(self, agent_id: str, sub: SubscriptionIn) -> tuple[SubscriptionOut, bool]:
        dims = {
            "tags": sorted(set(canonical.normalize_value(sub.tags))),
            "entry_types": sorted(set(sub.entry_types)),
            "performatives": sorted(set(sub.performatives)),
            "authors": sorted(set(sub.authors)),
        }
        filter_key = canonical.canonical_bytes({**dims, "directed": sub.directed}).decode()
        now = self.now_ms()

        def job(conn: sqlite3.Connection) -> tuple[int, bool]:
            row = conn.execute(
                "SELECT id FROM subscriptions WHERE agent_id = ? AND filter_key = ?", (agent_id, filter_key)
            ).fetchone()
            if row is not None:
                return int(row[0]), False
            count = conn.execute("SELECT count(*) FROM subscriptions WHERE agent_id = ?", (agent_id,)).fetchone()[0]
            if count >= MAX_SUBSCRIPTIONS:
                raise Conflict(
                    f"an agent may hold at most {MAX_SUBSCRIPTIONS} subscriptions", code="too_many_subscriptions"
                )
            sub_id = conn.execute(
                "INSERT INTO subscriptions (agent_id, filter_key, tags, entry_types, performatives, authors, directed,"
                " n_tags, n_types, n_perfs, n_authors, created_ms) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
                " RETURNING id",
                (
                    agent_id,
                    filter_key,
                    json.dumps(dims["tags"]),
                    json.dumps(dims["entry_types"]),
                    json.dumps(dims["performatives"]),
                    json.dumps(dims["authors"]),
                    int(sub.directed),
                    len(dims["tags"]),
                    len(dims["entry_types"]),
                    len(dims["performatives"]),
                    len(dims["authors"]),
                    now,
                ),
            ).fetchone()[0]
            terms = (
                [(sub_id, "tag", v) for v in dims["tags"]]
                + [(sub_id, "type", v) for v in dims["entry_types"]]
                + [(sub_id, "perf", v) for v in dims["performatives"]]
                + [(sub_id, "author", v) for v in dims["authors"]]
            )
            conn.executemany("INSERT INTO subscription_terms (sub_id, dim, value) VALUES (?, ?, ?)", terms)
            return int(sub_id), True

        def stored(conn: sqlite3.Connection) -> tuple[SubscriptionOut, bool]:
            sub_id, created = job(conn)
            # read back inside the write: a concurrent unsubscribe cannot make the answer vanish
            row = conn.execute("SELECT * FROM subscriptions WHERE id = ?", (sub_id,)).fetchone()
            return _subscription_out(row), created

        return await self.db.write(stored)

    async def subscriptions(self, agent_id: str) -> list[SubscriptionOut]:
        def run(conn: sqlite3.Connection) -> list[SubscriptionOut]:
            rows = conn.execute("SELECT * FROM subscriptions WHERE agent_id = ? ORDER BY id", (agent_id,)).fetchall()
            return [_subscription_out(r) for r in rows]

        return await self.db.read(run, quick=True)

    async def unsubscribe(self, agent_id: str, sub_id: int) -> None:
        def job(conn: sqlite3.Connection) -> None:
            cur = conn.execute("DELETE FROM subscriptions WHERE id = ? AND agent_id = ?", (sub_id, agent_id))
            if cur.rowcount == 0:
                raise NotFound(f"no subscription {sub_id} of yours", code="subscription_not_found")

        await self.db.write(job)

    async def inbox(self, agent_id: str, q: InboxQuery) -> InboxResult:
        since_ms = parse_since(q.since, "$.since")
        now = self.now_ms()
        rows: list[sqlite3.Row] = []
        # An empty inbox (the usual poll) is answered by a read: only a poll with something to lease needs the
        # writer. Expiry of any agent's notifications runs in those (take_inbox), so it waits for one.
        if await self.db.read(lambda c: notify.has_deliverable(c, agent_id, now), quick=True):
            rows = await self.db.write(
                lambda c: notify.take_inbox(
                    c, agent_id, limit=q.limit, since_ms=since_ms, mark_delivered=q.mark_delivered, now_ms=now
                )
            )
        return InboxResult(
            notifications=[
                Envelope(
                    notification_id=r["notification_id"],
                    entry_id=r["entry_id"],
                    record_hash=r["record_hash"],
                    author=r["author_id"],
                    created_at=r["created_at"],
                    entry_type=r["entry_type"],
                    performative=r["performative"],
                    tags=json.loads(r["tags"]),
                    confidence=r["confidence"],
                    directed_to_me=bool(r["directed_to_me"]),
                    link_targets=json.loads(r["link_targets"] or "[]"),
                    tier=r["tier"],
                    reason=r["reason"],
                    attempt=r["attempt_count"] + 1,
                )
                for r in rows
            ],
            lease_seconds=notify.LEASE_MS // 1000,
        )

    async def expire_notifications(self) -> int:
        """Mark notifications past their expiry, any agent's; how many. Polls that lease do this too; this is for
        a node whose polls find nothing to lease (answered without the writer). A writer job only when needed."""
        now = self.now_ms()
        if not await self.db.read(lambda c: notify.expired_waiting(c, now), quick=True):
            return 0
        return await self.db.write(lambda c: notify.expire(c, now))

    async def ack(self, agent_id: str, ids: list[int]) -> AckOut:
        now = self.now_ms()
        return AckOut(acknowledged=await self.db.write(lambda c: notify.ack(c, agent_id, ids, now)))


def sign_and_check(unsigned: dict[str, Any], signer: keys.SigningKey) -> tuple[dict[str, Any], str, Any]:
    """Sign a normalised record, then check it as any receiving node will: (record, hash, decoded Struct).

    Every rule runs but the Ed25519 verification of the signature just made: `records.sign` refuses a key that
    is not the record's author, and re-verifying our own signature cost a fifth of a node-signed entry's CPU.
    """
    record = records.sign(unsigned, signer)
    try:
        record_hash, decoded = records.check(record, check_signature=False)
    except records.RecordError as exc:
        raise record_error(exc) from None
    return record, record_hash, decoded


def parse_since(value: str | None, field: str) -> int | None:
    """An ISO 8601 timestamp with a timezone, as epoch milliseconds."""
    if value is None:
        return None
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        raise InvalidInput("since must be an ISO 8601 timestamp such as 2026-01-31T12:00:00Z", field=field) from None
    if moment.tzinfo is None:
        raise InvalidInput("since must carry a timezone (for example a trailing Z)", field=field)
    return int(moment.timestamp() * 1000)
