"""Gone from disk: with a grace of 0, a redacted body's bytes leave every file of the data folder (database, WAL,
search index segments), a `bbs backup` made after holds none of it, and the node's log lines never held it. A real
server on loopback runs the scrubber and the search indexer; the files are searched byte by byte."""

from __future__ import annotations

import asyncio
import logging
import secrets
import sqlite3
import tarfile
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest
from aiohttp.test_utils import TestClient

from node.ops import backup
from node.redaction import scrub, store
from node.search_index.analyzer import tokens
from node.service import Node
from tests.conftest import AgentCreds
from tests.node.api_helpers import get_json, post

MakeAgent = Callable[[str], Awaitable[AgentCreds]]


def files_holding(root: Path, needle: bytes) -> list[str]:
    """Every file under `root` whose bytes contain `needle`."""
    return sorted(str(p) for p in root.rglob("*") if p.is_file() and needle in p.read_bytes())


async def scrubbed(node: Node, address: str, timeout: float = 30.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout

    def done(conn: sqlite3.Connection) -> bool:
        row = conn.execute("SELECT done_ms FROM redaction_scrubs WHERE hash = ?", (address,)).fetchone()
        return row is not None and row[0] is not None

    while not await node.db.read(done):
        assert loop.time() < deadline, "the scrub did not run"
        await asyncio.sleep(0.05)


async def test_with_grace_0_the_secret_is_in_no_file_of_the_data_folder_nor_in_a_later_backup(
    client: TestClient, node: Node, make_agent: MakeAgent, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
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
    before_backup = tmp_path / "before.tar"
    backup.backup(node.data.root, before_backup)
    assert secret.encode() in before_backup.read_bytes()  # the byte search finds what is there

    resp = await client.post("/v1/redactions", json={"target": posted["record_hash"]}, headers=alice.headers)
    assert resp.status == 201, await resp.text()
    found = await get_json(client, "/v1/search", bob, params={"q": secret})
    assert found["entries"] == []  # answers hide at once
    await scrubbed(node, posted["record_hash"])
    assert await node.db.read(store.set_aside_count) == 0  # the version set aside for the grace went first

    assert files_holding(node.data.root, secret.encode()) == []
    for term in tokens(secret):
        assert index.doc_freq("content", term) == 0, term  # deleted documents included: their segment is gone
    assert index.doc_freq("content", "weather") == 30  # every other document is still there
    assert (await get_json(client, "/v1/search", bob, params={"q": "weather", "limit": "50"}))["entries"]
    after_backup = tmp_path / "after.tar"
    backup.backup(node.data.root, after_backup)
    assert secret.encode() not in after_backup.read_bytes()
    with tarfile.open(after_backup) as tar:
        assert "bbs.db" in tar.getnames()
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
    within = tmp_path / "within.tar"
    backup.backup(node.data.root, within)  # a backup made within the grace holds nothing of the set-aside body
    assert secret.encode() not in within.read_bytes()
    node.clock.advance(3601)  # type: ignore[attr-defined]
    assert await scrub.scrub_due(node) == [posted["record_hash"]]
    assert (await node.db.read(store.pending_scrubs))[0] == 0
    assert await node.db.read(store.set_aside_count) == 0
