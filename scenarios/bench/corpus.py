"""Deterministic workload: entry texts with known common and rare terms, real signed records, fast bulk loading.

Bulk loading writes real signed records straight into a data folder through the node's own
`projections.append_many` inside `db.write_sync`, in large transactions: the same rows the REST path
produces, without paying for HTTP while building a 100k corpus.
"""

from __future__ import annotations

import random
import shutil
import sqlite3
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import msgspec

from identity import canonical, key_files, keys, records, schema_v3
from identity.schema import EntryRecord
from node.agents import service as agents
from node.features import LOG
from node.ops.datadir import DataDir, initialise
from node.store import db, projections

COMMON_TERM = "kernel"  # in about 20% of entries
RARE_TERM = "zeppelin"  # in about 1 entry in 10,000 (at least one)
TAGS = [f"topic{i:02d}" for i in range(50)]
_SYLLABLES = ["ka", "lo", "mi", "ne", "ru", "sa", "ti", "vo", "ze", "pa", "qu", "da", "fe", "go", "hi", "ju"]


def vocabulary(rng: random.Random, size: int = 4000) -> list[str]:
    """Made-up words of 2-4 syllables; none collides with the marker terms."""
    words: set[str] = set()
    while len(words) < size:
        words.add("".join(rng.choice(_SYLLABLES) for _ in range(rng.randint(2, 4))))
    words.discard(COMMON_TERM)
    words.discard(RARE_TERM)
    return sorted(words)


class TextGen:
    """Entry content of about 200 characters with a Zipf-like word distribution."""

    def __init__(self, seed: int = 7) -> None:
        self.rng = random.Random(seed)
        self.words = vocabulary(self.rng)
        self.weights = [1 / (rank + 1) for rank in range(len(self.words))]

    def content(self, i: int) -> str:
        picked = self.rng.choices(self.words, self.weights, k=self.rng.randint(24, 36))
        if self.rng.random() < 0.2:
            picked[self.rng.randrange(len(picked))] = COMMON_TERM
        if i % 10_000 == 5_000 or (i % 10_000 == 0 and i > 0):
            picked[self.rng.randrange(len(picked))] = RARE_TERM
        return f"Observation {i}: " + " ".join(picked) + "."

    def tags(self) -> list[str]:
        return sorted(set(self.rng.sample(TAGS, 2)))


def entry_body(
    author: str, created_at: str, content: str, tags: list[str], links: list[dict[str, Any]]
) -> dict[str, Any]:
    """An unsigned, already-normalised entry record."""
    return {
        "kind": "entry",
        "schema_version": canonical.SCHEMA_VERSION,
        "author_id": author,
        "created_at": created_at,
        "entry_type": "finding",
        "performative": "inform",
        "content": canonical.normalize_content(content),
        "confidence": 0.8,
        "tags": tags,
        "directed_to": [],
        "links": links,
        "metadata": {},
        "truth_state": "fact",
        "authority": "raw",
        "scope": "federation",
    }


def created_at_for(i: int, base: datetime | None = None) -> str:
    """Distinct canonical timestamps, one millisecond apart, ending before now."""
    start = base or datetime.now(UTC) - timedelta(days=30)
    return canonical.format_created_at(start + timedelta(milliseconds=i))


def signed_entries(
    signers: list[keys.SigningKey], count: int, *, seed: int = 7, link_ratio: float = 0.0, start: int = 0
) -> Iterator[tuple[dict[str, Any], str]]:
    """`count` signed entry records (round-robin over `signers`) with their hashes.

    With `link_ratio`, that fraction of entries carries a `responds_to` link to a random earlier one.
    """
    return _signed(signers, count, seed=seed, link_ratio=link_ratio, start=start, base=None)


def _signed(
    signers: list[keys.SigningKey], count: int, *, seed: int, link_ratio: float, start: int, base: datetime | None
) -> Iterator[tuple[dict[str, Any], str]]:
    gen = TextGen(seed)
    hashes: list[str] = []
    base = base or datetime.now(UTC) - timedelta(days=30)
    for i in range(start, start + count):
        links: list[dict[str, Any]] = []
        if hashes and gen.rng.random() < link_ratio:
            links = [{"target": gen.rng.choice(hashes), "link_type": "responds_to", "annotation": ""}]
        signer = signers[i % len(signers)]
        record = records.sign(
            entry_body(signer.did, created_at_for(i, base), gen.content(i), gen.tags(), links), signer
        )
        record_hash = records.compute_hash(record)
        if link_ratio:
            hashes.append(record_hash)
        yield record, record_hash


CHUNK = 5_000


def _signed_chunk(args: tuple[list[bytes], int, int, int, float, int]) -> list[tuple[dict[str, Any], str]]:
    seeds, count, seed, start, link_ratio, base_ms = args
    signers = [keys.SigningKey.from_seed(s) for s in seeds]
    base = datetime.fromtimestamp(base_ms / 1000, UTC)
    return list(_signed(signers, count, seed=seed + start, link_ratio=link_ratio, start=start, base=base))


def signed_entries_parallel(
    signers: list[keys.SigningKey], count: int, *, seed: int = 7, link_ratio: float = 0.0
) -> Iterator[tuple[dict[str, Any], str]]:
    """Like `signed_entries`, generated in chunks by a worker process while the caller consumes earlier ones.

    Links point within a chunk of CHUNK entries. The worker overlaps signing with the caller's inserts.
    """
    from concurrent.futures import ProcessPoolExecutor

    seeds = [k.seed for k in signers]
    base_ms = int((datetime.now(UTC) - timedelta(days=30)).timestamp() * 1000)
    jobs = [(seeds, min(CHUNK, count - start), seed, start, link_ratio, base_ms) for start in range(0, count, CHUNK)]
    with ProcessPoolExecutor(max_workers=1) as pool:
        for chunk in pool.map(_signed_chunk, jobs):
            yield from chunk


def register_agents(data: Path, count: int, *, keep_key: bool, prefix: str) -> list[tuple[keys.SigningKey, str]]:
    """Register `count` agents on the data folder in one transaction; return (key, api key) pairs."""
    node_id = key_files.load_key(DataDir(data).key_path).did
    made = [keys.SigningKey.generate() for _ in range(count)]

    def run(conn: sqlite3.Connection) -> list[tuple[keys.SigningKey, str]]:
        out = []
        for n, key in enumerate(made):
            record = agents.identity_record(key, f"{prefix} {n}", "", node_id)
            api_key = agents.register(
                conn, name=f"{prefix}-{n}", key=key, keep_key=keep_key, record=record, now_ms=_now_ms()
            )
            out.append((key, api_key))
        return out

    return db.write_sync(DataDir(data).store, run, log=LOG)


def bulk_load(data: Path, stream: Iterator[tuple[dict[str, Any], str]], *, batch: int = 5000) -> int:
    """Append signed records to a data folder's log through the node's projections; return how many."""
    path = DataDir(data).store
    total = 0
    pending: list[tuple[dict[str, Any], str]] = []

    def flush(conn: sqlite3.Connection) -> None:
        projections.append_many(conn, [_incoming(r, h) for r, h in pending], origin="local", now_ms=_now_ms())

    for item in stream:
        pending.append(item)
        if len(pending) >= batch:
            db.write_sync(path, flush, log=LOG)
            total += len(pending)
            pending = []
    if pending:
        db.write_sync(path, flush, log=LOG)
        total += len(pending)
    return total


def _incoming(record: dict[str, Any], record_hash: str) -> projections.Incoming:
    """A signed entry on its way into the log; one inside a space (v2, issue 37) stays on the node, as the node
    stores one."""
    decoded = msgspec.convert(record, schema_v3.struct_for(record) or EntryRecord)
    return projections.Incoming(record, record_hash, decoded, "local" if "space" in record else "federation")


def fresh_data_dir(root: Path, name: str, store_url: str | None = None) -> tuple[Path, str]:
    """An initialised, empty data folder and its admin token; a folder of that name a previous run left in a
    kept --workdir is replaced (only a finished corpus is reused, by its own `.done` marker). `store_url` (an empty
    PostgreSQL database's URL) puts the node's database there, as `bbs init --store` does."""
    path = root / name
    if path.exists():
        shutil.rmtree(path)
    token = initialise(path, store_url)
    assert token is not None, f"{path} was not empty"
    return path, token


def _now_ms() -> int:
    import time

    return int(time.time() * 1000)
