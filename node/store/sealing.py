"""Sealing: the one owner of signing and checking records on their way in.

A record reaches the log sealed one of two ways: the node signs it with a key it keeps for the agent
(`Sealing.signer`, then `sign_and_check`), or the author signed it and the node checks it
(`Sealing.check_signed`); both apply the submission rules of node/store/submission.py, which sync ingest does not.
Every feature that writes records (entries, links, workflows) uses these, and
`until_hash_free` when a node-signed record's hash turns out to be taken.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import os
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, NoReturn, TypeVar

import msgspec

from identity import keys, records, schema, schema_v3
from node.agents import service as agents
from node.errors import BBSError, Conflict, Forbidden, InvalidInput
from node.store import submission
from node.store.authority import AUTHORITY_KINDS, Authority
from node.store.db import Database
from node.store.key_fence import KeyFence
from sync import workers
from wire.time import parse_ms

MAX_FUTURE_SKEW_MS = 5 * 60 * 1000
CRYPTO_THREADS = max(1, (os.cpu_count() or 2) - 1)  # see Sealing.off_loop
MAX_HASH_RETRIES = 16  # node-signed records whose hash is taken by a different record move 1 ms later
# node-signed records in one call from which they are signed in worker processes (`Sealing.sign_many`)
POOL_MIN_RECORDS = 32
OWN_KEY = "this agent holds its own key: sign the record and submit it as {'record': ...}"

T = TypeVar("T")
SealedRecord = tuple[dict[str, Any], str, Any]  # (record, its hash, its decoded Struct), ready to append


def record_error(exc: records.RecordError, prefix: str = "$") -> InvalidInput:
    """Map a record verification failure to the client-facing error; `prefix` is where the record sits."""
    field = prefix + exc.field[1:] if exc.field.startswith("$") else exc.field
    return InvalidInput(str(exc), field=field, code=f"record_{exc.reason}")


def check_authored(
    record: dict[str, Any], agent_id: str, kinds: Sequence[str], where: str = "$.record", *, v3: bool = True
) -> tuple[str, bytes, Any]:
    """Check a record a client signed and sent at `where`: one of `kinds`, every record rule (`v3`: the format-v3
    rules too) and the signature, the submission rules, and that the caller `agent_id` is its author. Returns its
    hash, canonical bytes and decoded Struct. The clock is the caller's (`Sealing.check_clock`)."""
    if record.get("kind") not in kinds:
        raise InvalidInput(f"record kind must be {' or '.join(map(repr, kinds))}", field=f"{where}.kind",
                           code="record_malformed")  # fmt: skip
    try:
        body = records.canonical_body(record)
        record_hash, decoded = records.check(record, body=body, v3=v3)
    except records.RecordError as exc:
        raise record_error(exc, where) from None
    submission.check_record(record, where)
    if decoded.author_id != agent_id:
        raise Forbidden("an agent can only write records it authored", field=f"{where}.author_id")
    return record_hash, body, decoded


def sign_and_check(unsigned: dict[str, Any], signer: keys.SigningKey) -> SealedRecord:
    """Sign a normalised record, then check it as any receiving node will: (record, hash, decoded Struct).

    Every rule runs but the Ed25519 verification of the signature just made: `records.sign` refuses a key that
    is not the record's author, and re-verifying our own signature cost a fifth of a node-signed entry's CPU.
    """
    return sign_and_check_body(unsigned, signer)[0]


def sign_and_check_body(unsigned: dict[str, Any], signer: keys.SigningKey) -> tuple[SealedRecord, bytes]:
    """`sign_and_check`, and the signed record's canonical bytes, encoded once for the check and the log row.

    A key that is not the author's first one (a node-kept agent whose key was rotated, docs/format-v3.md 3.6) is
    named in `signing_key`; only the kinds of `records.V3_KINDS` may carry one (422 `rotated_key_unsupported`:
    every kind a node signs is one of them, so only a kind of a later format would be).
    """
    rotated = signer.did != unsigned.get("author_id")
    v3 = _in_v3(unsigned, rotated)
    if rotated:
        if unsigned.get("kind") not in records.V3_KINDS | CLIENT_ONLY_KINDS:
            raise InvalidInput(
                f"records of kind {unsigned.get('kind')!r} cannot be signed by a rotated key: this agent's key"
                " was rotated",
                code="rotated_key_unsupported",
            )
        unsigned = {**unsigned, "signing_key": signer.did}
    record = records.sign(unsigned, signer)
    try:
        body = records.canonical_body(record)
        record_hash, decoded = records.check(record, check_signature=False, body=body, v3=v3)
    except records.RecordError as exc:
        raise record_error(exc) from None
    submission.check_record(record)
    return (record, record_hash, decoded), body


CLIENT_ONLY_KINDS = records.SPACE_KINDS | records.REDACTION_KINDS  # v3 kinds a node takes from its clients only


def _in_v3(unsigned: dict[str, Any], rotated: bool) -> bool:
    """Whether a record the node signs is checked as format v3: signed by a rotated key, in a space, or of a v3 kind."""
    return rotated or "space" in unsigned or unsigned.get("kind") in AUTHORITY_KINDS | CLIENT_ONLY_KINDS


def authored_body(record: dict[str, Any], agent_id: str, kind: str) -> tuple[SealedRecord, bytes]:
    """`check_authored` of a record `agent_id` signed and submitted: (record, hash, decoded) and its canonical bytes.

    A record naming a `signing_key` (a rotated key) is checked against it; whether that key may sign for its author
    is the writer's question (`node.store.authority.authorize_txn`). One inside a `space` is in format v3 too;
    whether its author may write there is the writer's (`node.spaces.posts`). The clock is the caller's."""
    record_hash, body, decoded = check_authored(record, agent_id, (kind,), v3=_authored_v3(record))
    return (record, record_hash, decoded), body


def _authored_v3(record: dict[str, Any]) -> bool:
    return "signing_key" in record or "space" in record


# A record's answer across a process boundary: its canonical bytes and hash, or its refusal as (the error's class
# name, detail, field, code); only bytes and strings cross, the parent decodes the record again (`_decoded`).
Answer = tuple[bytes, str] | tuple[str, str, str | None, str]
SealedBody = tuple[SealedRecord, bytes]  # a sealed record and its canonical bytes
_REFUSALS: dict[str, type[InvalidInput] | type[Forbidden]] = {"InvalidInput": InvalidInput, "Forbidden": Forbidden}


def signed_in_worker(seed: bytes, unsigned: list[dict[str, Any]]) -> list[Answer]:
    """In a worker process: `sign_and_check_body` of each record with the key of this seed (`Sealing.sign_many`)."""
    signer = keys.SigningKey.from_seed(seed)
    return _answers(unsigned, lambda record: sign_and_check_body(record, signer))


def checked_in_worker(kind: str, agent_id: str, submitted: list[dict[str, Any]]) -> list[Answer]:
    """In a worker process: `authored_body` of each record `agent_id` submitted (`Sealing.check_many`)."""
    return _answers(submitted, lambda record: authored_body(record, agent_id, kind))


def _answers(items: list[dict[str, Any]], seal: Callable[[dict[str, Any]], SealedBody]) -> list[Answer]:
    out: list[Answer] = []
    for item in items:
        try:
            (_, record_hash, _), body = seal(item)
        except (InvalidInput, Forbidden) as exc:
            out.append((type(exc).__name__, exc.detail, exc.field, exc.code))
        else:
            out.append((body, record_hash))
    return out


def _decoded(record: dict[str, Any], v3: bool, record_hash: str, body: bytes) -> SealedBody:
    """A record a worker passed, as `records.check` decodes it there: (record, hash, decoded Struct) and its bytes."""
    struct = schema_v3.struct_for(record) if v3 else schema.RECORD_TYPES[record["kind"]]
    assert struct is not None
    return (record, record_hash, msgspec.convert(record, struct)), body


def agent_signs_own_records(detail: str = OWN_KEY) -> NoReturn:
    """Refuse to sign for an agent whose key this node does not keep (400 `agent_signs_own_records`)."""
    raise InvalidInput(detail, code="agent_signs_own_records")


class HashTaken(Exception):
    """Node-signed records whose hashes belong to different stored records (same words, same millisecond).

    Raised inside a write, so the transaction rolls back; `until_hash_free` then re-signs them 1 ms later.
    `taken` is what the writer found taken, in the terms of the feature that raised it.
    """

    def __init__(self, taken: list[Any]) -> None:
        super().__init__(f"{len(taken)} record hash(es) taken")
        self.taken = taken


async def until_hash_free(
    write: Callable[[], Awaitable[T]], reseal: Callable[[list[Any]], Awaitable[None]], what: str
) -> T:
    """Run `write` until it raises no HashTaken, calling `reseal` with what was taken between tries.

    A 409 `hash_taken` after MAX_HASH_RETRIES tries: the records would have to move too far from now.
    """
    for _ in range(MAX_HASH_RETRIES):
        try:
            return await write()
        except HashTaken as exc:
            await reseal(exc.taken)
    raise Conflict(f"could not find a free created_at for this {what}; retry", code="hash_taken")


class Sealing:
    """The keys this node keeps for its agents (cached), the checks of author-signed records, and the threads
    that do the Ed25519 work of many records at once."""

    def __init__(self, db: Database, now_ms: Callable[[], int]) -> None:
        self.db = db
        self.now_ms = now_ms
        self._keys: dict[str, keys.SigningKey | None] = {}
        # the writer's authority cache (node/store/authority.py): sync ingest and local writes share this one
        self.authority = Authority()
        # what `_keys` is valid for: it is forgotten when this moves (record 90). The authority's changes (a key
        # event this process stored or loaded); `Node` adds the credential epoch, which every key event stored by
        # any process of the node moves (migration 0025) and which requests look at once a second.
        self.keys_valid_for: Callable[[], object] = lambda: self.authority.changes
        self._keys_for: object = None
        self.key_fence = KeyFence(None)  # the data folder's (node/store/key_fence.py): set by the node
        self._crypto: concurrent.futures.ThreadPoolExecutor | None = None
        self.pool: workers.WorkerPool = workers.POOL  # the process's worker processes (`sign_many`)

    async def signing_key(self, agent_id: str) -> keys.SigningKey | None:
        """The agent's private key if this node keeps it (looked up once, then cached; a rotation here forgets it,
        a key event stored by another process of the node within a second: `keys_valid_for`)."""
        valid_for = self.keys_valid_for()
        if valid_for != self._keys_for:
            self._keys.clear()
            self._keys_for = valid_for
        if agent_id in self._keys:
            return self._keys[agent_id]
        key = await self.db.read(lambda c: agents.signing_key(c, agent_id))
        if self.keys_valid_for() == valid_for:  # nothing moved during the read: keep it
            self._keys[agent_id] = key
        return key

    async def signer(self, agent_id: str, detail: str = OWN_KEY) -> keys.SigningKey:
        """The key to sign for `agent_id` with, or `agent_signs_own_records` (`detail` says why) without one."""
        key = await self.signing_key(agent_id)
        if key is None:
            agent_signs_own_records(detail)
        refused = self.key_fence.refusal(agent_id, key.did)  # a restore from before a rotation of this key
        if refused is not None:
            raise Conflict(refused, code="signing_key_rotated_out")
        return key

    def forget(self, agent_id: str) -> None:
        """Drop the cached key (or its absence) of an agent registered or re-registered since it was looked up."""
        self._keys.pop(agent_id, None)

    def check_signed(self, record: dict[str, Any], kind: str, agent_id: str) -> SealedRecord:
        """Check a record its author signed and submitted as `{'record': ...}`: its kind, every record rule and
        the signature, that the caller is its author, and its clock. Returns (record, hash, decoded Struct)."""
        return self.check_signed_body(record, kind, agent_id)[0]

    def check_signed_body(self, record: dict[str, Any], kind: str, agent_id: str) -> SealedBody:
        """`check_signed`, and the record's canonical bytes, encoded once for the checks and the log row."""
        sealed = authored_body(record, agent_id, kind)
        self.check_clock(sealed[0][2].created_at, "$.record.created_at")
        return sealed

    def check_clock(self, created_at: str, field: str) -> None:
        """Refuse a `created_at` more than MAX_FUTURE_SKEW_MS ahead of this node's clock (400 `clock_skew`)."""
        if parse_ms(created_at) > self.now_ms() + MAX_FUTURE_SKEW_MS:
            raise InvalidInput("created_at is more than 5 minutes in the future", field=field, code="clock_skew")

    async def off_loop(self, items: int, fn: Callable[..., T], *args: Any) -> T:
        """Run CPU-bound work on `items` records (Ed25519 signing and verification, canonical checks): on the
        crypto threads when there are several, on the event loop for one.

        libsodium (through cffi) releases the GIL inside Ed25519, so another core verifies a batch while the event loop
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

    async def sign_many(self, unsigned: list[dict[str, Any]], signer: keys.SigningKey) -> list[SealedBody | BBSError]:
        """`sign_and_check_body` of many records signed with one key, each answered or refused, in order (`_many`)."""

        def again(item: dict[str, Any], record_hash: str, body: bytes) -> SealedBody:
            return _decoded(
                msgspec.json.decode(body), _in_v3(item, signer.did != item.get("author_id")), record_hash, body
            )

        return await self._many(
            unsigned, signed_in_worker, (signer.seed,), lambda item: sign_and_check_body(item, signer), again
        )

    async def check_many(
        self, submitted: list[dict[str, Any]], kind: str, agent_id: str
    ) -> list[SealedBody | BBSError]:
        """`check_signed_body` of many records `agent_id` signed and submitted, each answered or refused, in order
        (`_many`); the clock is checked here, against this process's."""

        def again(item: dict[str, Any], record_hash: str, body: bytes) -> SealedBody:
            sealed = _decoded(item, _authored_v3(item), record_hash, body)
            self.check_clock(sealed[0][2].created_at, "$.record.created_at")
            return sealed

        return await self._many(
            submitted,
            checked_in_worker,
            (kind, agent_id),
            lambda item: self.check_signed_body(item, kind, agent_id),
            again,
        )

    async def _many(
        self,
        items: list[dict[str, Any]],
        job: Callable[..., list[Answer]],
        args: tuple[Any, ...],
        here: Callable[[dict[str, Any]], SealedBody],
        again: Callable[[dict[str, Any], str, bytes], SealedBody],
    ) -> list[SealedBody | BBSError]:
        """Seal `items`, each answered or refused (InvalidInput, Forbidden), in order.

        From POOL_MIN_RECORDS records on, once the node's worker processes are up (sync/workers.py; the first such
        call starts them), `job(*args, chunk)` runs there, one chunk per worker: the Ed25519 work and the Python of
        building and checking each record then hold the workers' GILs, not the one the event loop, the writer and
        the indexer share (docs/decisions.md record 91), and `again` makes each passed record's answer from its
        bytes here. Fewer records, or before the workers are up, or without them: `here` on the crypto threads.
        """
        if len(items) >= POOL_MIN_RECORDS:
            calls = [(*args, chunk) for chunk in workers.chunks(items, self.pool.workers)]
            done = await self.pool.run(job, calls, wait=False)
            if done is not None:
                answers = [answer for chunk in done for answer in chunk]
                return [_answered(item, answer, again) for item, answer in zip(items, answers, strict=True)]

        def on_threads() -> list[SealedBody | BBSError]:
            out: list[SealedBody | BBSError] = []
            for item in items:
                try:
                    out.append(here(item))
                except (InvalidInput, Forbidden) as exc:
                    out.append(exc)
            return out

        return await self.off_loop(len(items), on_threads)

    def close(self) -> None:
        """Stop the crypto threads (started again by the next `off_loop` of several records)."""
        if self._crypto is not None:
            self._crypto.shutdown(wait=True)
            self._crypto = None


def _answered(
    item: dict[str, Any], answer: Answer, again: Callable[[dict[str, Any], str, bytes], SealedBody]
) -> SealedBody | BBSError:
    """A worker's answer for `item`: its refusal raised there, or `again` of its bytes (which may refuse it here)."""
    if len(answer) == 4:
        name, detail, field, code = answer
        return _REFUSALS[name](detail, field=field, code=code)
    body, record_hash = answer
    try:
        return again(item, record_hash, body)
    except (InvalidInput, Forbidden) as exc:
        return exc
