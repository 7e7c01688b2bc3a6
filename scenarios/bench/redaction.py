"""Redaction's costs (issue 39; docs/performance.md, "Redaction"): the scrub that takes a redacted body's terms out
of the search index, against rebuilding the index on the same corpus, and `secure_delete`'s write cost, against the
same SQLite writes without it.

- **scrub**: a corpus of signed entries (the search benchmark's texts, one author whose key the node keeps, the middle
  entry carrying a secret) is loaded, copied (the copy is redacted; a kept --workdir reuses the corpus) and indexed
  as the node does (`indexer.build`, its merges let finish), the secret's entry is redacted on the node with a grace
  of 0, and the time from the redaction stored to `scrub.scrub_due` done is the time to gone-from-disk: the index
  deletes the document, adds again the live documents of the segment that held it (`scrub_index`, docs/decisions.md
  record 71) and the WAL is checkpointed and truncated. Beside it: the whole-index rewrite (`rewrite_index`, the
  scrub before; `--no-full` skips it) and `indexer.build` into an empty index of the same folder (the floor). The
  secret's terms must have a document frequency of 0 afterwards (deleted documents included), and no file of the
  index folder may hold its bytes.
- **secure_delete**: rows shaped like the log's (a 1 KiB body) inserted in transactions of 100, then a tenth of them
  deleted, with `PRAGMA secure_delete` on (the node's writer) and off.

Run alone: `python -m scenarios.bench.redaction [--entries N] [--quick] [--workdir DIR] [--no-full]`.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import shutil
import sqlite3
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import tantivy

from identity import keys, records
from node.ops.datadir import DataDir
from node.redaction import scrub, store
from node.search_index import indexer
from node.search_index.analyzer import tokens
from node.service import Node
from node.store import db
from scenarios.bench import corpus
from scenarios.bench.context import Context, Sizes
from scenarios.bench.report import Row, ratio

BENCH = "redaction"
ENTRIES = 20_000
QUICK_ENTRIES = 300
SECRET = "zqsecretzq0fbench"
ROWS = 20_000
QUICK_ROWS = 500


@dataclass(frozen=True)
class ScrubTimes:
    """What `_scrub_times` measured on one corpus."""

    scrub: float  # s from the redaction stored to its scrub done (`scrub.scrub_due`, grace 0): gone from disk
    added: int  # documents the scrub added again (the live documents of the secret's segment)
    segment: int  # documents of the segment that held the secret (deleted ones included)
    largest: int  # documents of the index's largest segment (what a scrub adds again at worst)
    segments: int  # segments in the index when the redaction came
    left: int  # the secret's document frequency after the scrub, deleted documents included
    files: int  # files of the index folder whose bytes still hold the secret
    look: float  # s of the scrub's look for segments holding a dropped document (`held_with_dropped`), once more
    full: float | None  # s of adding every document again (`scrub.rewrite_index`, the scrub before record 71)
    build: float  # s of `indexer.build` into an empty index, same folder (the floor)


async def _built(data: Path) -> Node:
    """The node of `data`, its index built and its merges done (a node that has served a while: closing the index
    waits for tantivy's background merges)."""
    node = Node(data)
    node.open()
    index = node.search_index
    assert index is not None
    await node.db.read(lambda conn: indexer.build(conn, index))
    node.close()
    node = Node(data)
    node.open()
    return node


async def _scrub_times(data: Path, target: str, author: str, full: bool) -> ScrubTimes:
    """Redact the secret's entry on the loaded folder and time its scrub, against the whole-index rewrite and a
    build."""
    node = await _built(data)
    try:
        index = node.search_index
        assert index is not None
        snap = index.segments()
        assert snap is not None
        hits = snap.searcher.search(tantivy.Query.term_query(index.index.schema, "content", SECRET), limit=1).hits
        segment = snap.segments[hits[0][1].segment_ord].max_doc
        largest, count = max(s.max_doc for s in snap.segments), len(snap.segments)
        del snap, hits  # a searcher of the old segments would keep their files on disk
        node.redactions.grace_s = 0
        await node.redactions.redact(author, target, "bench")
        started = time.perf_counter()  # the redaction is stored: its answers hide, its bytes go now (grace 0)
        added = await _scrub(node)
        scrub_s = time.perf_counter() - started
        assert await node.db.read(lambda conn: store.tombstones(conn, [target])), "the entry was not dropped"
        left = sum(index.doc_freq("content", term) for term in tokens(SECRET))
        files = sum(1 for p in index.path.rglob("*") if p.is_file() and SECRET.encode() in p.read_bytes())
        started = time.perf_counter()
        assert await scrub.held_with_dropped(node, index) == (0, []), "a dropped document is still held"
        look = time.perf_counter() - started
        full_s = None
        if full:
            started = time.perf_counter()
            await scrub.rewrite_index(node, index)
            full_s = time.perf_counter() - started
        index.reset()
        started = time.perf_counter()
        await node.db.read(lambda conn: indexer.build(conn, index))
        build = time.perf_counter() - started
        return ScrubTimes(scrub_s, added, segment, largest, count, left, files, look, full_s, build)
    finally:
        node.close()


async def _scrub(node: Node) -> int:
    """`scrub.scrub_due` as the scrubber runs it; the documents its index scrub added again."""
    before = node.redactions.rewritten
    assert await scrub.scrub_due(node), "nothing was due"
    return node.redactions.rewritten - before


def _screen_cost(data: Path, key: Any, n: int) -> tuple[float, float]:
    """(s of the two screens' look-up for 1,000 arriving records, s of appending them) on the loaded folder."""
    batch = list(corpus.signed_entries([key], 1_000, seed=99, start=n + 10))
    path = DataDir(data).db_path
    started = time.perf_counter()
    corpus.bulk_load(data, iter(batch), batch=1_000)
    append = time.perf_counter() - started

    def look(conn: sqlite3.Connection) -> float:
        began = time.perf_counter()
        for _ in range(2):
            store.any_named(conn, [h for _, h in batch])
        return time.perf_counter() - began

    return db.read_sync(path, look), append


def _writes(path: Path, rows: int, secure: bool) -> tuple[float, float]:
    """(insert s, delete s) of `rows` log-shaped rows in transactions of 100, then a tenth of them deleted."""
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("PRAGMA synchronous = FULL")
    conn.execute(f"PRAGMA secure_delete = {'ON' if secure else 'OFF'}")
    conn.execute("CREATE TABLE records (seq INTEGER PRIMARY KEY, hash TEXT UNIQUE, body BLOB)")
    started = time.perf_counter()
    for start in range(0, rows, 100):
        conn.execute("BEGIN")
        conn.executemany(
            "INSERT INTO records (hash, body) VALUES (?, ?)",
            [(f"{i:064x}", os.urandom(1024)) for i in range(start, min(rows, start + 100))],
        )
        conn.execute("COMMIT")
    inserted = time.perf_counter() - started
    started = time.perf_counter()
    for start in range(0, rows, 1000):
        conn.execute("BEGIN")
        conn.executemany("DELETE FROM records WHERE seq = ?", [(s,) for s in range(start + 1, start + 1001, 10)])
        conn.execute("COMMIT")
    deleted = time.perf_counter() - started
    conn.close()
    return inserted, deleted


def secret_corpus(ctx: Context, n: int) -> tuple[Path, Any, str]:
    """A data folder holding `n` signed entries of the search benchmark's corpus by one author whose key the node
    keeps, the middle one carrying SECRET: (folder, the author's key, the secret entry's address). A finished
    corpus in a kept --workdir is reused (its `.done` marker holds the key's seed and the address)."""
    done = ctx.workdir / f"redaction-{n}.done"
    if done.exists():
        seed, target = done.read_text().split()
        return ctx.workdir / f"redaction-{n}", keys.SigningKey.from_seed(bytes.fromhex(seed)), target
    data, _ = corpus.fresh_data_dir(ctx.workdir, f"redaction-{n}")
    ((key, _api),) = corpus.register_agents(data, 1, keep_key=True, prefix="author")
    secret: list[str] = []

    def stream() -> Iterator[tuple[dict[str, Any], str]]:
        for i, (record, record_hash) in enumerate(corpus.signed_entries_parallel([key], n)):
            if i == n // 2:
                body = {k: v for k, v in record.items() if k != "signature"}
                record = records.sign({**body, "content": f"the password is {SECRET}"}, key)
                record_hash = records.compute_hash(record)
                secret.append(record_hash)
            yield record, record_hash

    started = time.perf_counter()
    corpus.bulk_load(data, stream())
    print(f"  loaded {n:,} signed entries in {time.perf_counter() - started:.1f}s", flush=True)
    done.write_text(f"{key.seed.hex()} {secret[0]}\n")
    return data, key, secret[0]


def run(ctx: Context, entries: int | None = None, full: bool = True) -> None:
    """The scrub from a redaction to gone-from-disk against an index build, and secure_delete's write cost. `full`:
    time the whole-index rewrite too (the scrub before docs/decisions.md record 71)."""
    n = entries or (QUICK_ENTRIES if ctx.quick else ENTRIES)
    pristine, key, target = secret_corpus(ctx, n)
    data = ctx.workdir / f"redaction-{n}-run"  # a copy: the corpus stays unredacted for the next run
    shutil.rmtree(data, ignore_errors=True)
    shutil.copytree(pristine, data)
    t = asyncio.run(_scrub_times(data, target, key.did, full))
    full_s = "not timed (--no-full)" if t.full is None else f"{t.full:.2f}s"
    print(
        f"  scrub {t.scrub:.2f}s ({t.added:,} documents added again; the secret's segment held {t.segment:,}, the"
        f" largest {t.largest:,} of {t.segments} segments; the look {t.look:.2f}s), whole rewrite {full_s},"
        f" build {t.build:.2f}s, terms left {t.left}, files holding it {t.files}",
        flush=True,
    )
    ctx.report.add(
        Row(
            BENCH,
            f"scrub: redaction stored to gone from disk ({n:,} entries), s",
            f"{t.scrub:.2f}",
            f"{t.build:.2f}",
            ratio(t.scrub, t.build),
            target="terms left 0",
            met=t.left == 0 and t.files == 0,
            method=f"scrub.scrub_due, grace 0 (the index scrub: {t.added:,} documents added again, the secret's"
            f" segment held {t.segment:,}, the largest {t.largest:,} of {t.segments}; its look for them took"
            f" {t.look:.2f}s; then the WAL checkpoints)"
            f" vs indexer.build into an empty index, same folder; the whole-index rewrite: {full_s}; the"
            f" secret's document frequency after: {t.left}, index files holding it: {t.files}",
        )
    )
    check, append = _screen_cost(data, key, n)
    ctx.report.add(
        Row(
            BENCH,
            "refuse-after-redaction check per 1,000 arriving records, ms",
            f"{check * 1000:.2f}",
            f"{append * 1000:.1f}",
            ratio(check, append),
            target="<= 0.05",
            met=ratio(check, append) <= 0.05,
            method="store.any_named twice (sync ingest's screen, then the log's before the append) vs appending"
            " the same 1,000 signed entries through projections.append_many",
        )
    )
    rows = QUICK_ROWS if ctx.quick else ROWS
    with tempfile.TemporaryDirectory(dir=ctx.workdir) as tmp:
        off = _writes(Path(tmp) / "off.db", rows, secure=False)
        on = _writes(Path(tmp) / "on.db", rows, secure=True)
    for what, ours, base in (("inserts", on[0], off[0]), ("deletes (a tenth)", on[1], off[1])):
        ctx.report.add(
            Row(
                BENCH,
                f"secure_delete: {rows:,} log-shaped rows, {what}, s",
                f"{ours:.2f}",
                f"{base:.2f}",
                ratio(ours, base),
                method="WAL, synchronous FULL, transactions of 100 (deletes: of 100 rows); secure_delete on vs off",
            )
        )


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m scenarios.bench.redaction", description=__doc__)
    parser.add_argument("--entries", type=int, help=f"corpus size (default {ENTRIES:,})")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--workdir", type=Path, help="a folder kept after the run; its finished corpora are reused")
    parser.add_argument("--no-full", action="store_true", help="skip timing the whole-index rewrite")
    args = parser.parse_args()
    with contextlib.ExitStack() as stack:
        workdir = args.workdir or Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="bbs-bench-redaction-")))
        workdir.mkdir(parents=True, exist_ok=True)
        ctx = Context(sizes=Sizes.quick() if args.quick else Sizes(), workdir=workdir, quick=args.quick)
        run(ctx, args.entries, full=not args.no_full)
        print(ctx.report.table(BENCH))


if __name__ == "__main__":
    main()
