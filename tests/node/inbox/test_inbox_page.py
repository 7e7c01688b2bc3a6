"""The inbox page query against its plain definition, over arbitrary notification tables, and its plans.

`store.INBOX_SQL` (node/inbox/store.py) picks a poll's page from two index-ordered branches (pending; leases
that lapsed) so that a poll reads `limit` rows whatever the backlog. Its answer must be exactly the plain
query's: every deliverable notification of the agent, tier first, then oldest first. So must `INBOX_SQL_PG`,
PostgreSQL's spelling (through `inbox_page`, on each engine); the plans are SQLite's.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from node.inbox import notify, store
from node.store import db, pg_conn
from node.store.conn import POSTGRESQL, engine_of
from scenarios.pg_cluster import Cluster
from tests.node.fresh_stores import ENGINES

NOW = 1_000_000
AGENTS = ["did:key:a", "did:key:b"]
PLAIN = (
    "SELECT id FROM notifications WHERE agent_id = :agent"
    " AND (status = 'pending' OR (status = 'leased' AND next_attempt_ms <= :now))"
    " AND (:since IS NULL OR created_ms >= :since)"
    " ORDER BY tier, id LIMIT :limit"
)
PLAIN_PG = PLAIN.replace(":since IS NULL", "CAST(:since AS bigint) IS NULL")  # a NULL PostgreSQL can type

notification = st.fixed_dictionaries(
    {
        "agent": st.sampled_from([AGENTS[0]] * 3 + [AGENTS[1]]),
        "tier": st.sampled_from([1, 2, 2]),
        # mostly deliverable ones, so that a backlog beyond the page is common
        "status": st.sampled_from(["pending"] * 3 + ["leased"] * 2 + ["delivered", "failed", "expired"]),
        "created": st.integers(NOW - 50, NOW),
        "next_attempt": st.none() | st.integers(NOW - 10, NOW + 10),
    }
)


@pytest.fixture(scope="module", params=ENGINES)
def conn(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """A node database of each engine with one entry per notification to point at (the page joins entries)."""
    name = ""
    if request.param == "sqlite":
        conn: Any = db.connect(tmp_path_factory.mktemp("inbox") / "node.db")
        db.migrate(conn)
        hash_sql = "printf('%064d', ?)"
    else:
        cluster: Cluster = request.getfixturevalue("pg_cluster")
        name = cluster.create_database(template=request.getfixturevalue("pg_template"))
        conn = pg_conn.connect(cluster.url(name))
        hash_sql = "lpad(CAST(? AS text), 64, '0')"
    conn.execute("BEGIN")
    conn.executemany(
        "INSERT INTO entries (id, record_hash, content_fingerprint, author_id, created_at, created_ms, entry_type,"
        f" performative, content, confidence, signature) VALUES (?, {hash_sql}, 'f', 'did:key:z',"
        " '2026-01-01T00:00:00Z', 0, 'finding', 'inform', 'x', 1, 's')",
        [(i, i) for i in range(1, 61)],
    )
    conn.execute("COMMIT")
    yield conn
    conn.close()
    if name:
        cluster.drop_database(name)


@settings(max_examples=300, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    rows=st.lists(notification, min_size=1, max_size=60),
    agent=st.sampled_from([AGENTS[0]] * 3 + [AGENTS[1]]),
    since=st.none() | st.integers(NOW - 50, NOW),
    limit=st.integers(1, 4) | st.integers(1, 25),  # small pages often: a backlog beyond the page
)
def test_the_page_is_the_plain_querys_answer(
    conn: Any, rows: list[dict[str, object]], agent: str, since: int | None, limit: int
) -> None:
    conn.execute("BEGIN")
    try:
        conn.executemany(
            "INSERT INTO notifications (agent_id, entry_id, tier, reason, created_ms, status, next_attempt_ms,"
            " expires_ms) VALUES (:agent, :entry, :tier, 'subscription', :created, :status, :next_attempt, :exp)",
            [{**row, "entry": i + 1, "exp": NOW + 100} for i, row in enumerate(rows)],
        )
        params = {"agent": agent, "now": NOW, "since": since, "limit": limit}
        expected = [r[0] for r in conn.execute(PLAIN_PG if engine_of(conn) == POSTGRESQL else PLAIN, params)]
        got = [r["notification_id"] for r in store.inbox_page(conn, agent, NOW, since, limit)]
        assert got == expected
    finally:
        conn.execute("ROLLBACK")


def plan(conn: sqlite3.Connection, sql: str) -> list[str]:
    params = {"agent": AGENTS[0], "now": NOW, "since": None, "limit": 20, "attempts": notify.MAX_ATTEMPTS}
    return [row[3] for row in conn.execute("EXPLAIN QUERY PLAN " + sql, params)]


@pytest.mark.sqlite_only(reason="reads SQLite's query plans (EXPLAIN QUERY PLAN, ANALYZE)")
@pytest.mark.parametrize("analyzed", [False, True], ids=["no-stats", "analyzed"])
def test_a_poll_visits_its_page_and_the_expired_only(tmp_path: Path, analyzed: bool) -> None:
    conn = db.connect(tmp_path / "node.db")
    db.migrate(conn)
    if analyzed:
        conn.execute("ANALYZE")
    expire = plan(conn, store.EXPIRE_SQL)
    assert expire == ["SEARCH notifications USING INDEX notifications_expiry (expires_ms<?)"]
    page = plan(conn, store.INBOX_SQL)
    branches = [s for s in page if "notifications USING" in s]
    assert branches == ["SEARCH notifications USING INDEX notifications_agent_status (agent_id=? AND status=?)"] * 2
    assert "SEARCH n USING INTEGER PRIMARY KEY (rowid=?)" in page
    assert not [s for s in page if s.startswith("SCAN") and not s.startswith("SCAN (subquery") and s != "SCAN p"]
    # contradiction link targets are found by the entry's hash, not among every contradicts link
    assert not [s for s in page if "links_type_target" in s], page
    deliverable = plan(conn, store.DELIVERABLE_SQL)
    seeks = [s for s in deliverable if "notifications" in s]
    assert seeks == [
        "SEARCH notifications USING COVERING INDEX notifications_agent_status (agent_id=? AND status=?)",
        "SEARCH notifications USING INDEX notifications_agent_status (agent_id=? AND status=?)",
    ], deliverable
