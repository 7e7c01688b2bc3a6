"""The PostgreSQL benchmark's parts on a real cluster: its raw baseline stores the rows the node stores for the same
records, and its cluster keeps fsync on where the tests' cluster does not. Never asserts a time."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

import psycopg
import pytest

from identity import keys
from node.store import db
from scenarios import pg_cluster as cluster_mod
from scenarios.bench import corpus, postgresql, raw

ENTRY_COLUMNS = (
    "record_hash, content_fingerprint, author_id, created_at, created_ms, entry_type, performative, content,"
    " confidence, tags, directed_to, metadata, truth_state, authority, scope, signature"
)


def stored(url: str, hashes: list[str]) -> dict[str, list[tuple[Any, ...]]]:
    """The records, entries and entry_tags rows of `hashes` in the database at `url`, without the ids the database
    hands out and the time of receipt."""
    with psycopg.connect(url) as conn:
        return {
            "records": conn.execute(
                "SELECT hash, version, kind, author_id, created_at, created_ms, scope, origin, body FROM records"
                " WHERE hash = ANY(%s) ORDER BY hash",
                (hashes,),
            ).fetchall(),
            "entries": conn.execute(
                f"SELECT {ENTRY_COLUMNS} FROM entries WHERE record_hash = ANY(%s) ORDER BY record_hash", (hashes,)
            ).fetchall(),
            "entry_tags": conn.execute(
                "SELECT e.record_hash, t.tag FROM entry_tags t JOIN entries e ON e.id = t.entry_id"
                " WHERE e.record_hash = ANY(%s) ORDER BY 1, 2",
                (hashes,),
            ).fetchall(),
        }


@pytest.mark.postgresql
def test_the_raw_baseline_stores_the_rows_the_node_stores(pg_cluster: cluster_mod.Cluster, tmp_path: Path) -> None:
    records = list(corpus.signed_entries([keys.SigningKey.generate() for _ in range(3)], 25, seed=3))
    hashes = [h for _, h in records]
    raw_db = pg_cluster.create_database()
    with contextlib.closing(db.connect_store(pg_cluster.store_url(raw_db))) as conn:
        db.migrate_store(conn)
    assert postgresql.insert_rows(pg_cluster.url(raw_db), raw.sqlite_rows(records), per_commit=7) > 0
    node_db = pg_cluster.create_database()
    folder, _ = corpus.fresh_data_dir(tmp_path, "node", pg_cluster.store_url(node_db))
    assert corpus.bulk_load(folder, iter(records)) == len(records)
    by_raw, by_node = stored(pg_cluster.url(raw_db), hashes), stored(pg_cluster.url(node_db), hashes)
    assert len(by_raw["records"]) == len(by_raw["entries"]) == len(records)
    assert len(by_raw["entry_tags"]) == sum(len(record["tags"]) for record, _ in records)
    assert by_raw == by_node


@pytest.mark.postgresql
def test_the_benchmark_cluster_keeps_fsync_on_where_the_tests_cluster_does_not(
    pg_cluster: cluster_mod.Cluster,
) -> None:
    def settings(url: str) -> tuple[str, str]:
        with psycopg.connect(url) as conn:
            row = conn.execute("SELECT current_setting('fsync'), current_setting('full_page_writes')").fetchone()
        assert row is not None
        return row[0], row[1]

    with postgresql.durable_cluster() as durable:
        assert durable is not None
        assert settings(durable.url()) == ("on", "on")
        folder = durable.folder
    assert not folder.exists()  # removed after the run
    assert settings(pg_cluster.url()) == ("off", "off")
