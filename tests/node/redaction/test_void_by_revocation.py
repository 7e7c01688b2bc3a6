"""A thief cannot destroy in one stroke (issue 39; docs/decisions.md record 69): a redaction signed by a key that a
later revocation does not vouch for is void, and its target shows again. On a real server on loopback over a real
SQLite file, with real Ed25519 keys: a self-signing agent's key is stolen, the thief redacts the agent's entry, the
owner revokes the key with its recovery key, vouching for its own records and not the redaction."""

from __future__ import annotations

import itertools
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import pytest
from aiohttp.test_utils import TestClient

from identity import canonical, keys, records, vouching
from node.redaction import store as redaction_store
from node.service import Node
from node.store import void
from node.store.conn import Conn
from node.web.appkeys import SEARCH_INDEXER
from tests.conftest import AgentCreds
from tests.node.api_helpers import SelfSigner, entry_record, get_json, hash_of, ingest, self_signer
from tests.node.federation.v3_story import key_event, vouch_page
from tests.node.redaction.test_scrub import scrub_now
from tests.node.store.test_void import by, key_events, rebuilt_equals, send, served, until, version_of
from wire.time import format_ms

MakeAgent = Callable[[str], Awaitable[AgentCreds]]
WORD = "zebraquartz"  # a term of the entry's content, searched for


@dataclass
class Theft:
    """The records of the story: the owner's rotation, its entry, the thief's redaction, the revocation."""

    owner: SelfSigner
    rotate: dict[str, Any]
    rotate_page: dict[str, Any]
    entry: dict[str, Any]
    redaction: dict[str, Any]
    revoke: dict[str, Any]
    revoke_pages: list[dict[str, Any]]
    stolen: keys.SigningKey
    after: keys.SigningKey  # the key the revocation installs
    recovery: keys.SigningKey


def redaction_by(author: str, signer: keys.SigningKey, target: str, created_ms: int) -> dict[str, Any]:
    """A redaction of `target` for `author`, signed by `signer` (a rotated-in key: it names it)."""
    body = {
        "kind": "redaction",
        "schema_version": canonical.SCHEMA_VERSION,
        "author_id": author,
        "created_at": format_ms(created_ms),
        "target": target,
        "reason": "stolen key",
    }
    return records.sign({**body, "signing_key": signer.did}, signer)


def entry_by(author: str, signer: keys.SigningKey, content: str, created_ms: int) -> dict[str, Any]:
    """An entry of `author` signed by its rotated-in key `signer`."""
    return by(entry_record(signer, content, created_ms=created_ms), author, signer)


async def theft(node: Node) -> Theft:
    """The story's records (nothing stored): the owner's first key k0 rotates to k1 with a recovery key; the owner
    posts an entry with k1; the thief, holding k1, redacts it; the owner revokes k1 with the recovery key, vouching
    for the entry and not the redaction, and installs k2."""
    owner = await self_signer(node, "owner")
    k0, k1, k2, recovery = owner.key, *(keys.SigningKey.generate() for _ in range(3))
    author = owner.agent_id
    now = node.now_ms()
    doc = await node.db.read(
        lambda c: json.loads(bytes(c.execute("SELECT body FROM records WHERE kind = 'agent'").fetchone()[0]))
    )
    rotate = key_event(
        k0,
        "rotate",
        1,
        installs=k1,
        recovery=recovery,
        vouches=[vouching.vouch(k0.did, [version_of(doc)])],
        created_at=format_ms(now),
        author=author,
    )
    rotate_page = vouch_page(k0, rotate, k0, [version_of(doc)], author=author)
    entry = entry_by(author, k1, f"the plan for {WORD} stays", now + 1)
    redaction = redaction_by(author, k1, hash_of(entry), now + 2)
    revoke = key_event(
        recovery,
        "revoke",
        2,
        prior=rotate,
        installs=k2,
        vouches=[vouching.vouch(k1.did, [version_of(entry)])],
        created_at=format_ms(now + 3),
        author=author,
    )
    pages = [vouch_page(recovery, revoke, k1, [version_of(entry)], author=author)]
    return Theft(owner, rotate, rotate_page, entry, redaction, revoke, pages, k1, k2, recovery)


async def shows(client: TestClient, node: Node, story: Theft, visible: bool) -> None:
    """Reads, search and what peers are served show the entry exactly when `visible`; else its tombstone."""
    address = hash_of(story.entry)
    read = await get_json(client, f"/v1/entries/{address}", story.owner)
    assert [e["record_hash"] for e in read["entries"]] == ([address] if visible else [])
    assert [t["hash"] for t in read["redacted"]] == ([] if visible else [address])
    worker = client.app[SEARCH_INDEXER]

    async def indexed() -> bool:
        queued = await node.db.read(lambda c: c.execute("SELECT count(*) FROM search_redo").fetchone()[0])
        return queued == 0 and (worker.index.seq_of(address) is not None) == visible

    await until(indexed)
    hits = await get_json(client, "/v1/search", story.owner, params={"q": WORD, "fresh": "true"})
    assert [e["record_hash"] for e in hits["entries"]] == ([address] if visible else [])
    feed, fetched, reconciled, _ = await served(node)
    assert (address in feed and address in fetched) == visible
    assert (version_of(story.entry) in reconciled) == visible
    # an applied redaction federates and stands for the entry; a void one (or one refused) is served to no peer
    for served_set in (feed, fetched, reconciled):
        assert (hash_of(story.redaction) in served_set) == (not visible)


async def state(node: Node, story: Theft) -> tuple[bool, bool, bool, bool, str | None]:
    """(entry held, tombstone kept, version refused, redaction projected, the redaction's void flag)."""
    address, redaction = hash_of(story.entry), hash_of(story.redaction)

    def run(conn: Conn) -> tuple[bool, bool, bool, bool, str | None]:
        def one(sql: str, arg: str) -> bool:
            return conn.execute(sql, (arg,)).fetchone() is not None

        flags = {row.hash: row.reason for row in void.listing(conn, 0, 100)}
        return (
            one("SELECT 1 FROM records WHERE hash = ?", address),
            one("SELECT 1 FROM tombstones WHERE hash = ?", address),
            one("SELECT 1 FROM refused_versions WHERE hash = ?", address),
            one("SELECT 1 FROM redactions WHERE hash = ?", redaction),
            flags.get(redaction),
        )

    return await node.db.read(run)


async def inbox(client: TestClient, who: Any) -> list[tuple[str, str, str | None]]:
    """(reason, record_hash, redaction) of each notification a poll of `who`'s inbox delivers."""
    notes = (await get_json(client, "/v1/inbox", who, params={"mark_delivered": "true"}))["notifications"]
    return [(n["reason"], n["record_hash"], n["redaction"]) for n in notes]


async def subscribed(client: TestClient, make_agent: MakeAgent, story: Theft) -> AgentCreds:
    """A node-kept agent subscribed to the owner's entries."""
    bob = await make_agent("bob")
    resp = await client.post("/v1/subscriptions", json={"authors": [story.owner.agent_id]}, headers=bob.headers)
    assert resp.status == 201, await resp.text()
    return bob


async def test_a_thiefs_redaction_is_void_once_the_owner_revokes_and_the_entry_reads_and_searches_again(
    client: TestClient, node: Node, make_agent: MakeAgent
) -> None:
    story = await theft(node)
    owner, address = story.owner, hash_of(story.entry)
    bob = await subscribed(client, make_agent, story)
    await key_events(client, owner, story.rotate, [story.rotate_page])
    await send(client, "/v1/entries", owner, story.entry)
    await shows(client, node, story, True)
    assert [n[:2] for n in await inbox(client, bob)] == [("subscription", address)]
    # the thief redacts with the stolen key: answers hide at once, the body is set aside for the grace
    out = await send(client, "/v1/redactions", owner, story.redaction)
    assert out["tombstone"]["redaction"] == hash_of(story.redaction)
    await shows(client, node, story, False)
    assert await state(node, story) == (False, True, True, True, None)
    aside = await node.db.read(lambda c: c.execute("SELECT version FROM redacted_bodies").fetchall())
    assert [r[0] for r in aside] == [version_of(story.entry)]
    assert await inbox(client, bob) == [("redacted", address, hash_of(story.redaction))]  # bob had seen it

    # the owner revokes the stolen key, vouching for its entry and not for the redaction
    await key_events(client, owner, story.revoke, story.revoke_pages)
    assert await state(node, story) == (True, False, False, False, "revoked_key")
    await shows(client, node, story, True)
    assert await node.db.read(redaction_store.set_aside_count) == 0  # restored: nothing left aside
    # the notice said something no longer true: it goes; the entry, appended again, notifies its subscribers afresh
    assert await inbox(client, bob) == [("subscription", address, None)]
    read = await get_json(client, f"/v1/entries/{hash_of(story.entry)}", owner)
    assert read["entries"][0]["content"] == f"the plan for {WORD} stays"
    await rebuilt_equals(node)  # `bbs rebuild` gives the same tables: the void redaction is not replayed
    await shows(client, node, story, True)
    # the digest counts the entry and not the redaction, as on a node that never saw the redaction
    digest = await node.sync.digest()
    stored = await node.db.read(lambda c: int(c.execute("SELECT count(*) FROM records").fetchone()[0]))
    assert digest.count == stored - len(await node.db.read(lambda c: void.listing(c, 0, 100)))

    # the thief's key can redact nothing more, and a redaction of the void redaction is still refused
    again = redaction_by(owner.agent_id, story.stolen, hash_of(story.entry), node.now_ms() + 10)
    problem = await send(client, "/v1/redactions", owner, again, 422)
    assert problem["code"] == "not_current_key"
    undo = redaction_by(owner.agent_id, story.after, hash_of(story.redaction), node.now_ms() + 11)
    problem = await send(client, "/v1/redactions", owner, undo, 422)
    assert problem["code"] == "not_redactable" and problem["field"] == "$.record.target"
    assert await state(node, story) == (True, False, False, False, "revoked_key")


async def test_a_redaction_arriving_after_the_revocation_is_void_on_arrival_and_drops_nothing(
    client: TestClient, node: Node
) -> None:
    story = await theft(node)
    owner = story.owner
    await key_events(client, owner, story.rotate, [story.rotate_page])
    await send(client, "/v1/entries", owner, story.entry)
    await key_events(client, owner, story.revoke, story.revoke_pages)
    problem = await send(client, "/v1/redactions", owner, story.redaction, 422)  # from a client: refused
    assert problem["code"] == "not_current_key"
    assert await ingest(node, story.redaction) == "void"  # from a peer: refused, not stored
    assert await state(node, story) == (True, False, False, False, None)
    await shows(client, node, story, True)


async def test_the_owners_own_redaction_still_holds_when_the_thiefs_is_void(
    client: TestClient, node: Node, make_agent: MakeAgent
) -> None:
    story = await theft(node)
    owner = story.owner
    bob = await subscribed(client, make_agent, story)
    await key_events(client, owner, story.rotate, [story.rotate_page])
    await send(client, "/v1/entries", owner, story.entry)
    assert len(await inbox(client, bob)) == 1
    await send(client, "/v1/redactions", owner, story.redaction)
    assert [n[0] for n in await inbox(client, bob)] == ["redacted"]
    # the owner, with the same key before the theft is noticed, redacts the entry too: it is a second redaction
    own = redaction_by(owner.agent_id, story.stolen, hash_of(story.entry), node.now_ms() + 5)
    assert hash_of(own) != hash_of(story.redaction)
    assert await ingest(node, own) == "saved"
    revoke = key_event(
        story.recovery,
        "revoke",
        2,
        prior=story.rotate,
        installs=story.after,
        vouches=[vouching.vouch(story.stolen.did, [version_of(story.entry), hash_of(own)])],
        created_at=story.revoke["created_at"],
        author=owner.agent_id,
    )
    page = vouch_page(story.recovery, revoke, story.stolen, [version_of(story.entry), hash_of(own)],
                      author=owner.agent_id)  # fmt: skip
    await key_events(client, owner, revoke, [page])
    held, kept, refused, projected, flag = await state(node, story)
    assert (held, kept, refused, projected, flag) == (False, True, True, False, "revoked_key")
    tomb = await node.db.read(lambda c: redaction_store.tombstones(c, [hash_of(story.entry)]))
    assert tomb[0].redaction == hash_of(own)  # the tombstone now names the redaction that holds
    read = await get_json(client, f"/v1/entries/{hash_of(story.entry)}", owner)
    assert read["entries"] == [] and [t["redaction"] for t in read["redacted"]] == [hash_of(own)]
    # bob's notice (unacknowledged: delivered again once its lease lapses) now names the redaction that holds
    notices = await node.db.read(lambda c: c.execute("SELECT redaction FROM notifications").fetchall())
    assert [r[0] for r in notices] == [hash_of(own)]


async def test_past_the_grace_the_body_is_gone_here_and_its_versions_are_no_longer_refused(
    client: TestClient, node: Node
) -> None:
    """With grace 0 the scrub deletes the set-aside body: the void redaction leaves no tombstone and refuses
    nothing, so a peer that kept the body can bring it back (tests/sync/test_redaction_revoked.py); if none kept it,
    it is gone (docs/sync.md, "Redaction")."""
    node.redactions.grace_s = 0
    story = await theft(node)
    owner = story.owner
    await key_events(client, owner, story.rotate, [story.rotate_page])
    await send(client, "/v1/entries", owner, story.entry)
    await send(client, "/v1/redactions", owner, story.redaction)
    await scrub_now(node, [hash_of(story.entry)])
    assert await node.db.read(redaction_store.set_aside_count) == 0
    await key_events(client, owner, story.revoke, story.revoke_pages)
    assert await state(node, story) == (False, False, False, False, "revoked_key")
    gone = await get_json(client, f"/v1/entries/{hash_of(story.entry)}", owner, 404)  # no entry, no tombstone
    assert gone["code"] == "entry_not_found"
    assert await ingest(node, story.entry) == "saved"  # a peer's copy is taken again
    await shows(client, node, story, True)


ORDERS = list(itertools.permutations(["entry", "redaction", "revocation"]))


@pytest.mark.parametrize("order", ORDERS, ids=["-".join(o) for o in ORDERS])
async def test_every_arrival_order_from_peers_ends_with_the_entry_shown(
    client: TestClient, node: Node, order: tuple[str, ...]
) -> None:
    """The rotation first (the entry's key needs it), then the entry, the thief's redaction and the revocation (with
    its page) from peers in every order: the same end, the entry held and shown, the redaction void or refused."""
    story = await theft(node)
    for record in (story.rotate, story.rotate_page):
        assert await ingest(node, record) == "saved"
    batches = {
        "entry": [story.entry],
        "redaction": [story.redaction],
        "revocation": [story.revoke, *story.revoke_pages],
    }
    for name in order:
        for record in batches[name]:
            await ingest(node, record)
    # the body arriving after the redaction and before the revocation was refused in memory, never stored: its
    # version is no longer refused, so reconciliation offers it again and it is taken
    screened = order.index("redaction") < order.index("entry") < order.index("revocation")
    assert await ingest(node, story.entry) == ("saved" if screened else "duplicate")
    held, kept, refused, projected, flag = await state(node, story)
    assert (held, kept, refused, projected) == (True, False, False, False)
    # stored before the revocation: flagged void; after it: refused on arrival, never stored
    assert flag == ("revoked_key" if order.index("redaction") < order.index("revocation") else None)
    await shows(client, node, story, True)
    await rebuilt_equals(node)


async def test_a_recovery_vouching_for_the_redaction_applies_it_again(client: TestClient, node: Node) -> None:
    """The owner's revocation left the redaction out; a recovery at its place that wins (the smaller address) and
    vouches for it makes it valid again: it drops the entry again, with its tombstone (format-v3 7.6, both ways)."""
    story = await theft(node)
    owner, address = story.owner, hash_of(story.entry)
    await key_events(client, owner, story.rotate, [story.rotate_page])
    await send(client, "/v1/entries", owner, story.entry)
    await send(client, "/v1/redactions", owner, story.redaction)
    await key_events(client, owner, story.revoke, story.revoke_pages)
    assert await state(node, story) == (True, False, False, False, "revoked_key")
    vouched = [version_of(story.entry), hash_of(story.redaction)]
    recover: dict[str, Any] = {}
    for ms in itertools.count(node.now_ms()):
        recover = key_event(
            story.recovery,
            "recover",
            2,
            prior=story.rotate,
            installs=keys.SigningKey.generate(),
            vouches=[vouching.vouch(story.stolen.did, vouched)],
            created_at=format_ms(ms),
            author=owner.agent_id,
        )
        if hash_of(recover) < hash_of(story.revoke):
            break
    await key_events(client, owner, recover, [vouch_page(story.recovery, recover, story.stolen, vouched,
                                                        author=owner.agent_id)])  # fmt: skip
    assert await state(node, story) == (False, True, True, True, None)
    await shows(client, node, story, False)
    assert await node.db.read(redaction_store.set_aside_count) == 1  # set aside again, for a new grace
    tomb = await node.db.read(lambda c: redaction_store.tombstones(c, [address]))
    assert tomb[0].redaction == hash_of(story.redaction)
    await rebuilt_equals(node)


async def test_a_version_the_revocation_voids_too_is_not_restored(client: TestClient, node: Node) -> None:
    """The thief posts with the stolen key and redacts its own post: the revocation voids both, and the post set
    aside is decided again on its way back into the log: void, so it is refused and remembered, as on any node."""
    story = await theft(node)
    owner = story.owner
    junk = entry_by(owner.agent_id, story.stolen, "the thief's own post", node.now_ms() + 1)
    await key_events(client, owner, story.rotate, [story.rotate_page])
    await send(client, "/v1/entries", owner, junk)
    await send(client, "/v1/redactions", owner, redaction_by(owner.agent_id, story.stolen, hash_of(junk),
                                                           node.now_ms() + 2))  # fmt: skip
    assert await node.db.read(redaction_store.set_aside_count) == 1
    revoke = key_event(
        story.recovery,
        "revoke",
        2,
        prior=story.rotate,
        installs=story.after,
        vouches=[vouching.vouch(story.stolen.did, [])],
        created_at=story.revoke["created_at"],
        author=owner.agent_id,
    )
    await key_events(client, owner, revoke, [])
    assert await node.db.read(redaction_store.set_aside_count) == 0

    def where(conn: Conn) -> tuple[int, int, int, str | None]:
        row = conn.execute("SELECT reason FROM void_versions WHERE version = ?", (version_of(junk),)).fetchone()
        return (
            conn.execute("SELECT count(*) FROM records WHERE hash = ?", (hash_of(junk),)).fetchone()[0],
            conn.execute("SELECT count(*) FROM tombstones").fetchone()[0],
            conn.execute("SELECT count(*) FROM refused_versions WHERE hash = ?", (hash_of(junk),)).fetchone()[0],
            None if row is None else row[0],
        )

    assert await node.db.read(where) == (0, 0, 0, "revoked_key")
    assert await ingest(node, junk) == "void"  # a peer's copy is refused as well
