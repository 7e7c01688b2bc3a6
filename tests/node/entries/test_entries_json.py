"""store.entries_by_ids fetches entries as one JSON row: it must render exactly what the plain rows render."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from identity import keys, records
from node.entries import queries, store
from node.features import LOG
from node.spaces.sight import OPERATOR
from node.store import db, pg_conn, projections
from node.store.conn import Conn
from node.trust import service as trust
from scenarios.pg_cluster import Cluster
from tests.node.fresh_stores import ENGINES
from wire.api import PostEntry, unsigned_entry
from wire.time import format_ms

KEY = keys.SigningKey.generate()
text = st.text(st.characters(blacklist_categories=["Cs"]), min_size=1, max_size=40)  # NUL and emoji included
scalar = st.floats(-1e6, 1e6, allow_nan=False) | st.integers(-(2**31), 2**31) | text | st.booleans() | st.none()


@pytest.fixture(scope="module", params=ENGINES)
def conn(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Conn]:
    """A migrated database of each engine for the module's examples (each rolls its writes back)."""
    if request.param == "sqlite":
        conn: Any = db.connect(tmp_path_factory.mktemp("json") / "node.db", log=LOG)
        db.migrate(conn)
        yield conn
        conn.close()
        return
    cluster: Cluster = request.getfixturevalue("pg_cluster")
    name = cluster.create_database(template=request.getfixturevalue("pg_template"))
    conn = pg_conn.connect(cluster.url(name), log=LOG)
    yield conn
    conn.close()
    cluster.drop_database(name)


def plain(conn: Conn, entry_id: int) -> list[queries.EntryOut]:
    columns = queries.entry_columns(conn)
    rows = conn.execute(f"SELECT {columns} FROM entries e WHERE e.id = ?", (entry_id,)).fetchall()
    return [queries.entry_out(row) for row in rows]


@settings(max_examples=120, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    content=text.filter(str.strip),
    confidence=st.floats(0, 1),
    tags=st.lists(text, max_size=4),
    metadata=st.dictionaries(text, scalar, max_size=3),
    trust_score=st.none() | st.floats(0, 1),
    community=st.none() | st.floats(0, 1),
    n=st.integers(0, 2**40),
)
def test_one_json_row_renders_what_the_rows_render(
    conn: Conn,
    content: str,
    confidence: float,
    tags: list[str],
    metadata: dict[str, object],
    trust_score: float | None,
    community: float | None,
    n: int,
) -> None:
    fields = {"content": content, "confidence": confidence, "tags": tags, "metadata": metadata}
    body = PostEntry(entry_type="finding", performative="inform", **fields)  # type: ignore[arg-type]
    created_at = format_ms(1_700_000_000_000 + n)
    record = records.sign(unsigned_entry(body, KEY.did, created_at, []), KEY)
    record_hash, decoded = records.check(record)
    conn.execute("BEGIN")
    try:
        incoming = [projections.Incoming(record, record_hash, decoded)]
        appended = projections.append_many(conn, incoming, origin="local", now_ms=0)  # NUL too: record 84
        ((seq, _),) = appended
        if trust_score is not None:  # the trust caches hold values rounded to trust.DIGITS, as trust.py stores them
            conn.execute(
                "INSERT INTO trust_scores VALUES (?, 0, 0, 0.5, ?, 0, 0)", (KEY.did, round(trust_score, trust.DIGITS))
            )
        if community is not None:
            conn.execute(
                "INSERT INTO entry_confidence VALUES (?, ?, 0, 0)", (record_hash, round(community, trust.DIGITS))
            )
        got = store.entries_by_ids(conn, [seq], sight=OPERATOR)
        assert got == plain(conn, seq)
        assert got[0].content == decoded.content and got[0].tags == decoded.tags
    finally:
        conn.execute("ROLLBACK")


def test_missing_ids_are_left_out(conn: Conn) -> None:
    assert store.entries_by_ids(conn, [], sight=OPERATOR) == []
    assert store.entries_by_ids(conn, [123456789], sight=OPERATOR) == []
