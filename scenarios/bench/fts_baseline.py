"""The old search, SQLite FTS5, as the search benchmark's baseline on the same corpus.

A node no longer keeps an FTS5 table once migration 0021 has run, so the baseline builds its own in a side
database in the bench workdir (`<corpus>-fts5.db`, kept with the corpus): the same columns and default unicode61
tokenizer the node's `entries_fts` had, filled from the corpus's `entries`. A corpus that still has `entries_fts`
(built before that migration) is queried directly. The query is the one the node ran: every word quoted and
ANDed, `ORDER BY rank, id DESC`, one page of whole entry rows.
"""

from __future__ import annotations

import contextlib
import re
import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path

SIDE_TABLE = "fts"
BATCH = 20_000  # rows per insert statement while filling the side table


def match_expression(q: str) -> str:
    """FTS5 MATCH text for free text, as the node built it: each `\\w+` word quoted, ANDed."""
    return " ".join(f'"{word}"' for word in re.findall(r"\w+", q.casefold()))


def has_node_table(db_path: Path) -> bool:
    """Whether the corpus still carries the node's own `entries_fts` (a store from before migration 0021)."""
    with contextlib.closing(sqlite3.connect(f"file:{db_path}?mode=ro", uri=True)) as conn:
        return conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'entries_fts'").fetchone() is not None


@dataclass
class Baseline:
    """Where the FTS5 baseline lives: the corpus file itself, or a side database attached beside it."""

    db_path: Path
    side_path: Path | None
    build_seconds: float = 0.0

    def connect(self) -> sqlite3.Connection:
        """A read-only connection on which `entries` and the FTS5 table (as `fts_table`) are both visible."""
        if self.side_path is None:
            return sqlite3.connect(f"file:{self.db_path}?mode=ro", uri=True)
        conn = sqlite3.connect(f"file:{self.side_path}?mode=ro", uri=True)
        conn.execute("ATTACH DATABASE ? AS corpus", (f"file:{self.db_path}?mode=ro",))
        return conn

    @property
    def fts_table(self) -> str:
        return "entries_fts" if self.side_path is None else SIDE_TABLE

    @property
    def entries_table(self) -> str:
        return "entries" if self.side_path is None else "corpus.entries"

    def page_sql(self) -> str:
        """The node's old FTS5 search page: MATCH, skip synthetic entries, BM25 rank then newest, LIMIT/OFFSET."""
        fts, entries = self.fts_table, self.entries_table
        return (
            f"SELECT e.* FROM {fts} f JOIN {entries} e ON e.id = f.rowid"
            f" WHERE {fts} MATCH ? AND e.truth_state != 'simulation' ORDER BY f.rank, e.id DESC LIMIT ? OFFSET ?"
        )

    def latencies(self, q: str, limit: int, offset: int, rounds: int) -> tuple[list[float], int]:
        """Latencies of `rounds` runs of the page query for `q` (one warm-up first), and the page's row count."""
        sql, args = self.page_sql(), (match_expression(q), limit, offset)
        with contextlib.closing(self.connect()) as conn:
            rows = conn.execute(sql, args).fetchall()
            lat = []
            for _ in range(rounds):
                started = time.perf_counter()
                rows = conn.execute(sql, args).fetchall()
                lat.append(time.perf_counter() - started)
        return lat, len(rows)

    def matches(self, q: str) -> int:
        """How many entries match `q` (all its words)."""
        with contextlib.closing(self.connect()) as conn:
            sql = f"SELECT count(*) FROM {self.fts_table} WHERE {self.fts_table} MATCH ?"
            return int(conn.execute(sql, (match_expression(q),)).fetchone()[0])


def side_path_for(db_path: Path) -> Path:
    """The side database of a corpus: beside its data folder, so a kept --workdir keeps it with the corpus."""
    return db_path.parent.parent / f"{db_path.parent.name}-fts5.db"


def prepare(db_path: Path) -> Baseline:
    """The corpus's FTS5 baseline: its own `entries_fts` if it has one, else a side database (built once)."""
    if has_node_table(db_path):
        return Baseline(db_path, None)
    side = side_path_for(db_path)
    done = side.with_suffix(".done")
    if done.exists() and side.exists():
        return Baseline(db_path, side)
    return Baseline(db_path, side, build_side(db_path, side))


def build_side(db_path: Path, side: Path) -> float:
    """Fill a fresh side database's FTS5 table from the corpus's entries; returns the seconds it took."""
    for stale in (side, side.with_suffix(".done")):
        stale.unlink(missing_ok=True)
    started = time.perf_counter()
    with contextlib.closing(sqlite3.connect(f"file:{side}", uri=True)) as conn:
        conn.execute("PRAGMA journal_mode = OFF")
        conn.execute("PRAGMA synchronous = OFF")
        conn.execute(f"CREATE VIRTUAL TABLE {SIDE_TABLE} USING fts5(content, tags)")
        conn.execute("ATTACH DATABASE ? AS corpus", (f"file:{db_path}?mode=ro",))
        position = 0
        while True:
            top = conn.execute(
                "SELECT max(id) FROM (SELECT id FROM corpus.entries WHERE id > ? ORDER BY id LIMIT ?)",
                (position, BATCH),
            ).fetchone()[0]
            if top is None:
                break
            conn.execute(
                f"INSERT INTO {SIDE_TABLE}(rowid, content, tags)"
                " SELECT id, content, tags FROM corpus.entries WHERE id > ? AND id <= ?",
                (position, top),
            )
            conn.commit()
            position = top
    seconds = time.perf_counter() - started
    side.with_suffix(".done").write_text(f"{seconds:.1f}\n")
    return seconds
