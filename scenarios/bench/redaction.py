"""Redaction's costs (issue 39; docs/performance.md, "Redaction"): the scrub that takes a redacted body's terms out
of the search index, against rebuilding the index on the same corpus, and `secure_delete`'s write cost, against the
same SQLite writes without it.

- **scrub**: a corpus of signed entries is loaded and indexed, one entry is redacted on the node (its body leaves the
  log at once), the index deletes its document, and the scrub's index rewrite (`node/redaction/scrub.py`
  `rewrite_index`: every document added again, so the deleted document's segment goes) is timed beside
  `indexer.build` into an empty index of the same folder, then `wal_checkpoint(TRUNCATE)`. The secret's terms must
  have a document frequency of 0 afterwards (deleted documents included).
- **secure_delete**: rows shaped like the log's (a 1 KiB body) inserted in transactions of 100, then a tenth of them
  deleted, with `PRAGMA secure_delete` on (the node's writer) and off.

Run alone: `python -m scenarios.bench.redaction [--entries N] [--quick]`.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sqlite3
import tempfile
import time
from pathlib import Path
from typing import Any

from identity import records
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


async def _scrub_times(data: Path, target: str, author: str) -> tuple[float, float, float, int]:
    """(index rewrite s, index build s, checkpoint s, the secret's document frequency after) on the loaded folder."""
    node = Node(data)
    node.open()
    try:
        index = node.search_index
        assert index is not None
        await node.db.read(lambda conn: indexer.build(conn, index))
        await node.redactions.redact(author, target, "bench")
        assert await node.db.read(lambda conn: store.tombstones(conn, [target])), "the entry was not dropped"
        await asyncio.to_thread(index.apply, [], index.state()[0], [target])  # what the indexer does with the redo
        started = time.perf_counter()
        await scrub.rewrite_index(node, index)
        rewrite = time.perf_counter() - started
        started = time.perf_counter()
        assert await asyncio.to_thread(scrub.checkpoint, str(node.data.db_path))
        checkpoint = time.perf_counter() - started
        left = sum(index.doc_freq("content", term) for term in tokens(SECRET))
        index.reset()
        started = time.perf_counter()
        await node.db.read(lambda conn: indexer.build(conn, index))
        build = time.perf_counter() - started
        return rewrite, build, checkpoint, left
    finally:
        node.close()


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


def run(ctx: Context, entries: int | None = None) -> None:
    """The scrub's index rewrite against an index build, and secure_delete's write cost."""
    n = entries or (QUICK_ENTRIES if ctx.quick else ENTRIES)
    data, _ = corpus.fresh_data_dir(ctx.workdir, f"redaction-{n}")
    ((key, _api),) = corpus.register_agents(data, 1, keep_key=True, prefix="author")
    stream = list(corpus.signed_entries([key], n))
    record, _ = stream[n // 2]
    content = f"the password is {SECRET}"
    secret = records.sign({**{k: v for k, v in record.items() if k != "signature"}, "content": content}, key)
    stream[n // 2] = (secret, records.compute_hash(secret))
    corpus.bulk_load(data, iter(stream))
    rewrite, build, checkpoint, left = asyncio.run(_scrub_times(data, records.compute_hash(secret), key.did))
    print(f"  rewrite {rewrite:.2f}s, build {build:.2f}s, checkpoint {checkpoint:.3f}s, terms left {left}", flush=True)
    ctx.report.add(
        Row(
            BENCH,
            f"scrub: search index rewrite after a redaction ({n:,} entries), s",
            f"{rewrite:.2f}",
            f"{build:.2f}",
            ratio(rewrite, build),
            target="terms left 0",
            met=left == 0,
            method=f"rewrite_index vs indexer.build into an empty index, same folder; then the WAL checkpoint took"
            f" {checkpoint * 1000:.0f} ms; the secret's document frequency after: {left}",
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
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bbs-bench-redaction-") as tmp:
        ctx = Context(sizes=Sizes.quick() if args.quick else Sizes(), workdir=Path(tmp), quick=args.quick)
        run(ctx, args.entries)
        print(ctx.report.table(BENCH))


if __name__ == "__main__":
    main()
