"""Entries: posting one, a batch of them, or one with derived links (default mode's promote).

Retractions are entries too (a `retract` entry with a `supersedes` link to what it withdraws). Every entry an
agent posts takes the one write path here: idempotency replays, then sealing (signed here for node-kept keys,
verified for records their author signed), then one set-based append. Concurrent posts reach the writer
together through `Database.write_merged` and are stored by one `store_all_txn` call. The statements are in
node/entries/store.py; this module decides.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple

import msgspec

from identity import canonical, keys
from identity.schema import EntryRecord
from identity.schema_v3 import space_of
from node.agents import refs as agent_refs
from node.entries import queries, store
from node.entries.links import unsigned_link
from node.entries.queries import EntryOut
from node.errors import BBSError, Conflict, Forbidden, InvalidInput, Located, NotFound
from node.spaces import posts as posts_check
from node.spaces.sight import OPERATOR, Sight, stored_scope
from node.spaces.store import sight_of
from node.store import db, equivocation, idempotency, projections
from node.store.authority import Authority, authorize_txn
from node.store.conn import Conn
from node.store.db import Database, Mergeable
from node.store.sealing import (
    POOL_MIN_RECORDS,
    HashTaken,
    SealedBody,
    SealedRecord,
    Sealing,
    sign_and_check,
    sign_and_check_body,
    until_hash_free,
)
from wire.api import PostEntry, SignedSubmission, unsigned_entry
from wire.time import format_ms, parse_ms

# Look-ups before a write run as quick reads (Database.read) up to this many (ids, keys, link targets): each is
# a small statement, and the budget is looked at only every 1,000 SQLite instructions, so hundreds of them with
# their Python could run well past it. A batch of 100 posts with many links takes the reader threads, where the
# hand-off is a small share of the request.
QUICK_LOOKUPS = 32
KEPT_KEYS_ONLY = "only an agent whose key this node keeps gets links signed for it"

Posted = tuple[EntryOut, bool]  # an entry and whether this request created it


class Sealed(NamedTuple):
    """A signed record ready to append: the record, its hash, its decoded form, and its canonical bytes and
    version (`projections.version_of`), computed once when it was sealed rather than in the writer."""

    record: dict[str, Any]
    record_hash: str
    decoded: EntryRecord
    body: bytes
    version: str

    @classmethod
    def of(cls, sealed: SealedRecord, body: bytes) -> Sealed:
        """The sealed record (record, hash, decoded) with its canonical bytes, and its version computed."""
        record, record_hash, decoded = sealed
        return cls(record, record_hash, decoded, body, projections.version_of("entry", record_hash, body))

    def incoming(self) -> projections.Incoming:
        """The record on its way into the log, with what sealing computed."""
        scope = stored_scope(space_of(self.decoded), self.decoded.scope)
        return projections.Incoming(self.record, self.record_hash, self.decoded, scope, self.body, self.version)


@dataclass(eq=False)
class _Post:
    """One entry on its way in: the request item, where it sits in the request, and what sealing made of it."""

    body: PostEntry | SignedSubmission
    key: str | None
    where: str  # JSON path of the item in the request: `$`, or `$.entries[i]` in a batch
    replay: EntryOut | None = None
    sealed: Sealed | None = None

    @property
    def seal(self) -> Sealed:
        assert self.sealed is not None, "sealed by Entries._seal before it is stored"
        return self.sealed

    @property
    def record_where(self) -> str:
        """JSON path of the record's fields: the item itself, or its `record` when the author signed it."""
        return self.where + ".record" if isinstance(self.body, SignedSubmission) else self.where


class _CrossRequest(Exception):
    """A `supersedes` link (a retraction's too) between entries of two requests of one merged run: one request's
    answer would depend on the other (a retraction of a target stored later; the `retracted`/`superseded` flags
    an earlier request would read back), so the writer runs each request alone instead."""


class Entries:
    """Posting entries on one node."""

    def __init__(self, db: Database, sealing: Sealing, now_ms: Callable[[], int]) -> None:
        self.db = db
        self.sealing = sealing
        self.now_ms = now_ms
        self.merged = Mergeable(self._store_all_txn)  # concurrent posts: one append (see Database.write_merged)

    async def post(self, agent_id: str, body: PostEntry | SignedSubmission, idempotency_key: str | None) -> Posted:
        """Store a new entry (node-signed or author-signed). Returns (entry, created)."""
        key = idempotency.request_key(idempotency_key, body.idempotency_key)
        (result,) = await self._post([_Post(body, key, "$")], agent_id)
        return result

    async def post_batch(self, agent_id: str, bodies: list[PostEntry | SignedSubmission]) -> list[Posted]:
        """Store several entries in one transaction, all or nothing; returns (entry, created) per item in order.

        Each item is what `post` takes, with its own idempotency key (a replayed key returns the original
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

    async def post_with(
        self,
        agent_id: str,
        body: PostEntry | SignedSubmission,
        idempotency_key: str,
        *,
        derived_from: list[str],
        then: Callable[[Conn, EntryOut], None],
    ) -> Posted:
        """`post`, plus in the same transaction: a node-signed `derived_from` link record from the entry to
        each of `derived_from` (the agent's own, if it already has one), then `then(conn, entry)`.

        All of it commits or none: a crash never leaves the entry without its links or its caller's mark. A
        replay of the key (an older, interrupted attempt) adds what that attempt left out.
        """
        post = _Post(body, idempotency_key, "$")
        post.replay = await self.db.read(lambda c: replayed_entry(c, agent_id, idempotency_key), quick=True)
        signer = await self.sealing.signer(agent_id, KEPT_KEYS_ONLY) if derived_from else None
        if post.replay is None:
            await self._seal([post], agent_id)
        return await until_hash_free(
            lambda: self.db.write(
                lambda c: store_with_txn(
                    c, agent_id, post, derived_from, signer, then, self.now_ms, self.sealing.authority
                )
            ),
            functools.partial(self._seal_later, agent_id),
            "entry",
        )

    async def _post(self, posts: list[_Post], agent_id: str) -> list[Posted]:
        """The one write path of entries posted by agents: replays, then sign or verify, then one transaction."""
        keyed = [post for post in posts if post.key is not None]
        if keyed:
            found = await self.db.read(lambda c: replays(c, agent_id, keyed), quick=len(keyed) <= QUICK_LOOKUPS)
            for post, replay in zip(keyed, found, strict=True):
                post.replay = replay
        fresh = [post for post in posts if post.replay is None]
        if not fresh:
            return [(post.replay, False) for post in posts if post.replay is not None]
        await self._seal(fresh, agent_id)
        retracting = [post for post in fresh if post.seal.decoded.performative == "retract"]
        if retracting:  # refused here, a retraction of someone else's entry never sends its run to the slow path
            own = frozenset(post.seal.record_hash for post in fresh)
            await self.db.read(lambda c: check_early(c, retracting, own), quick=len(retracting) <= QUICK_LOOKUPS)
        stored = await until_hash_free(
            lambda: self.db.write_merged(self.merged, (agent_id, posts)),
            functools.partial(self._seal_later, agent_id),
            "entry",
        )
        return [rendered(post, one) for post, one in zip(posts, stored, strict=True)]

    async def _seal_later(self, agent_id: str, taken: list[_Post]) -> None:
        """Re-sign every post whose hash was taken 1 ms later, together: a concurrent batch with the same words
        collides with many of a batch's posts at once, and moving one per retry would exhaust the retries."""
        later = max(parse_ms(post.seal.decoded.created_at) for post in taken) + 1
        await self._seal(taken, agent_id, later)

    async def _seal(self, posts: list[_Post], agent_id: str, created_ms: int | None = None) -> None:
        """Give each post its signed record: signed here for node-kept keys, verified for records signed by
        their author. Link targets resolve in one read; the Ed25519 work runs in one call (`off_loop`)."""
        to_sign = [(post, post.body) for post in posts if isinstance(post.body, PostEntry)]
        signer = None
        if to_sign:
            with Located(to_sign[0][0].where):
                signer = await self.sealing.signer(agent_id)
        named = [(post, body) for post, body in to_sign if not agent_refs.all_dids(body.directed_to)]
        if named:  # addressees given by local name: the record carries their dids
            dids = await self.db.read(lambda c: directed_dids(c, named), quick=len(named) <= QUICK_LOOKUPS)
            to_sign = [(post, msgspec.structs.replace(body, directed_to=dids.get(id(post), body.directed_to)))
                       for post, body in to_sign]  # fmt: skip
        targets: list[list[str]] = [[] for _ in to_sign]
        if any(body.links for _, body in to_sign):
            quick = sum(len(body.links) for _, body in to_sign) <= QUICK_LOOKUPS
            targets = await self.db.read(lambda c: link_targets(c, to_sign, sight_of(c, agent_id)), quick=quick)
        created_at = format_ms(self.now_ms() if created_ms is None else created_ms)
        unsigned: dict[int, dict[str, Any]] = {}
        for (post, body), post_targets in zip(to_sign, targets, strict=True):
            with Located(post.where):
                try:
                    unsigned[id(post)] = unsigned_entry(body, agent_id, created_at, post_targets)
                except canonical.CanonicalError as exc:
                    raise InvalidInput(str(exc), field=exc.field) from None

        # many: in worker processes when they are up (Sealing.sign_many, check_many); the rest below, in order
        done: dict[int, SealedBody | BBSError] = {}
        if signer is not None and len(unsigned) >= POOL_MIN_RECORDS:
            done.update(zip(unsigned, await self.sealing.sign_many(list(unsigned.values()), signer), strict=True))
        submitted = [(id(post), post.body.record) for post in posts if isinstance(post.body, SignedSubmission)]
        if len(submitted) >= POOL_MIN_RECORDS:
            checked = await self.sealing.check_many([record for _, record in submitted], "entry", agent_id)
            done.update(zip((key for key, _ in submitted), checked, strict=True))

        def seal_all() -> None:
            for post in posts:
                with Located(post.where):
                    answer = done.get(id(post))
                    if answer is None:
                        if isinstance(post.body, SignedSubmission):
                            answer = self.sealing.check_signed_body(post.body.record, "entry", agent_id)
                        else:
                            assert signer is not None
                            answer = sign_and_check_body(unsigned[id(post)], signer)
                    if isinstance(answer, BBSError):
                        raise answer
                    post.sealed = Sealed.of(*answer)

        await self.sealing.off_loop(len(posts) - len(done), seal_all)

    def _store_all_txn(self, conn: Conn, requests: list[tuple[str, list[_Post]]]) -> list[list[Stored]]:
        return store_all_txn(conn, requests, self.now_ms(), self.sealing.authority)


# ---- transaction bodies and quick reads ---------------------------------------------------------------------


def directed_dids(conn: Conn, named: list[tuple[_Post, PostEntry]]) -> dict[int, list[str]]:
    """The dids of the addressees of posts whose `directed_to` names local agents, by id(post)."""
    out = {}
    for post, body in named:
        with Located(post.where):
            out[id(post)] = agent_refs.resolve_all(conn, body.directed_to, "$.directed_to")
    return out


class Fresh(NamedTuple):
    """An entry `store_all_txn` appended: its local id and its state in the transaction (rendered after it)."""

    id: int
    state: queries.EntryState


Stored = tuple[EntryOut | Fresh, bool]  # what store_all_txn gives per post, rendered into `Posted` by `rendered`


def rendered(post: _Post, stored: Stored) -> Posted:
    """The answer for a post `store_all_txn` stored: a replay's entry as read, a new one built from its record."""
    ref, created = stored
    if isinstance(ref, EntryOut):
        return ref, created
    return queries.entry_out_of(ref.id, post.seal.record_hash, post.seal.decoded, ref.state), created


def store_all_txn(
    conn: Conn, requests: list[tuple[str, list[_Post]]], now: int, authority: Authority
) -> list[list[Stored]]:
    """Append the sealed posts of one or more requests (agent, posts) in one set-based append; one list of
    (entry, created) per request: a replay's entry as read, a new one's id and state (`rendered` outside).

    Idempotency keys are checked again first (a request with the same key may have committed since the
    read in `Entries._post`); retractions are checked after the append, so a batch may retract its own
    entries. Concurrent requests reach here together through `Database.write_merged`; if one of them fails,
    the writer rolls this back and runs each request alone. Every step is a fixed number of statements
    whatever the number of posts (but retractions, and keys replayed since the read, one each).
    """
    posts = [(agent_id, post) for agent_id, request in requests for post in request]
    request_of = [r for r, (_, request) in enumerate(requests) for _ in request]
    stored: dict[int, tuple[EntryOut | int, bool]] = {}
    used = idempotency.used(
        conn, [(agent_id, post.key) for agent_id, post in posts if post.replay is None and post.key is not None]
    )
    for i, (agent_id, post) in enumerate(posts):
        replay: EntryOut | int | None = post.replay
        if replay is None and post.key is not None:
            with Located(post.where):
                done = idempotency.replay_of(used.get((agent_id, post.key)), "post", field="$.idempotency_key")
            if done is not None:
                replay = store.entry_id_txn(conn, done)
        if replay is not None:
            stored[i] = (replay, False)
    replayed_ids = [ref for ref, _ in stored.values() if isinstance(ref, int)]
    to_append = [i for i in range(len(posts)) if i not in stored]
    taken: list[_Post] = []
    appending = [posts[i][1] for i in to_append]
    authorize_txn(  # the key that signed each may sign for its author (docs/format-v3.md 3.5; 7.1: never waits)
        conn,
        authority,
        [(posts[i][1].seal.record, posts[i][1].seal.version, posts[i][1].record_where) for i in to_append],
    )
    posts_check.check_posts_txn(  # writers only, links inside their space (docs/spaces.md); no read when public
        conn, [posts_check.entry_post(p.seal.record_hash, p.seal.decoded, p.record_where) for p in appending]
    )
    # what the run finds stored (versions held, links naming it, confidences): one statement for all of it
    ahead = store.look_ahead_txn(
        conn, [(posts[i][1].seal.record_hash, posts[i][1].seal.decoded.author_id) for i in to_append]
    )
    held = ahead.held
    contested = {  # addresses held here with another version than the post's: a re-signing, or 409
        posts[i][1].seal.record_hash
        for i in to_append
        if posts[i][1].seal.record_hash in held
        and all(h.version != posts[i][1].seal.version for h in held[posts[i][1].seal.record_hash])
    }
    statements = equivocation.statements_held(conn, {a: held[a] for a in contested}) if contested else {}
    resigned: set[int] = set()
    to_append = _one_version_each(posts, to_append, held_versions(held), taken, statements, resigned)
    appended = projections.append_many(
        conn,
        [posts[i][1].seal.incoming() for i in to_append],
        origin="local",
        now_ms=now,
        held=held,
        named=ahead.named,
    )
    stored_by = {
        posts[i][1].seal.record_hash: request_of[i] for i, (_, new) in zip(to_append, appended, strict=True) if new
    }
    remembered = []
    for i, (seq, inserted) in zip(to_append, appended, strict=True):
        agent_id, post = posts[i]
        decoded = post.seal.decoded
        with Located(post.record_where):
            if any(
                link.link_type == "supersedes" and stored_by.get(link.target, request_of[i]) != request_of[i]
                for link in decoded.links
            ):
                raise _CrossRequest()
            check_links(conn, decoded)
        if post.key is not None:
            remembered.append((agent_id, post.key, "post", post.seal.record_hash, now))
        stored[i] = (seq, inserted)
    db.insert_rows(conn, idempotency.REMEMBER, remembered)
    if taken:
        raise HashTaken(taken)
    _answer_held_as_shown_txn(
        conn, posts, [i for i, (_, new) in zip(to_append, appended, strict=True) if not new or i in resigned], stored
    )
    states = states_known([posts[i][1] for i in to_append], appended, ahead)
    if states is None:  # something stored or in the run gives them a state: read it
        states = store.entry_states(conn, [seq for seq, _ in appended])
    # a replay answers the agent with its own entry, whatever its role in the entry's space now (docs/spaces.md)
    by_id = {out.id: out for out in store.entries_by_ids(conn, replayed_ids, OPERATOR)} if replayed_ids else {}
    results: list[Stored] = []
    for i in range(len(posts)):
        ref, created = stored[i]
        if isinstance(ref, EntryOut):
            results.append((ref, created))
        elif ref in by_id:
            results.append((by_id[ref], created))
        else:
            results.append((Fresh(ref, states[ref]), created))
    answers, start = [], 0
    for _, request in requests:
        answers.append(results[start : start + len(request)])
        start += len(request)
    return answers


def states_known(
    run: list[_Post], appended: list[tuple[int, bool]], ahead: store.LookAhead
) -> dict[int, queries.EntryState] | None:
    """The state of each entry of `run` just appended (by seq), known without reading it back when nothing can
    have given it one: every one is a new address (no other version held, none twice in the run), no stored
    `supersedes` link names any of them, and none of them supersedes (or retracts) another of the run. Then none
    is retracted, superseded or equivocated, it has no claims, and its community confidence is what the look-ahead
    read (COMMUNITY_CONFIDENCE). Otherwise None: `store.entry_states` reads them."""
    hashes = {post.seal.record_hash for post in run}
    if ahead.named.superseded or ahead.held or len(hashes) != len(run) or not all(new for _, new in appended):
        return None
    for post in run:
        if any(link.link_type == "supersedes" and link.target in hashes for link in post.seal.decoded.links):
            return None
    return {
        seq: queries.EntryState(False, False, ahead.confidence[post.seal.record_hash], [], False)
        for post, (seq, _) in zip(run, appended, strict=True)
    }


def _answer_held_as_shown_txn(
    conn: Conn,
    posts: list[tuple[str, _Post]],
    again: list[int],
    stored: dict[int, tuple[EntryOut | int, bool]],
) -> None:
    """Posts whose version the log already held are answered with their address's entry as it is shown: the
    log's seq of a held version is not the entries row's id when the version is an equivocated address's loser."""
    if not again:
        return
    hashes = [posts[i][1].seal.record_hash for i in again]
    shown = {out.record_hash: out for out in store.entries_by_hashes(conn, hashes, True, OPERATOR)}
    for i in again:
        out = shown.get(posts[i][1].seal.record_hash)
        if out is not None:
            stored[i] = (out, False)


def _one_version_each(
    posts: list[tuple[str, _Post]],
    to_append: list[int],
    held: dict[str, set[str]],
    taken: list[_Post],
    statements: dict[str, set[str]],
    resigned: set[int],
) -> list[int]:
    """The posts to append: a post whose address holds (here, or earlier in the batch) another version is never
    a second version. One the node signed had its hash taken by a different entry (same words, same
    millisecond): it goes to `taken`, re-signed 1 ms later. One its author signed is an equivocation: 409, unless
    it is a held version re-signed by another key of its author (`statements`: `equivocation.statements_held` of
    the held addresses; docs/format-v3.md 3.6), which is appended and goes to `resigned`. `held` is
    `held_versions` of their addresses (read once, passed on to the append)."""
    out = []
    for i in to_append:
        post = posts[i][1]
        address, version = post.seal.record_hash, post.seal.version
        if address not in held or version in held[address]:
            held.setdefault(address, {version})
            out.append(i)
        elif isinstance(post.body, SignedSubmission) and equivocation.statement_of(post.seal.record) in statements.get(
            address, set()
        ):
            held[address].add(version)
            resigned.add(i)
            out.append(i)
        elif isinstance(post.body, PostEntry):
            taken.append(post)  # rolled back, re-signed 1 ms later
        else:
            with Located(post.where):
                raise Conflict(
                    f"entry {address} is stored here with a different body: an author signs one body per address",
                    field="$",
                    code="equivocation",
                )
    return out


def held_versions(held: dict[str, list[equivocation.Held]]) -> dict[str, set[str]]:
    """The versions stored here of each address `equivocation.held` found."""
    return {a: {h.version for h in versions} for a, versions in held.items()}


def store_with_txn(
    conn: Conn,
    agent_id: str,
    post: _Post,
    derived_from: list[str],
    signer: keys.SigningKey | None,
    then: Callable[[Conn, EntryOut], None],
    now_ms: Callable[[], int],
    authority: Authority,
) -> Posted:
    """`Entries.post_with` in its transaction: the entry, its derived links, then the caller's `then`."""
    ((stored,),) = store_all_txn(conn, [(agent_id, [post])], now_ms(), authority)
    posted = rendered(post, stored)
    derive_links_txn(conn, posted[0], derived_from, agent_id, signer, now_ms())
    then(conn, posted[0])
    return posted


def derive_links_txn(
    conn: Conn,
    entry: EntryOut,
    targets: list[str],
    agent_id: str,
    signer: keys.SigningKey | None,
    now: int,
) -> None:
    """Append a node-signed `derived_from` link record from `entry` to each target the agent has not already
    linked it to that way (`Entries.post_with`)."""
    for target in targets:
        assert signer is not None
        if store.derived_link_held_txn(conn, entry.record_hash, target, agent_id):
            continue
        unsigned = unsigned_link(agent_id, now, entry.record_hash, target, "derived_from", space=entry.space)
        record, record_hash, decoded = sign_and_check(unsigned, signer)
        projections.append(conn, record, record_hash, decoded, origin="local", now_ms=now)


def replays(conn: Conn, agent_id: str, posts: list[_Post]) -> list[EntryOut | None]:
    """The entry each keyed post's idempotency key already stored, or None (one quick read for a request)."""
    found = []
    for post in posts:
        assert post.key is not None
        with Located(post.where):
            found.append(replayed_entry(conn, agent_id, post.key))
    return found


def replayed_entry(conn: Conn, agent_id: str, key: str) -> EntryOut | None:
    """The entry the agent's idempotency `key` stored, or None (409 if the key did something else)."""
    done = idempotency.replayed(conn, agent_id, key, "post", field="$.idempotency_key")
    if done is None:
        return None
    return store.entry_by_hash(conn, done)


def link_targets(conn: Conn, to_sign: list[tuple[_Post, PostEntry]], sight: Sight) -> list[list[str]]:
    """The record hash of every link target of each node-signed post as its author's `sight` sees them, or 404
    naming the link."""
    resolved = []
    for post, body in to_sign:
        with Located(post.where):
            resolved.append(
                [
                    store.require_ref(
                        conn, link.target, "link target", sight, field=f"$.links[{i}].target", code="target_not_found"
                    )
                    for i, link in enumerate(body.links)
                ]
            )
    return resolved


def check_early(conn: Conn, retracting: list[_Post], own: frozenset[str]) -> None:
    """`check_links` of a request's retractions before its write (see there)."""
    for post in retracting:
        with Located(post.record_where):
            check_links(conn, post.seal.decoded, early=True, own=own)


def retracted(rec: EntryRecord) -> list[tuple[int, str]]:
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


def check_links(conn: Conn, rec: EntryRecord, *, early: bool = False, own: frozenset[str] = frozenset()) -> None:
    """Retractions: a retract entry names, by a supersedes link, an entry of its own author that exists here.

    `early` is the read before the write, which decides only what cannot change by then: a target stored
    under another author (403). A target not stored yet may still be stored ahead of this entry, and the
    request's own entries (`own`: a batch may retract its own) are skipped; the writer decides those.
    """
    for i, target in retracted(rec):
        if target in own:
            continue
        author = store.author_of(conn, target)
        if author is None:
            if early:
                continue
            raise NotFound(
                "the entry to retract is not on this node", field=f"$.links[{i}].target", code="target_not_found"
            )
        if author != rec.author_id:
            raise Forbidden(
                "an agent can only retract its own entries", field=f"$.links[{i}].target", code="retract_not_own"
            )
