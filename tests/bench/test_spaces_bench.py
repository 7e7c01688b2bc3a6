"""The spaces benchmark's parts at tiny sizes (scenarios/bench/spaces.py): its spaced corpus is the public one's
words spread over 10 spaces, records a node accepts; each reader's search of it over REST sees exactly what the
benchmark says it sees; and its post rounds really post into the space. Never asserts a time."""

from __future__ import annotations

import contextlib
import json
import sqlite3
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

from identity import canonical, keys, records
from node.ops.datadir import DataDir
from scenarios.bench import spaces
from scenarios.bench.context import Context, Sizes
from scenarios.bench.harness import Server, bearer

SLOTS = spaces.SPACES + 1  # the 10 spaces and the public share
PER_SLOT = 20


def test_the_spaced_corpus_is_the_public_one_spread_over_the_spaces() -> None:
    signers = [keys.SigningKey.generate() for _ in range(SLOTS * spaces.AUTHORS_PER_SPACE)]
    ids: list[str | None] = [f"{n + 1:064x}" for n in range(spaces.SPACES)] + [None]  # space ids: 64 hex digits
    public = list(spaces.spread_entries(signers, SLOTS * PER_SLOT, [None] * SLOTS))
    spaced = list(spaces.spread_entries(signers, SLOTS * PER_SLOT, ids))
    same = ("author_id", "content", "tags", "entry_type", "performative")
    assert [{k: r[k] for k in same} for r, _ in spaced] == [{k: r[k] for k in same} for r, _ in public]
    for i, (record, record_hash) in enumerate(spaced):
        slot = i % SLOTS
        assert record.get("space") == ids[slot]
        version = canonical.SCHEMA_VERSION if ids[slot] is None else canonical.SPACE_SCHEMA_VERSION
        assert record["schema_version"] == version
        authors = {s.did for s in signers[slot * spaces.AUTHORS_PER_SPACE : (slot + 1) * spaces.AUTHORS_PER_SPACE]}
        assert record["author_id"] in authors  # a space's entries are written by its own members
        assert records.check(record, v3=True)[0] == record_hash  # what a node accepts (format v3), signature too
    assert all("space" not in r and r["schema_version"] == canonical.SCHEMA_VERSION for r, _ in public)


def every_match(url: str, api_key: str) -> list[dict[str, Any]]:
    """Every entry a REST search for the word all corpus entries hold finds, page after page."""
    found: list[dict[str, Any]] = []
    offset: int | None = 0
    while offset is not None:
        query = urllib.parse.urlencode({"q": "observation", "limit": 200, "offset": offset, "fresh": "true"})
        request = urllib.request.Request(f"{url}/v1/search?{query}", headers=bearer(api_key))
        with urllib.request.urlopen(request, timeout=30) as resp:
            page = json.loads(resp.read())
        found += page["entries"]
        offset = page["next_offset"]
    return found


def test_each_reader_of_the_pair_finds_what_the_benchmark_says_it_sees(tmp_path: Path) -> None:
    ctx = Context(Sizes(search_entries=SLOTS * PER_SLOT), tmp_path)
    public, spaced, public_reader, owner, half, stranger = spaces.build_pair(ctx)
    assert spaces.build_pair(ctx)[:2] == (public, spaced)  # built once per run
    with Server(public) as server:
        in_public = every_match(server.url, public_reader)
    assert len(in_public) == SLOTS * PER_SLOT and {e["space"] for e in in_public} == {None}
    with Server(spaced) as server:
        readers = {"owner": owner, "half": half, "none": stranger}
        seen = {who: every_match(server.url, key) for who, key in readers.items()}
    held = {e["space"] for e in seen["owner"]} - {None}
    assert len(seen["owner"]) == SLOTS * PER_SLOT and len(held) == spaces.SPACES  # the member of all 10 sees all
    assert {e["content"] for e in seen["owner"]} == {e["content"] for e in in_public}  # the same words
    half_spaces = {e["space"] for e in seen["half"]} - {None}
    assert len(half_spaces) == spaces.SPACES // 2 and half_spaces < held
    assert len(seen["half"]) == (spaces.SPACES // 2 + 1) * PER_SLOT  # its 5 spaces and the public share
    assert len(seen["none"]) == PER_SLOT and {e["space"] for e in seen["none"]} == {None}  # the public share only


def test_the_post_rounds_post_half_into_the_space_and_add_one_row(tmp_path: Path) -> None:
    clients, per_round = 2, 8
    ctx = Context(Sizes(clients=clients, ingest_posts=per_round), tmp_path)
    spaces.run_posts(ctx)
    (row,) = ctx.report.rows
    assert row.bench == spaces.BENCH and row.ratio is not None and row.ratio > 0 and row.met is not None
    with contextlib.closing(sqlite3.connect(DataDir(tmp_path / "spaces-posts").db_path)) as conn:
        by_space = dict(conn.execute("SELECT space, count(*) FROM entries GROUP BY space").fetchall())
    rounds_per_side = spaces.POST_ROUNDS
    assert by_space.pop(None) == rounds_per_side * per_round  # the public rounds
    assert list(by_space.values()) == [rounds_per_side * per_round]  # the space rounds, all in the one space
