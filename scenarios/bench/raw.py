"""Raw limits on this machine, measured in the same run: Ed25519 verifies/s, canonical JSON + SHA-256/s,
and SQLite batched inserts of the same rows the node writes (records, entries, tags), also with the FTS5 table and
trigger the node had in its write transaction before issue 24 (the old baseline, built in the bench's own file).
"""

from __future__ import annotations

import hashlib
import threading
import time
from pathlib import Path
from typing import Any

from identity import canonical, keys, records
from node.store import db
from scenarios.bench import corpus
from scenarios.bench.context import Context
from scenarios.bench.report import Row, rate, ratio
from wire.time import parse_ms

BENCH = "raw"
SQLITE_BATCH = 100
SQLITE_ROUNDS = 3
AT_COMMITS = 150  # commits per round of `sqlite_rate_at` (small commits are fsync-bound: a few seconds a round)
# The full-text table and trigger every write transaction fed before migration 0021
# (node/store/migrations/0001_core.sql).
OLD_FTS5 = (
    "CREATE VIRTUAL TABLE entries_fts USING fts5(content, tags, content='entries', content_rowid='id');"
    "CREATE TRIGGER entries_fts_insert AFTER INSERT ON entries BEGIN"
    " INSERT INTO entries_fts(rowid, content, tags) VALUES (new.id, new.content, new.tags); END;"
)


def sample_records(ctx: Context) -> list[tuple[dict[str, Any], str]]:
    """Signed entry records shared by the raw limits and the ingest baseline (generated once per run)."""
    if "raw_records" not in ctx.cache:
        signers = [keys.SigningKey.generate() for _ in range(16)]
        ctx.cache["raw_records"] = list(corpus.signed_entries(signers, ctx.sizes.raw_records, seed=11))
    return ctx.cache["raw_records"]


def ed25519_verify_rate(items: list[tuple[Any, bytes, bytes]], threads: int = 1) -> float:
    """Verifies per second of (public key, signature, message) triples, split over `threads` threads."""
    chunks = [items[i::threads] for i in range(threads)]

    def work(chunk: list[tuple[Any, bytes, bytes]]) -> None:
        for public, sig, msg in chunk:
            public.verify(sig, msg)

    started = time.perf_counter()
    workers = [threading.Thread(target=work, args=(c,)) for c in chunks]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    return len(items) / (time.perf_counter() - started)


def sqlite_rows(recs: list[tuple[dict[str, Any], str]]) -> list[tuple[tuple[Any, ...], tuple[Any, ...], list[Any]]]:
    """The exact rows the node stores per entry: (records row, entries row, entry_tags rows)."""
    import json

    now = int(time.time() * 1000)
    out = []
    for record, record_hash in recs:
        ms = parse_ms(record["created_at"])
        body = canonical.canonical_bytes(record)
        log_row = (
            record_hash,
            hashlib.sha256(body).hexdigest(),  # the version
            "entry",
            record["author_id"],
            record["created_at"],
            ms,
            "federation",
            "local",
            now,
            body,
        )
        entry_row = (
            record_hash,
            canonical.content_fingerprint(record["content"]),
            record["author_id"],
            record["created_at"],
            ms,
            record["entry_type"],
            record["performative"],
            record["content"],
            record["confidence"],
            json.dumps(record["tags"]),
            json.dumps(record["directed_to"]),
            json.dumps(record["metadata"], sort_keys=True),
            record["truth_state"],
            record["authority"],
            record["scope"],
            record["signature"],
        )
        out.append((log_row, entry_row, record["tags"]))
    return out


def sqlite_batched_rate(ctx: Context, fts5: bool = False) -> float:
    """Entries/s inserting the node's rows into the node's schema, 100 per transaction: the median of
    SQLITE_ROUNDS runs, each on a fresh file with the node's pragmas (one run moves by ±15% on a VM's disk).
    With `fts5`, the schema also has the FTS5 table and trigger of before issue 24 (rounds alternate with the
    rounds without it, so both see the same disk)."""
    if "sqlite_rate" not in ctx.cache:
        rows = sqlite_rows(sample_records(ctx))
        plain: list[float] = []
        old: list[float] = []
        for _ in range(SQLITE_ROUNDS):
            plain.append(sqlite_round(ctx, rows, fts5=False))
            old.append(sqlite_round(ctx, rows, fts5=True))
        for key, rounds in (("sqlite", sorted(plain)), ("sqlite_fts5", sorted(old))):
            ctx.cache[f"{key}_rounds"] = rounds
            ctx.cache[f"{key}_rate"] = rounds[len(rounds) // 2]
    return float(ctx.cache["sqlite_fts5_rate" if fts5 else "sqlite_rate"])


def remove_database(path: Path) -> None:
    """Delete an SQLite file and its WAL and shared-memory files, so a run starts from an empty database."""
    for suffix in ("", "-wal", "-shm"):
        path.with_name(path.name + suffix).unlink(missing_ok=True)


def sqlite_rate_at(ctx: Context, per_commit: float) -> float:
    """Entries/s of the raw batched inserts committed `per_commit` entries at a time (rounded, at least 1): the
    fair baseline for a writer that commits that many (the fsync of a commit is shared by fewer entries). The
    median of SQLITE_ROUNDS runs of AT_COMMITS commits each, on fresh files; cached per size."""
    size = max(1, round(per_commit))
    key = f"sqlite_rate_at_{size}"
    if key not in ctx.cache:
        rows = sqlite_rows(sample_records(ctx)[: size * AT_COMMITS])
        rounds = sorted(sqlite_round(ctx, rows, batch=size) for _ in range(SQLITE_ROUNDS))
        ctx.cache[key] = rounds[len(rounds) // 2]
    return float(ctx.cache[key])


def secure_delete_rates(ctx: Context) -> tuple[float, float]:
    """(entries/s with `secure_delete` on, as the node's writer runs, entries/s with it off): the raw batched inserts
    of `sqlite_batched_rate`, medians of SQLITE_ROUNDS alternating rounds on fresh files (issue 39 asks its write
    cost on the ingest path: the node's inserts free no page, so it should cost nothing measurable)."""
    if "secure_delete_rates" not in ctx.cache:
        rows = sqlite_rows(sample_records(ctx))
        on: list[float] = []
        off: list[float] = []
        for _ in range(SQLITE_ROUNDS):
            on.append(sqlite_round(ctx, rows))
            off.append(sqlite_round(ctx, rows, secure_delete=False))
        ctx.cache["secure_delete_rates"] = (sorted(on)[len(on) // 2], sorted(off)[len(off) // 2])
    on_rate, off_rate = ctx.cache["secure_delete_rates"]
    return float(on_rate), float(off_rate)


def sqlite_round(
    ctx: Context,
    rows: list[tuple[tuple[Any, ...], tuple[Any, ...], list[Any]]],
    fts5: bool = False,
    batch: int = SQLITE_BATCH,
    secure_delete: bool = True,
) -> float:
    """Entries/s of one round: `rows` inserted `batch` per transaction into a fresh file with the node's schema and
    writer pragmas (`fts5`: with the FTS5 table and trigger of before issue 24; `secure_delete` off if asked)."""
    path = ctx.workdir / "raw-sqlite.db"
    remove_database(path)
    conn = db.connect(path)  # the node writer's pragmas, secure_delete on among them
    if not secure_delete:
        conn.execute("PRAGMA secure_delete = OFF")
    db.migrate(conn)
    if fts5:
        conn.executescript(OLD_FTS5)
    started = time.perf_counter()
    for i in range(0, len(rows), batch):
        conn.execute("BEGIN IMMEDIATE")
        for log_row, entry_row, tags in rows[i : i + batch]:
            seq = conn.execute(
                "INSERT INTO records (hash, version, kind, author_id, created_at, created_ms, scope, origin,"
                " received_ms, body) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?) RETURNING seq",
                log_row,
            ).fetchone()[0]
            conn.execute(
                "INSERT INTO entries (id, record_hash, content_fingerprint, author_id, created_at, created_ms,"
                " entry_type, performative, content, confidence, tags, directed_to, metadata, truth_state, authority,"
                " scope, signature) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (seq, *entry_row),
            )
            conn.executemany("INSERT INTO entry_tags (entry_id, tag) VALUES (?, ?)", [(seq, t) for t in tags])
        conn.execute("COMMIT")
    elapsed = time.perf_counter() - started
    table = "entries_fts WHERE entries_fts MATCH 'observation'" if fts5 else "entries"
    count = conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0]
    conn.close()
    if count != len(rows):
        raise RuntimeError(f"{table} holds {count} of {len(rows)} rows")
    return len(rows) / elapsed


def verify_rates(ctx: Context) -> tuple[float, float]:
    """Ed25519 verifies/s on one thread and on two threads (does `cryptography` release the GIL?)."""
    if "verify_rates" not in ctx.cache:
        items = []
        for record, _ in sample_records(ctx):
            public = keys.public_key_from_did(record["author_id"])
            items.append((public, keys.b64u_decode(record["signature"]), records.signing_bytes(record)))
        ctx.cache["verify_rates"] = (ed25519_verify_rate(items, 1), ed25519_verify_rate(items, 2))
    return ctx.cache["verify_rates"]


def canonical_rate(ctx: Context) -> float:
    """Canonical JSON + SHA-256 of whole signed records per second."""
    if "canonical_rate" not in ctx.cache:
        recs = [r for r, _ in sample_records(ctx)]
        started = time.perf_counter()
        for record in recs:
            hashlib.sha256(canonical.canonical_bytes(record)).hexdigest()
        ctx.cache["canonical_rate"] = len(recs) / (time.perf_counter() - started)
    return float(ctx.cache["canonical_rate"])


def check_rate(ctx: Context) -> float:
    """Full record verification (size, form, canonical spelling, signature, schema) per second, one thread."""
    if "check_rate" not in ctx.cache:
        recs = [r for r, _ in sample_records(ctx)]
        started = time.perf_counter()
        for record in recs:
            records.check(record)
        ctx.cache["check_rate"] = len(recs) / (time.perf_counter() - started)
    return float(ctx.cache["check_rate"])


def run(ctx: Context) -> None:
    """Measure and report the raw limits."""
    n = ctx.sizes.raw_records
    one, two = verify_rates(ctx)
    canon = canonical_rate(ctx)
    checked = check_rate(ctx)
    sqlite_rate = sqlite_batched_rate(ctx)
    sqlite_fts5_rate = sqlite_batched_rate(ctx, fts5=True)
    secure_on, secure_off = secure_delete_rates(ctx)
    add = ctx.report.add
    add(
        Row(
            BENCH,
            "Ed25519 verifies/s, 2 threads vs 1",
            rate(two),
            rate(one),
            ratio(two, one),
            "",
            None,
            f"cryptography Ed25519PublicKey.verify over {n} signed entry records; ratio > 1 means the GIL is released",
        )
    )
    add(
        Row(
            BENCH,
            "canonical JSON + SHA-256 of a record /s",
            rate(canon),
            "—",
            None,
            "",
            None,
            f"identity.canonical.canonical_bytes + hashlib.sha256 over {n} signed entry records, one thread",
        )
    )
    add(
        Row(
            BENCH,
            "full record check /s vs Ed25519 verify /s",
            rate(checked),
            rate(one),
            ratio(checked, one),
            "",
            None,
            "identity.records.check (size, canonical spelling, signature, schema) vs the bare verify it contains",
        )
    )
    add(
        Row(
            BENCH,
            "sqlite3 batched inserts (entries/s) vs the same with the old FTS5 trigger",
            rate(sqlite_rate),
            rate(sqlite_fts5_rate),
            ratio(sqlite_rate, sqlite_fts5_rate),
            "",
            None,
            f"{n} entries: records + entries + entry_tags rows, node schema via node.store.db.migrate,"
            f" WAL, synchronous=FULL, {SQLITE_BATCH} per transaction; median of {SQLITE_ROUNDS} runs on fresh files"
            f" ({' / '.join(rate(r) for r in ctx.cache['sqlite_rounds'])}); baseline: the FTS5 table and trigger of"
            f" before issue 24 added ({' / '.join(rate(r) for r in ctx.cache['sqlite_fts5_rounds'])}), rounds"
            " alternating",
        )
    )
    add(
        Row(
            BENCH,
            "sqlite3 batched inserts (entries/s), secure_delete on (the node's writer) vs off",
            rate(secure_on),
            rate(secure_off),
            ratio(secure_on, secure_off),
            "",
            None,
            f"the batched inserts above, {SQLITE_BATCH} per transaction, median of {SQLITE_ROUNDS} alternating rounds"
            " on fresh files; the node's writer runs with secure_delete on for redaction (docs/operations.md)",
        )
    )
