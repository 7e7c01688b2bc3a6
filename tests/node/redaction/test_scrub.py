"""Gone from disk: with a grace of 0, a redacted body's bytes leave every file of the data folder (database, WAL,
search index segments), a `bbs backup` made after holds none of it, and the node's log lines never held it. A real
server on loopback runs the scrubber and the search indexer; the files are searched byte by byte. In the `--store
postgresql` pass the node's database is on the test cluster, and every file of the cluster's folder (its data
directory: base/ with TOAST and pg_statistic, pg_wal/; and its server log) is searched too; `bbs backup` copies
SQLite nodes only (docs/decisions.md record 78)."""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import logging
import secrets
import sqlite3
import tarfile
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest
from aiohttp.test_utils import TestClient

from node.entries.posting import Posted
from node.ops import backup
from node.redaction import scrub, store
from node.search_index import store as index_store
from node.search_index.analyzer import tokens
from node.search_index.index import Row, SearchIndex
from node.service import Node
from scenarios import pg_cluster
from tests.conftest import AgentCreds
from tests.node.api_helpers import get_json, post
from wire.api import PostEntry

MakeAgent = Callable[[str], Awaitable[AgentCreds]]


def files_holding(root: Path, needle: bytes) -> list[str]:
    """Every file under `root` whose bytes contain `needle`."""
    return sorted(str(p) for p in root.rglob("*") if p.is_file() and needle in p.read_bytes())


def disk_of(node: Node, request: pytest.FixtureRequest) -> list[Path]:
    """The folders whose files must hold nothing of a scrubbed body: the node's data folder, and on PostgreSQL the
    folder of the test cluster that holds its database (data directory and server log)."""
    if node.db.pg_url is None:
        return [node.data.root]
    cluster: pg_cluster.Cluster = request.getfixturevalue("pg_cluster")
    assert cluster.folder.as_posix() in node.db.pg_url  # the node's database is on this cluster
    return [node.data.root, cluster.folder]


def held_in(roots: list[Path], needle: bytes) -> list[str]:
    """Every file under any of `roots` whose bytes contain `needle`."""
    return [f for root in roots for f in files_holding(root, needle)]


async def is_scrubbed(node: Node, address: str) -> bool:
    """Whether the scrub of `address` is done (by the test's call or the running app's scrubber)."""

    def done(conn: sqlite3.Connection) -> bool:
        row = conn.execute("SELECT done_ms FROM redaction_scrubs WHERE hash = ?", (address,)).fetchone()
        return row is not None and row[0] is not None

    return await node.db.read(done)


async def scrubbed(node: Node, address: str, timeout: float = 30.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not await is_scrubbed(node, address):
        assert loop.time() < deadline, "the scrub did not run"
        await asyncio.sleep(0.05)


async def scrub_now(node: Node, expected: list[str], tries: int = 20) -> None:
    """Run the scrub until `expected` is scrubbed: a checkpoint that readers held is tried again later, as the node's
    scrubber does (on a loaded machine a reader's snapshot can outlast one call's tries), and with an app running its
    scrubber may come first; fails if neither scrubs it."""
    for _ in range(tries):
        got = await scrub.scrub_due(node)
        if got:
            assert got == expected
            return
        if all([await is_scrubbed(node, address) for address in expected]):
            return  # the running app's scrubber, woken by the redaction, came first
        await asyncio.sleep(0.1)
    raise AssertionError(f"the scrub of {expected} did not happen in {tries} runs")


async def test_with_grace_0_the_secret_is_in_no_file_of_the_data_folder_nor_in_a_later_backup(
    client: TestClient,
    node: Node,
    make_agent: MakeAgent,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    request: pytest.FixtureRequest,
) -> None:
    caplog.set_level(logging.DEBUG)
    disk = disk_of(node, request)
    node.redactions.grace_s = 0
    alice, bob = await make_agent("alice"), await make_agent("bob")
    secret = "zq" + secrets.token_hex(12)
    for i in range(30):  # other entries, in the segments around the secret's
        await post(client, bob, content=f"ordinary note {i} about the weather")
    posted = await post(client, alice, content=f"the password is {secret} keep it", tags=["creds"])
    for i in range(30):
        await post(client, bob, content=f"another note {i}")
    found = await get_json(client, "/v1/search", bob, params={"q": secret, "fresh": "true"})
    assert [e["record_hash"] for e in found["entries"]] == [posted["record_hash"]]
    index = node.search_index
    assert index is not None and index.doc_freq("content", tokens(secret)[0]) == 1
    if node.db.pg_url is not None:  # as autovacuum may have: the tables' statistics sample the secret's rows
        await node.db.write(lambda conn: conn.execute("ANALYZE"))
    assert held_in(disk, secret.encode())  # the byte search finds what is there (on PostgreSQL: WAL, pages)
    if node.db.pg_url is None:  # `bbs backup` copies SQLite nodes only
        before_backup = tmp_path / "before.tar"
        backup.backup(node.data.root, before_backup)
        assert secret.encode() in before_backup.read_bytes()

    resp = await client.post("/v1/redactions", json={"target": posted["record_hash"]}, headers=alice.headers)
    assert resp.status == 201, await resp.text()
    found = await get_json(client, "/v1/search", bob, params={"q": secret})
    assert found["entries"] == []  # answers hide at once
    await scrubbed(node, posted["record_hash"])
    assert await node.db.read(store.set_aside_count) == 0  # the version set aside for the grace went first

    assert held_in(disk, secret.encode()) == []
    for term in tokens(secret):
        assert index.doc_freq("content", term) == 0, term  # deleted documents included: their segment is gone
    assert index.doc_freq("content", "weather") == 30  # every other document is still there
    assert (await get_json(client, "/v1/search", bob, params={"q": "weather", "limit": "50"}))["entries"]
    after_backup = tmp_path / "after.tar"
    backup.backup(node.data.root, after_backup)
    assert secret.encode() not in after_backup.read_bytes()
    with tarfile.open(after_backup) as tar:  # the database is in it (SQLite's file, or an uncompressed pg_dump)
        assert {"bbs.db", "bbs.pgdump"} & set(tar.getnames())
    # the node's own log lines (`bbs serve` replaces aiohttp's access log, which the test server keeps and which
    # writes query strings, by `bbs.access`: paths only) never held the body
    assert not [r for r in caplog.records if r.name != "aiohttp.access" and secret in r.getMessage()]


async def test_a_grace_keeps_the_scrub_waiting_and_answers_hide_at_once(
    client: TestClient, node: Node, make_agent: MakeAgent, tmp_path: Path
) -> None:
    node.redactions.grace_s = 3600
    alice = await make_agent("alice")
    secret = "zq" + secrets.token_hex(12)
    posted = await post(client, alice, content=f"hide me now {secret}")
    resp = await client.post("/v1/redactions", json={"target": posted["record_hash"]}, headers=alice.headers)
    assert resp.status == 201
    assert await scrub.scrub_due(node) == []  # not due within the grace
    assert (await node.db.read(store.pending_scrubs))[0] == 1
    assert await node.db.read(store.set_aside_count) == 1  # kept aside for the grace: a revocation may void it
    if node.db.pg_url is None:  # `bbs backup` copies SQLite nodes only
        within = tmp_path / "within.tar"
        backup.backup(node.data.root, within)  # a backup made within the grace holds nothing of the set-aside body
        assert secret.encode() not in within.read_bytes()
    node.clock.advance(3601)  # type: ignore[attr-defined]
    await scrub_now(node, [posted["record_hash"]])
    assert (await node.db.read(store.pending_scrubs))[0] == 0
    assert await node.db.read(store.set_aside_count) == 0


async def test_the_scrub_adds_again_only_the_documents_sharing_the_secrets_segment(
    node: Node, make_agent: MakeAgent
) -> None:
    node.redactions.grace_s = 0
    alice = await make_agent("alice")
    secret = "zq" + secrets.token_hex(12)
    index = node.search_index
    assert index is not None
    batches = []
    for b in range(4):  # four index commits: four segments (tantivy merges eight at a time)
        bodies = [
            PostEntry("finding", "inform", f"the password is {secret}" if (b, i) == (2, 7) else f"note {b} {i} rain")
            for i in range(25)
        ]
        batches.append(await node.entries.post_batch(alice.agent_id, list(bodies)))
    ids = [[int(p[0].id) for p in batch] for batch in batches]
    target = batches[2][7][0].record_hash
    for batch_ids in ids:
        rows = await node.db.read(functools.partial(index_store.entries_at, ids=batch_ids))
        await asyncio.to_thread(index.apply, [Row(*r) for r in rows], batch_ids[-1])
    await node.redactions.redact(alice.agent_id, target, "leaked")
    await scrub_now(node, [target])

    for term in tokens(secret):
        assert index.doc_freq("content", term) == 0, term  # its segment is gone, deleted documents and all
    assert files_holding(index.path, secret.encode()) == []
    assert index.doc_freq("content", "rain") == 99  # every other document is there
    assert index.documents() == 99
    # the scrub's look finds nothing left to drop, and the other three segments were never rewritten
    assert await scrub.held_with_dropped(node, index) == (0, [])
    snap = index.segments()
    assert snap is not None
    held = [frozenset(i for i in snap.ids(s, 0, s.max_doc) if i is not None) for s in snap.segments if s.max_doc > 1]
    for untouched in (0, 1, 3):
        assert frozenset(ids[untouched]) in held
    assert frozenset(i for i in ids[2] if i != batches[2][7][0].id) in held  # added again, in one commit


async def posted_rows(
    node: Node, make_agent: MakeAgent, contents: list[str]
) -> tuple[AgentCreds, SearchIndex, list[Posted], list[Row]]:
    """Alice posts `contents` in one batch, not yet indexed: her credentials, the node's search index, what the post
    answered and the entries' index rows, in order."""
    alice = await make_agent("alice")
    index = node.search_index
    assert index is not None
    posted = await node.entries.post_batch(alice.agent_id, [PostEntry("finding", "inform", c) for c in contents])
    rows = await node.db.read(functools.partial(index_store.entries_at, ids=[int(p[0].id) for p in posted]))
    return alice, index, posted, [Row(*r) for r in rows]


async def test_a_targeted_scrub_re_adds_the_segments_live_documents_and_counts_them(
    node: Node, make_agent: MakeAgent
) -> None:
    alice, index, posted, rows = await posted_rows(node, make_agent, [f"entry {i} hail" for i in range(30)])
    await asyncio.to_thread(index.apply, rows[:10], rows[9].seq)
    await asyncio.to_thread(index.apply, rows[10:], rows[-1].seq)
    assert await scrub.scrub_index(node, index) == 0  # nothing dropped: nothing to do
    await node.redactions.redact(alice.agent_id, posted[3][0].record_hash, None)
    await asyncio.to_thread(index.apply, [], index.state()[0], [posted[3][0].record_hash])
    assert await scrub.scrub_index(node, index) == 9  # the other nine of its segment, not the twenty beside it
    assert index.doc_freq("content", "3") == 0
    assert index.documents() == 29


async def test_a_deleted_document_of_a_version_still_in_the_log_is_no_reason_to_rewrite(
    node: Node, make_agent: MakeAgent
) -> None:
    _alice, index, _posted, rows = await posted_rows(node, make_agent, [f"fog {i}" for i in range(5)])

    def identity_seq(conn: sqlite3.Connection) -> int:  # a record the log holds that is no entry: as a void entry's
        return int(conn.execute("SELECT seq FROM records WHERE kind != 'entry' ORDER BY seq LIMIT 1").fetchone()[0])

    kept = dataclasses.replace(rows[0], seq=await node.db.read(identity_seq), record_hash="h-void", content="mist")
    await asyncio.to_thread(index.apply, [*rows, kept], rows[-1].seq)
    await asyncio.to_thread(index.apply, [], rows[-1].seq, ["h-void"])  # deleted, as the indexer does a void entry
    assert await scrub.held_with_dropped(node, index) == (0, [])
    assert await scrub.scrub_index(node, index) == 0  # nothing rewritten for it
    assert index.doc_freq("content", "mist") == 1  # its terms wait for an ordinary merge: no secret
