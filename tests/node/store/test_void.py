"""node.store.void: records stored before a later key event made them void are flagged, hidden from every read and
projection and from peers, and shown again when a recovery vouches for them; on a real aiohttp server over a real
SQLite node, with real Ed25519 keys and client-signed key events over REST."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient

from identity import canonical, keys, records, vouching
from node.features import LOG
from node.ops import doctor
from node.service import Node
from node.store import authority as authority_mod
from node.store import equivocation, projections, void
from node.store.conn import Conn
from node.web.appkeys import SEARCH_INDEXER
from tests.conftest import AgentCreds, FakeClock
from tests.node.agents.test_key_events import page, rotation
from tests.node.api_helpers import SelfSigner, entry_record, get_json, hash_of, ingest, link_record, self_signer
from tests.node.federation import v3_story
from tests.node.federation.v3_story import key_event, vouch_page
from tests.node.store.test_projections import agent_record
from tests.pg_fixtures import OpenStore, on_both_engines
from wire import unsigned
from wire.time import format_ms
from wire.workflows import PostMessage

MakeAgent = Callable[[str], Awaitable[AgentCreds]]
WORKFLOWS = "/v1/agent-workflows"


def signed(body: dict[str, Any], signer: keys.SigningKey) -> dict[str, Any]:
    """`body` signed by `signer`, naming it in `signing_key` when it is not the author's first key."""
    if signer.did != body["author_id"]:
        body = {**body, "signing_key": signer.did}
    return records.sign(body, signer)


def version_of(record: dict[str, Any]) -> str:
    body = canonical.canonical_bytes(record)
    return canonical.sha256_hex(body) if record["kind"] == "entry" else hash_of(record)


def by(record: dict[str, Any], author: str, signer: keys.SigningKey) -> dict[str, Any]:
    """A record built for `signer`'s did, re-signed for `author` by `signer` (a rotated-in key)."""
    body = {k: v for k, v in record.items() if k != "signature"}
    return signed({**body, "author_id": author}, signer)


async def send(client: TestClient, path: str, who: SelfSigner, record: dict[str, Any], status: int = 201) -> Any:
    resp = await client.post(path, json={"record": record}, headers=who.headers)
    data = await resp.json(content_type=None)
    assert resp.status == status, data
    return data


async def key_events(
    client: TestClient, who: SelfSigner, event: dict[str, Any], pages: list[dict[str, Any]], status: int = 201
) -> Any:
    resp = await client.post(
        f"/v1/agents/{who.agent_id}/key-events", json={"record": event, "pages": pages}, headers=who.headers
    )
    data = await resp.json(content_type=None)
    assert resp.status == status, data
    return data


def flagged(conn: Conn) -> dict[str, str]:
    return {row.hash: row.reason for row in void.listing(conn, 0, 100)}


async def served(node: Node) -> tuple[set[str], set[str], set[str], int]:
    """What this node serves peers: the changes feed's hashes, the hashes a fetch of every record returns, the
    versions of the reconciliation set, and the digest's count."""
    page = await node.sync.changes(0, 1000)
    feed = {str(item[1]) for item in page.items}
    every = await node.db.read(lambda c: [str(r[0]) for r in c.execute("SELECT hash FROM records").fetchall()])
    fetched = {str(h) for h, _, _ in await node.sync.fetch(every)}
    _, _, items = await node.sync.reconcile_items()
    return feed, fetched, {v.hex() for _, v in items}, (await node.sync.digest()).count


async def until(condition: Callable[[], Awaitable[bool]], timeout_s: float = 10.0) -> None:
    """Wait for `condition` (the node's search indexer runs beside the writer), at most `timeout_s`."""
    deadline = asyncio.get_running_loop().time() + timeout_s
    while not await condition():
        assert asyncio.get_running_loop().time() < deadline, "timed out"
        await asyncio.sleep(0.02)


async def rebuilt_equals(node: Node) -> None:
    """`bbs rebuild`'s replay of the log gives the projections the switches left."""

    def run(conn: Conn) -> tuple[Any, Any]:
        before = projections.snapshot(conn)
        projections.rebuild(conn)
        return before, projections.snapshot(conn)

    before, after = await node.db.write(run)
    assert before == after


async def test_a_revocation_voids_stored_records_everywhere_and_a_recovery_vouching_for_them_brings_them_back(
    client: TestClient, node: Node, clock: FakeClock, make_agent: MakeAgent
) -> None:
    await void_story(client, node, clock, make_agent)


async def void_story(
    client: TestClient, node: Node, clock: FakeClock, make_agent: MakeAgent
) -> dict[str, dict[str, Any]]:
    """The story of the test above (every read path checked along the way); its records by name."""
    who = await self_signer(node, "owner")
    bob = await make_agent("bob")
    k0, k1, k2, k3, recovery = who.key, *(keys.SigningKey.generate() for _ in range(4))
    author = who.agent_id
    now = int(clock() * 1000)
    at = format_ms(now)
    doc = await node.db.read(
        lambda c: json.loads(bytes(c.execute("SELECT body FROM records WHERE kind = 'agent'").fetchone()[0]))
    )
    # a task declared by the first key, which the rotation below does not vouch for
    declare = records.sign(unsigned.unsigned_declare("chore", author, at, node.node_id, {"title": "a chore"}), k0)
    await send(client, f"{WORKFLOWS}/tasks", who, declare)
    assert (await get_json(client, f"{WORKFLOWS}/tasks/chore", who))["title"] == "a chore"
    e1 = key_event(
        k0,
        "rotate",
        1,
        installs=k1,
        recovery=recovery,
        vouches=[vouching.vouch(k0.did, [version_of(doc)])],
        created_at=at,
        author=author,
    )
    await key_events(client, who, e1, [vouch_page(k0, e1, k0, [version_of(doc)], author=author)])
    assert await node.db.read(flagged) == {hash_of(declare): "unvouched"}
    await get_json(client, f"{WORKFLOWS}/tasks/chore", who, 404)
    assert "chore" not in json.dumps(await get_json(client, f"{WORKFLOWS}/tasks/ready", who))

    keep = by(entry_record(k1, "kept: the revocation vouches for it", created_ms=now), author, k1)
    lost = by(
        entry_record(k1, "zebra quartz, lost to the revocation", created_ms=now + 1, directed_to=[bob.agent_id]),
        author,
        k1,
    )
    for entry in (keep, lost):
        await send(client, "/v1/entries", who, entry)
    link = by(link_record(k1, hash_of(lost), hash_of(keep), "supports", created_ms=now + 2), author, k1)
    await send(client, "/v1/links", who, link)
    message = signed(
        unsigned.unsigned_message(author, PostMessage("note", "zebra hello", to_agent=bob.agent_id), at), k1
    )
    await send(client, f"{WORKFLOWS}/messages", who, message)
    voidable = {hash_of(lost), hash_of(link), hash_of(message)}

    revoke = key_event(
        recovery,
        "revoke",
        2,
        prior=e1,
        installs=k2,
        vouches=[vouching.vouch(k1.did, [version_of(keep)])],
        created_at=at,
        author=author,
    )
    await key_events(client, who, revoke, [vouch_page(recovery, revoke, k1, [version_of(keep)], author=author)])
    assert await node.db.read(flagged) == {hash_of(declare): "unvouched", **dict.fromkeys(voidable, "revoked_key")}

    async def shown(visible: bool, inbox: bool = True) -> None:
        """Every read path shows the lost entry, the link and the message exactly when `visible` (bob's inbox when
        `inbox`: reading it leases what it shows)."""
        await get_json(client, f"/v1/entries/{hash_of(lost)}", who, 200 if visible else 404)
        read = await get_json(client, f"/v1/entries/{hash_of(keep)}", who, params={"hops": "1"})
        assert ({e["record_hash"] for e in read["entries"]} == {hash_of(keep), hash_of(lost)}) == visible
        assert bool(read["links"]) == visible
        worker = client.app[SEARCH_INDEXER]  # the tantivy index drops the document, and takes it back

        async def redone() -> bool:
            queued = await node.db.read(lambda c: c.execute("SELECT count(*) FROM search_redo").fetchone()[0])
            return queued == 0 and (worker.index.seq_of(hash_of(lost)) is not None) == visible

        await until(redone)
        hits = await get_json(client, "/v1/search", who, params={"q": "zebra"})
        assert [e["record_hash"] for e in hits["entries"]] == ([hash_of(lost)] if visible else [])
        feed = await get_json(client, "/v1/feed", who)
        assert (hash_of(lost) in {e["record_hash"] for e in feed["entries"]}) == visible
        if inbox:
            notes = (await get_json(client, "/v1/inbox", bob))["notifications"]
            assert [n["record_hash"] for n in notes] == ([hash_of(lost)] if visible else [])
        messages = await get_json(client, f"{WORKFLOWS}/messages", who, params={"agent": author})
        assert len(messages["messages"]) == int(visible)
        feed_hashes, fetched, reconciled, count = await served(node)
        for hashes in (feed_hashes, fetched):
            assert voidable <= hashes if visible else not voidable & hashes
            assert hash_of(declare) not in hashes and hash_of(keep) in hashes
        versions = {version_of(r) for r in (lost, link, message)}
        assert versions <= reconciled if visible else not versions & reconciled
        stored = await node.db.read(lambda c: int(c.execute("SELECT count(*) FROM records").fetchone()[0]))
        assert count == stored - len(await node.db.read(flagged))  # the digest counts valid versions only

    await shown(False)
    await rebuilt_equals(node)
    await shown(False)

    # a recovery on the revocation's place that vouches for every record of k1 (it wins on the smaller address)
    recover: dict[str, Any] = {}
    vouched = [version_of(r) for r in (keep, lost, link, message)]
    for ms in range(now, now + 1000):
        recover = key_event(
            recovery,
            "recover",
            2,
            prior=e1,
            installs=k3,
            vouches=[vouching.vouch(k1.did, vouched)],
            created_at=format_ms(ms),
            author=author,
        )
        if hash_of(recover) < hash_of(revoke):
            break
    out = await key_events(client, who, recover, [vouch_page(recovery, recover, k1, vouched, author=author)])
    assert out["key_history"]["current_key"] == k3.did
    assert await node.db.read(flagged) == {hash_of(declare): "unvouched"}
    await shown(True)
    await rebuilt_equals(node)
    await shown(True, inbox=False)
    return {"declare": declare, "keep": keep, "lost": lost, "link": link, "message": message}


async def test_the_operator_lists_the_void_records_by_page_and_doctor_counts_them(
    client: TestClient,
    node: Node,
    clock: FakeClock,
    make_agent: MakeAgent,
    admin_headers: dict[str, str],
    data_dir: tuple[Path, str],
) -> None:
    story = await void_story(client, node, clock, make_agent)
    page = await get_json(client, "/v1/admin/void-records", Admin(admin_headers), params={"limit": "1"})
    (only,) = page["records"]
    assert only["record_hash"] == hash_of(story["declare"]) and only["kind"] == "task_event"
    assert only["reason"] == "unvouched" and page["total"] == 1 and page["next_after"] is None
    assert only["author_id"] == story["declare"]["author_id"] and only["version"] == version_of(story["declare"])
    after = await get_json(client, "/v1/admin/void-records", Admin(admin_headers), params={"after": str(only["seq"])})
    assert after["records"] == [] and after["total"] == 1
    refused = await get_json(client, "/v1/admin/void-records", await make_agent("eve"), 403)
    assert refused["status"] == 403
    bad = await get_json(client, "/v1/admin/void-records", Admin(admin_headers), 422, params={"limit": "0"})
    assert bad["status"] == 422
    checks = {c.name: c for c in doctor.diagnose(data_dir[0], LOG)}
    assert checks["search_index"].status == "ok", checks["search_index"]
    assert checks["projections"].status == "ok", checks["projections"]  # a rebuild skips the flagged records
    assert checks["void_records"].status == "warn" and checks["void_records"].detail.startswith("1 stored record")


async def test_doctor_warns_of_key_events_not_kept(node: Node, data_dir: tuple[Path, str]) -> None:
    """docs/format-v3.md 3.4: three allowed rotations at one place by the holder of T's first key: the node keeps
    two, and `bbs doctor` names the one it dropped (someone else may hold the key)."""
    checks = {c.name: c for c in doctor.diagnose(data_dir[0], LOG)}
    assert checks["dropped_key_events"].status == "ok", checks["dropped_key_events"]
    forks = [
        key_event(v3_story.T0, "rotate", 1, installs=v3_story.key(0x60 + i), vouches=[vouching.vouch(v3_story.T, [])],
                  author=v3_story.T)
        for i in range(3)
    ]  # fmt: skip
    outcomes = [await ingest(node, fork) for fork in sorted(forks, key=hash_of, reverse=True)]  # each better
    assert outcomes == ["saved", "saved", "saved"]  # the third displaces the first, deleted from the log
    checks = {c.name: c for c in doctor.diagnose(data_dir[0], LOG)}
    assert checks["dropped_key_events"].status == "warn"
    assert checks["dropped_key_events"].detail.startswith("1 key event of 1 identity not kept")


class Admin:
    """The operator, by the admin token's headers (`get_json` reads `.headers`)."""

    def __init__(self, headers: dict[str, str]) -> None:
        self.headers = headers


async def test_a_void_version_does_not_make_its_address_equivocated(node: Node) -> None:
    first = v3_story.post(v3_story.A, v3_story.A0, "one statement, two bodies")
    second = v3_story.signed({**{k: v for k, v in first.items() if k != "signature"}, "tags": ["other"]}, v3_story.A0)
    assert hash_of(first) == hash_of(second) and version_of(first) != version_of(second)
    for record in (first, second):
        assert await ingest(node, record) == "saved"
    assert await node.db.read(equivocation.by_author) == {v3_story.A: 1}
    # the rotation vouches for the first body only: the second, stored before it, is void
    e1 = v3_story.key_event(
        v3_story.A0, "rotate", 1, installs=v3_story.A1, vouches=[vouching.vouch(v3_story.A0.did, [version_of(first)])]
    )
    for record in (e1, v3_story.vouch_page(v3_story.A0, e1, v3_story.A0, [version_of(first)])):
        assert await ingest(node, record) == "saved"
    assert await node.db.read(flagged) == {hash_of(second): "unvouched"}
    assert await node.db.read(equivocation.by_author) == {}
    shown = await node.db.read(lambda c: [str(r[0]) for r in c.execute("SELECT signature FROM entries").fetchall()])
    assert shown == [first["signature"]]
    await rebuilt_equals(node)


async def test_a_task_leaves_the_graph_when_its_events_are_void_and_comes_back_when_a_winning_fork_vouches_for_them(
    node: Node,
) -> None:
    a0, a1 = v3_story.A0, v3_story.A1
    at = "2026-03-01T08:00:00Z"
    declare = v3_story.signed(
        unsigned.unsigned_declare("chore", v3_story.A, at, node.node_id, {"title": "a chore"}), a0
    )
    update = v3_story.signed(
        unsigned.unsigned_declare("chore", v3_story.A, "2026-03-01T08:00:01Z", node.node_id, {"status": "processing"}),
        a0,
    )
    later = v3_story.signed(
        unsigned.unsigned_declare("later", v3_story.A, at, node.node_id, {"title": "after the chore"}), a0
    )
    for record in (declare, update, later):
        assert await ingest(node, record) == "saved"

    async def task(key: str) -> tuple[str, str] | None:
        row = await node.db.read(
            lambda c: c.execute("SELECT title, status FROM tasks WHERE key = ?", (key,)).fetchone()
        )
        return None if row is None else (str(row[0]), str(row[1]))

    assert await task("chore") == ("a chore", "processing")
    # a rotation by the first key vouching for the later task only: the chore's events are void, the task goes
    vouched = [version_of(later)]
    rotate = v3_story.key_event(a0, "rotate", 1, installs=a1, vouches=[vouching.vouch(a0.did, vouched)])
    for record in (rotate, v3_story.vouch_page(a0, rotate, a0, vouched)):
        assert await ingest(node, record) == "saved"
    assert await task("chore") is None and await task("later") == ("after the chore", "pending")
    assert set(await node.db.read(flagged)) == {hash_of(declare), hash_of(update)}
    await rebuilt_equals(node)
    # another rotation on the same place, by the same key, vouching for every task event: the smaller address wins
    every = [version_of(r) for r in (declare, update, later)]
    fork: dict[str, Any] = {}
    for n in range(36_000):  # each date a fresh address: about two tries, and 1 in 36,001 never below (not 1 in 61)
        fork = v3_story.key_event(
            a0,
            "rotate",
            1,
            installs=a1,
            vouches=[vouching.vouch(a0.did, every)],
            created_at=f"2026-03-02T{8 + n // 3600:02}:{n // 60 % 60:02}:{n % 60:02}Z",
        )
        if hash_of(fork) < hash_of(rotate):
            break
    assert hash_of(fork) < hash_of(rotate)
    for record in (fork, v3_story.vouch_page(a0, fork, a0, every)):
        assert await ingest(node, record) == "saved"
    assert await node.db.read(flagged) == {}
    assert await task("chore") == ("a chore", "processing")
    await rebuilt_equals(node)


def test_the_flags_are_read_alike_on_either_engine(open_store: OpenStore) -> None:
    conn = open_store(LOG)
    alice, bob = keys.SigningKey.generate().did, keys.SigningKey.generate().did
    flags = [(3, "v3", "h3", "entry", alice, "unvouched"), (5, "v5", "h5", "link", bob, "revoked_key")]
    conn.executemany(
        "INSERT INTO void_records (seq, version, hash, kind, author_id, reason, flagged_ms)"
        " VALUES (?, ?, ?, ?, ?, ?, 1)",
        flags,
    )
    assert void.flagged_of(conn, [alice]) == {3}
    assert void.flagged_of(conn, [alice, bob, "did:key:nobody"]) == {3, 5}
    assert void.flagged_of(conn, []) == set()
    assert void.flags_of(conn, [5, 4, 3]) == {3: "unvouched", 5: "revoked_key"}
    assert void.flags_of(conn, []) == {}
    assert void.flagged_versions(conn, iter(["v5", "v4"])) == {"v5"}


def _appended(conn: Conn, recs: list[dict[str, Any]], now_ms: int) -> None:
    conn.execute("BEGIN")
    for record in recs:
        projections.append_many(
            conn, [projections.Incoming(record, *records.check(record, v3=True))], origin="local", now_ms=now_ms
        )
    conn.execute("COMMIT")


def _key_event_story(conn: Conn, old: keys.SigningKey, new: keys.SigningKey, text: str = "") -> list[Any]:
    """Alice posts two entries (the second's content ending with `text`) and a link with her first key, rotates to
    `new` vouching for the first entry alone (its page held), and posts with the new key; the log's key events
    projected, her records decided again (the unvouched entry and the link flagged and switched out), then the entry
    switched back in. Every answer, in order."""
    alice, t0 = old.did, 1_767_323_045_000
    kept, dropped = entry_record(old, "kept", created_ms=t0), entry_record(old, "dropped" + text, created_ms=t0 + 1)
    link = link_record(old, hash_of(kept), hash_of(dropped), "supports", created_ms=t0 + 2)
    space = signed(
        {"kind": "space", "schema_version": canonical.SCHEMA_VERSION, "author_id": alice,
         "created_at": format_ms(t0 + 2), "name": "gone", "description": "", "nonce": "A" * 43},
        old,
    )  # fmt: skip
    document = agent_record(old, "Alice", t0, alice)  # shown, then judged again by the key events (agent_docs)
    _appended(conn, [document, kept, dropped, link, space], t0)
    made = projections.snapshot(conn)["spaces"]
    event = rotation(alice, old, new, [version_of(kept)], created_ms=t0 + 3)
    _appended(conn, [event, page(alice, old, event, [version_of(kept)])], t0 + 3)
    _appended(conn, [by(entry_record(new, "after", created_ms=t0 + 4), alice, new)], t0 + 4)
    authority = authority_mod.Authority()
    conn.execute("BEGIN")
    authority.load_txn(conn)
    displaced = authority_mod.drop_displaced_txn(conn, authority, [alice], t0 + 5)
    counts = void.reflag_txn(conn, authority, [alice], t0 + 5)
    conn.execute("COMMIT")
    voided = projections.snapshot(conn)
    listed = void.listing(conn, 0, 10)
    back = [void.Stored(r.seq, r.hash, r.version, r.kind, r.author_id, alice) for r in listed if r.kind == "entry"]
    conn.execute("BEGIN")
    restored = void.flag_txn(conn, [], back, t0 + 6)
    authority_mod.remember_dropped_txn(conn, "f" * 64, event, authority.history(alice).state, t0 + 6)
    conn.execute("COMMIT")
    return [
        made,
        displaced,
        counts,
        [tuple(r) for r in listed],
        voided,
        restored,
        projections.snapshot(conn),
        void.count(conn),
        authority_mod.authority_count(conn),
        [h for h, _ in authority_mod.authority_records(conn)],
        [h for h, _ in authority_mod.key_events_of(conn, alice)],
        [h for h, _ in authority_mod.vouch_pages_of(conn, alice)],
        authority_mod.versions_signed_by(conn, alice, alice),
        authority_mod.versions_signed_by(conn, alice, new.did),
        authority_mod.dropped_keys(conn),
        authority_mod.dropped_counts(conn),
        authority_mod.dropped_state(conn, "f" * 64),
    ]


@pytest.mark.parametrize("text", ["", "\x00\x01"])  # a body's `\u0000` parsed by PostgreSQL's JSON (record 84)
def test_key_events_project_and_switch_alike_on_either_engine(tmp_path: Path, pg_migrated_url: str, text: str) -> None:
    old, new = keys.SigningKey.generate(), keys.SigningKey.generate()
    expected, got = on_both_engines(tmp_path, pg_migrated_url, LOG, lambda conn: _key_event_story(conn, old, new, text))
    assert got == expected
    made, expected = expected[0], expected[1:]
    assert len(made) == 1 and expected[0] == [] and expected[1] == (3, 0)  # the unvouched records flagged
    assert [row[1] for row in expected[3]["agents"]] == ["Alice"]  # documents are not flagged (7.7)
    assert sorted(r[3] for r in expected[2]) == ["entry", "link", "space"]
    assert len(expected[3]["entries"]) == 2 and expected[3]["links"] == [] and expected[3]["spaces"] == []
    assert expected[4] == (0, 1) and len(expected[5]["entries"]) == 3  # the entry back in
    assert expected[6] == 2 and expected[7] == 2 and len(expected[8]) == 2 and len(expected[9]) == 1
    assert len(expected[11]) == 5 and len(expected[12]) == 1  # first key: the document, two entries, link, space
    assert expected[13] == {old.did: {new.did}} and expected[14] == (1, 1) and expected[15] is not None


def test_a_displaced_key_event_is_dropped_from_the_log_on_either_engine(open_store: OpenStore) -> None:
    """tests/node/federation/v3_story.py's e3 (built on e2, which the recovery e4 replaced) stored with the rest: the
    authority cache loaded from the log finds it displaced, and it leaves the log, remembered as dropped."""
    conn = open_store(LOG)
    s = v3_story.story()
    r = s.records
    _appended(conn, [r[name] for name in ("e1", "g1", "e2", "g2", "e3", "e4", "g4", "g4b")], 1_767_323_045_000)
    authority = authority_mod.Authority()
    conn.execute("BEGIN")
    authority.load_txn(conn)
    dropped = authority_mod.drop_displaced_txn(conn, authority, [v3_story.A], 1_767_323_046_000)
    conn.execute("COMMIT")
    assert dropped == [v3_story.address(r["e3"])]
    held = [h for h, _ in authority_mod.key_events_of(conn, v3_story.A)]
    assert held == [v3_story.address(r[name]) for name in ("e1", "e2", "e4")]
    assert authority_mod.dropped_counts(conn) == (1, 1) and authority_mod.dropped_state(conn, dropped[0]) is not None
