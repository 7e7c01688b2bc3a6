"""The search benchmark's parts on a tiny real corpus: the FTS5 baseline's side table, the index's size and
rebuild, the /metrics gauges the lag sampler reads, and the memory figures. Never asserts a time."""

from __future__ import annotations

import contextlib
import os
import sqlite3
from pathlib import Path

import prometheus_client
import pytest

from identity import keys
from node.ops.datadir import DataDir
from scenarios.bench import corpus, fts_baseline, index_lag, search

ENTRIES = 300


@pytest.fixture
def data(tmp_path: Path) -> Path:
    folder, _ = corpus.fresh_data_dir(tmp_path, "corpus-300")
    signers = [keys.SigningKey.generate() for _ in range(3)]
    corpus.bulk_load(folder, corpus.signed_entries(signers, ENTRIES, seed=3))
    return folder


def drop_node_fts(db_path: Path) -> None:
    """What migration 0021 does to a store: no FTS5 table, no trigger."""
    with contextlib.closing(sqlite3.connect(db_path)) as conn:
        for (name,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'trigger' AND sql LIKE '%fts%'"):
            conn.execute(f"DROP TRIGGER {name}")
        conn.execute("DROP TABLE IF EXISTS entries_fts")
        conn.commit()


def page_ids(baseline: fts_baseline.Baseline, q: str, offset: int) -> list[int]:
    with contextlib.closing(baseline.connect()) as conn:
        rows = conn.execute(baseline.page_sql(), (fts_baseline.match_expression(q), 20, offset)).fetchall()
    return [row[0] for row in rows]


def test_the_side_table_answers_as_the_nodes_own_fts5_table_did(data: Path) -> None:
    db_path = DataDir(data).db_path
    with contextlib.closing(sqlite3.connect(db_path)) as conn:  # a store from before migration 0021: its own table
        conn.execute(
            "CREATE VIRTUAL TABLE entries_fts USING fts5(content, tags, content='entries', content_rowid='id')"
        )
        conn.execute("INSERT INTO entries_fts(entries_fts) VALUES('rebuild')")
        conn.commit()
    assert fts_baseline.has_node_table(db_path)
    own = fts_baseline.prepare(db_path)
    assert own.side_path is None
    probes = [(q, offset) for q in ("kernel", "kernel observation", "zeppelin", "topic07") for offset in (0, 40)]
    before = {(q, offset): (own.matches(q), page_ids(own, q, offset)) for q, offset in probes}
    drop_node_fts(db_path)
    side = fts_baseline.prepare(db_path)
    assert side.side_path == fts_baseline.side_path_for(db_path) and side.side_path.exists()
    assert side.build_seconds > 0
    assert {(q, offset): (side.matches(q), page_ids(side, q, offset)) for q, offset in probes} == before
    assert len(before[("kernel", 0)][1]) == 20
    assert side.latencies("kernel", 20, 0, 3)[1] == 20


def test_a_built_side_table_is_reused_and_a_half_built_one_is_rebuilt(data: Path) -> None:
    db_path = DataDir(data).db_path
    drop_node_fts(db_path)
    first = fts_baseline.prepare(db_path)
    assert first.build_seconds > 0
    again = fts_baseline.prepare(db_path)
    assert again.build_seconds == 0.0 and again.side_path == first.side_path
    assert first.side_path is not None
    first.side_path.with_suffix(".done").unlink()  # a run killed while building
    rebuilt = fts_baseline.prepare(db_path)
    assert rebuilt.build_seconds > 0 and rebuilt.matches("observation") == ENTRIES


def test_match_expression_quotes_every_word() -> None:
    assert fts_baseline.match_expression('Kernel  "NEAR(x)" zeppelin*') == '"kernel" "near" "x" "zeppelin"'


def test_the_rebuilt_index_answers_every_probe_and_has_a_size(data: Path) -> None:
    indexed, _ = search.rebuild_index(data)
    assert indexed == ENTRIES
    index_size, db_size = search.index_bytes(data)
    assert index_size > 0 and db_size > 0
    for probe in search.PROBES:
        latencies, page = search.raw_index_latencies(data, probe, 2)
        assert len(latencies) == 2
        assert page <= search.PAGE
    common = next(p for p in search.PROBES if p.q == corpus.COMMON_TERM and not p.offset)
    assert search.raw_index_latencies(data, common, 1)[1] == search.PAGE


def test_gauges_reads_unlabelled_samples_of_a_prometheus_exposition() -> None:
    registry = prometheus_client.CollectorRegistry()
    prometheus_client.Gauge(index_lag.ENTRIES_GAUGE, "lag", registry=registry).set(42)
    prometheus_client.Gauge(index_lag.SECONDS_GAUGE, "lag", registry=registry).set(0.25)
    prometheus_client.Gauge("bbs_searches_answered", "by path", ["path"], registry=registry).labels("index").set(3)
    values = index_lag.gauges(prometheus_client.generate_latest(registry).decode())
    assert values[index_lag.ENTRIES_GAUGE] == 42.0
    assert values[index_lag.SECONDS_GAUGE] == 0.25
    assert not any(name.startswith("bbs_searches_answered") for name in values)


def test_proc_memory_splits_the_resident_set() -> None:
    memory = search.proc_memory(os.getpid())
    assert set(memory) == {"VmRSS", "VmHWM", "RssAnon", "RssFile", "RssShmem"}
    assert memory["RssAnon"] + memory["RssFile"] + memory["RssShmem"] == memory["VmRSS"]
    assert memory["VmHWM"] >= memory["VmRSS"] > 0
