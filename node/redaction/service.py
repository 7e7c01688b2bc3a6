"""Redactions from clients (issue 39, its one-node slice; docs/api.md "Redaction"): a node-kept agent names the
target and the node signs the `redaction` record, a self-signing agent submits its signed record. Decided in the
storing transaction: the redaction's key (`authorize_txn`), then, when the target is held, its authority against the
target's body (`rules.refusal`: 403 `not_target_author`, 422 `not_redactable`, `space_mismatch`); a target never
seen here does not make it wait (docs/format-v3.md 5.1): it is stored at once and the body is refused when it comes
(`effects.screen_txn`). Redaction records federate with their target's scope (docs/sync.md, "Redaction"): stored
`federation`, in the target's space when it names one, so they go where the target went and nowhere else.
"""

from __future__ import annotations

import asyncio
import contextlib
import unicodedata
from collections.abc import Callable
from typing import Any

from identity import canonical, records
from identity.space_rules import may_read
from node.errors import BBSError, Forbidden, InvalidInput
from node.redaction import effects, rules, store
from node.spaces import store as space_store
from node.spaces.sight import Sight
from node.store import projections
from node.store.authority import authorize_txn
from node.store.conn import Conn
from node.store.db import Database
from node.store.sealing import Sealing, check_authored, sign_and_check_body
from sync.store import Verified
from wire.redaction import Purged, PurgeList, PurgeOut, RedactionOut, Tombstone
from wire.time import format_ms

KIND = "redaction"
DEFAULT_GRACE_S = 24 * 3600  # how long the bytes of a dropped body may stay on disk (`redaction_grace_s`)


def refusal_error(reason: str, where: str) -> BBSError:
    """The client-facing error of a redaction void for its target (`rules.refusal`'s reason)."""
    if reason == rules.NOT_TARGET_AUTHOR:
        return Forbidden(
            "only the target's author, or an owner or admin of its space, may redact it",
            field=f"{where}.author_id",
            code=rules.NOT_TARGET_AUTHOR,
        )
    if reason == rules.SPACE_MISMATCH:
        return InvalidInput("a redaction names its target's space, and only then", field=f"{where}.space",
                            code=rules.SPACE_MISMATCH)  # fmt: skip
    return InvalidInput(
        "only entries, links and bus messages are redactable (not redactions, key events, space records, agent"
        " documents or task events)",
        field=f"{where}.target",
        code=rules.NOT_REDACTABLE,
    )


def check_client_record(record: dict[str, Any], agent_id: str, where: str = "$.record") -> Verified:
    """Check a `redaction` record a client signed: every record rule and the signature, and that the caller wrote
    it."""
    record_hash, body, decoded = check_authored(record, agent_id, (KIND,), where)
    return Verified(record_hash, body, record, decoded)


def store_txn(conn: Conn, sealing: Sealing, verified: Verified, where: str, now_ms: int) -> RedactionOut:
    """Decide and store a client's redaction (module docstring); nothing stored when it is refused."""
    record = verified.record
    target = str(record["target"])
    authorize_txn(conn, sealing.authority, [(record, verified.version, where)])
    if store.redaction(conn, target) is not None:
        raise refusal_error(rules.NOT_REDACTABLE, where)  # a redaction of a redaction: the only undo is a revocation
    author = str(record["author_id"])
    already = [t for t in store.tombstones(conn, [target]) if t.author_id == author or _sees(conn, author, t.space)]
    if store.redaction(conn, verified.hash) is not None or already:
        # stored before, or the target is redacted already: nothing changes
        return RedactionOut(
            redaction=already[0].redaction if already else verified.hash,
            target=target,
            created=False,
            tombstone=effects.tombstone_out(already[0]) if already else None,
        )
    held = store.held_versions(conn, target)
    if held and held[0].record["author_id"] != author and not _sees(conn, author, held[0].record.get("space")):
        held = []  # another's post in a space the author may not read: answered as a target not seen here
    space = record.get("space") if isinstance(record.get("space"), str) else None
    if held:
        moderates = effects.moderates_txn(conn)
        reason = rules.refusal(author, space, verified.hash, held[0].record, moderates)
        if reason is not None:
            raise refusal_error(reason, where)
    # the target's scope: a redaction of a `local` record stays here too (a target not seen here: federated)
    scope = "local" if held and held[0].record.get("scope") == "local" else "federation"
    incoming = projections.Incoming(record, verified.hash, verified.decoded, scope, verified.body)
    projections.append_many(conn, [incoming], origin="local", now_ms=now_ms)
    kept = [t for t in store.tombstones(conn, [target]) if t.author_id == author or _sees(conn, author, t.space)]
    return RedactionOut(
        redaction=verified.hash,
        target=target,
        created=True,
        pending=not kept,
        tombstone=effects.tombstone_out(kept[0]) if kept else None,
    )


def _sees(conn: Conn, agent: str, space: object) -> bool:
    """Whether `agent` may read a record of `space` (None: public), by the read rule (docs/spaces.md)."""
    return not isinstance(space, str) or may_read(space_store.role(conn, space, agent))


class Redactions:
    """Redaction on one node: clients' redactions, and the tombstones reads answer."""

    def __init__(self, db: Database, sealing: Sealing, now_ms: Callable[[], int]) -> None:
        self.db = db
        self.sealing = sealing
        self.now_ms = now_ms
        self.grace_s = DEFAULT_GRACE_S  # `redaction_grace_s`: before a dropped body's bytes are scrubbed from disk
        self._work = asyncio.Event()  # set when a redaction dropped a body: the scrubber looks at once
        self.rewritten = 0  # documents the scrubs added again to the search index (node/redaction/scrub.py)

    def wake(self) -> None:
        """Tell the scrubber (node/redaction/scrub.py) that a body was dropped."""
        self._work.set()

    async def wait_for_work(self, timeout: float) -> None:
        """Wait until `wake` or `timeout` seconds, whichever comes first (the scrubber's sleep)."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._work.wait(), timeout)
        self._work.clear()

    async def submit(self, agent_id: str, record: dict[str, Any]) -> RedactionOut:
        """Store a `redaction` record its author signed (`check_client_record`, `store_txn`)."""
        verified = check_client_record(record, agent_id)
        self.sealing.check_clock(str(record["created_at"]), "$.record.created_at")
        out = await self.db.write(lambda conn: store_txn(conn, self.sealing, verified, "$.record", self.now_ms()))
        self.wake()
        return out

    async def redact(self, agent_id: str, target: str, reason: str | None) -> RedactionOut:
        """Redact `target` for a node-kept agent: the node signs the `redaction` record (naming the target's space
        when the target is held in one)."""
        signer = await self.sealing.signer(agent_id)

        def job(conn: Conn) -> RedactionOut:
            held = store.held_versions(conn, target)
            unsigned: dict[str, Any] = {
                "kind": KIND,
                "schema_version": canonical.SCHEMA_VERSION,
                "author_id": agent_id,
                "created_at": canonical.now_created_at(),
                "target": target,
            }
            space = held[0].record.get("space") if held else None
            if isinstance(space, str):
                unsigned["space"] = space
            if reason is not None:
                unsigned["reason"] = unicodedata.normalize("NFC", reason)
            (record, record_hash, decoded), body = sign_and_check_body(unsigned, signer)
            return store_txn(conn, self.sealing, Verified(record_hash, body, record, decoded), "$", self.now_ms())

        out = await self.db.write(job)
        self.wake()
        return out

    async def purge(self, target: str | None, author: str | None, reason: str | None) -> PurgeOut:
        """The operator's purge from this node alone (`effects.purge_txn`): one address, or every entry, link and
        bus message of `author` held here, in one transaction. Never federated; `bbs doctor` counts them."""
        if (target is None) == (author is None):
            raise InvalidInput("name a target or an author, not both", field="$.target", code="purge_target")

        def job(conn: Conn) -> PurgeOut:
            now = self.now_ms()
            if target is not None:
                kind = store.kind_held(conn, target)
                if kind is not None and kind not in records.REDACTABLE_KINDS:
                    raise InvalidInput("only entries, links and bus messages can be purged", field="$.target",
                                       code="not_purgeable")  # fmt: skip
                addresses = [target]
            else:
                addresses = store.addresses_of_author(conn, str(author), records.REDACTABLE_KINDS)
            done = [row.hash for a in addresses if (row := effects.purge_txn(conn, a, reason, now)) is not None]
            return PurgeOut(purged=done)

        out = await self.db.write(job)
        self.wake()
        return out

    async def purges(self, limit: int) -> PurgeList:
        """The operator's view of what was removed here (`bbs doctor`'s counts, listed): the `limit` newest purges,
        how many in all and of how many authors, and how many tombstones of redactions the node holds."""

        def run(conn: Conn) -> PurgeList:
            total, authors = store.purge_counts(conn)
            rows = store.newest_purges(conn, limit)
            listed = [
                Purged(
                    hash=r.hash,
                    kind=r.kind,
                    author_id=r.author_id,
                    versions=len(r.versions),
                    reason=r.reason,
                    purged_at=format_ms(r.purged_ms),
                )
                for r in rows
            ]
            return PurgeList(purges=listed, total=total, authors=authors, tombstones=store.count(conn))

        return await self.db.read(run, quick=True)

    async def tombstones(self, addresses: list[str], sight: Sight) -> list[Tombstone]:
        """The tombstones of those of `addresses` redacted here that `sight` may see."""
        rows = await self.db.read(lambda conn: store.tombstones(conn, addresses), quick=True)
        return [effects.tombstone_out(row) for row in rows if sight.sees(row.space)]
