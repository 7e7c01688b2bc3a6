"""The node-wide write clock (node/store/write_clock.py, record 90): a writer sees another process's commit, and only
then runs its revalidation listeners, inside its own write transaction; two real `Database`s on one PostgreSQL."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from node.store.conn import Conn
from node.store.db import Database
from scenarios import pg_cluster as cluster_mod

pytestmark = pytest.mark.postgresql


@pytest.fixture
def two_writers(pg_cluster: cluster_mod.Cluster, pg_template: str) -> Iterator[tuple[Database, Database]]:
    name = pg_cluster.create_database(template=pg_template)
    first, second = Database(pg_cluster.store_url(name)), Database(pg_cluster.store_url(name))
    first.open()
    second.open()
    yield first, second
    first.close()
    second.close()
    pg_cluster.drop_database(name)


def noted(db: Database) -> list[int]:
    """The write clock each revalidation of `db` saw from inside its transaction."""
    seen: list[int] = []

    def listener(conn: Conn) -> None:
        seen.append(int(conn.execute("SELECT n FROM write_clock WHERE id = 1").fetchone()[0]))

    db.clock.on_foreign_write.append(listener)
    return seen


async def test_another_processs_commit_and_only_that_revalidates(two_writers: tuple[Database, Database]) -> None:
    a, b = two_writers
    seen_a, seen_b = noted(a), noted(b)

    def nothing(conn: Conn) -> int:
        return 1

    await a.write(nothing)  # a's first write: it has never looked, so it revalidates
    await a.write(nothing)
    await a.write(nothing)
    assert (len(seen_a), a.clock.foreign_writes) == (1, 1)  # its own commits move the clock by one each
    await b.write(nothing)
    assert len(seen_b) == 1
    await a.write(nothing)  # b committed in between
    assert len(seen_a) == 2
    assert seen_a[-1] == a.clock.value  # the listener ran inside the transaction that moved the clock
    await a.write(nothing)
    assert len(seen_a) == 2


async def test_a_rolled_back_transaction_leaves_the_clock_as_the_caches_reflect(
    two_writers: tuple[Database, Database],
) -> None:
    a, _ = two_writers
    seen = noted(a)

    def nothing(conn: Conn) -> int:
        return 1

    def failing(conn: Conn) -> int:
        raise ValueError("refused")

    await a.write(nothing)
    with pytest.raises(ValueError):
        await a.write(failing)
    await a.write(nothing)  # the rollback undid the clock's move with everything else: no other process wrote
    assert len(seen) == 1
