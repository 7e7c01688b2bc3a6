"""The PostgreSQL scrub's own conditions (node/redaction/store.py `scrub_pg`, docs/decisions.md record 78): a node
role without the grants is told what is missing and nothing is rewritten; with them (owning its database, in
pg_checkpoint, allowed pg_switch_wal) it scrubs without being a superuser; a reader holding a table past the lock
timeout makes the scrub wait instead of blocking the node. On the throwaway cluster (scenarios/pg_cluster.py),
whose wal_recycle is off as docs/operations.md asks of an operator."""

from __future__ import annotations

from collections.abc import Iterator

import psycopg
import pytest

from node.redaction import store
from scenarios import pg_cluster as cluster_mod

pytestmark = pytest.mark.postgresql


@pytest.fixture
def plain_role(pg_cluster: cluster_mod.Cluster, pg_migrated_url: str) -> Iterator[tuple[str, str]]:
    """A login role that is no superuser, and the URL of the migrated database (owned by the superuser) as it."""
    role = "plain_" + pg_migrated_url.split("dbname=")[1]
    pg_cluster.admin(f'CREATE ROLE "{role}" LOGIN')
    yield role, pg_migrated_url.replace(f"user={cluster_mod.SUPERUSER}", f"user={role}")
    pg_cluster.drop_database(pg_migrated_url.split("dbname=")[1])  # it may own it, and holds its grants
    pg_cluster.admin(f'DROP ROLE "{role}"')


def relfilenode(url: str, table: str) -> int:
    with psycopg.connect(url) as conn:
        row = conn.execute("SELECT relfilenode FROM pg_class WHERE relname = %s", (table,)).fetchone()
        assert row is not None
        return int(row[0])


def test_a_role_without_the_grants_is_told_what_is_missing_and_then_scrubs_with_them(
    pg_cluster: cluster_mod.Cluster, pg_migrated_url: str, plain_role: tuple[str, str]
) -> None:
    role, url = plain_role
    before = relfilenode(pg_migrated_url, "records")
    refusal = store.scrub_pg(url, store.SCRUB_TABLES_PG, 1000)
    assert refusal is not None
    assert "does not own its database" in refusal
    assert "GRANT pg_checkpoint" in refusal
    assert "GRANT EXECUTE ON FUNCTION pg_switch_wal()" in refusal
    assert "wal_recycle" not in refusal  # the cluster's is off
    assert relfilenode(pg_migrated_url, "records") == before  # nothing was rewritten

    dbname = pg_migrated_url.split("dbname=")[1]
    pg_cluster.admin(f'ALTER DATABASE "{dbname}" OWNER TO "{role}"')
    pg_cluster.admin(f'GRANT pg_checkpoint TO "{role}"')
    with psycopg.connect(pg_migrated_url, autocommit=True) as conn:  # a function's grant lives in its database
        conn.execute(f'GRANT EXECUTE ON FUNCTION pg_switch_wal() TO "{role}"')
    assert store.scrub_pg(url, store.SCRUB_TABLES_PG, 1000) is None
    assert relfilenode(pg_migrated_url, "records") != before  # VACUUM FULL wrote the table anew


def test_a_reader_holding_a_table_past_the_lock_timeout_makes_the_scrub_wait(pg_migrated_url: str) -> None:
    with psycopg.connect(pg_migrated_url) as reader:
        reader.execute("SELECT count(*) FROM entries").fetchone()  # its transaction holds the table's share lock
        refusal = store.scrub_pg(pg_migrated_url, store.SCRUB_TABLES_PG, 100)
    assert refusal is not None and refusal.startswith("a reader held a table past the lock timeout")
