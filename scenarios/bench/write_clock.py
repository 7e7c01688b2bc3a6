"""What the node-wide write clock costs a PostgreSQL write transaction (docs/decisions.md record 90; issue 41).

Every write transaction on PostgreSQL begins with `BEGIN; SELECT pg_advisory_xact_lock(..)` and, since record 90,
moves the one-row `write_clock` in the same round trip (node/store/db.py PG_BEGIN_WRITE). This measures, on one
connection of the node's own `PgConn`, write transactions of one small statement (an upsert into `node_meta`) begun:

- `lock`: as before record 90 (BEGIN and the advisory lock);
- `clock`: as now (BEGIN, the lock and the write clock's UPDATE ... RETURNING, read back);
- `clock+check`: as now, when another process committed before: the authority cache's signature read as well
  (`authority_signature`, what `Authority.revalidate_txn` asks when nothing it holds changed).

The kinds take turns transaction by transaction; the median of each kind's transactions is printed. The cluster is
throwaway, fsync on (scenarios/bench/postgresql.py BENCH_SETTINGS), or off with `--no-fsync` (the tests' settings:
what is left is the round trips and the server's work).

Run: `python -m scenarios.bench.write_clock [--no-fsync] [transactions]`.
"""

from __future__ import annotations

import contextlib
import statistics
import sys
import time
from collections.abc import Callable

from node.store import authority, db, pg_conn, pg_schema
from scenarios import pg_cluster
from scenarios.bench.postgresql import BENCH_SETTINGS

OLD_BEGIN = f"BEGIN; SELECT pg_advisory_xact_lock({db.WRITER_LOCK})"
UPSERT = (
    "INSERT INTO node_meta (key, value) VALUES ('write_clock_bench', ?)"
    " ON CONFLICT (key) DO UPDATE SET value = excluded.value"
)


def one_lock(conn: pg_conn.PgConn, i: int) -> None:
    conn.execute(OLD_BEGIN)
    conn.execute(UPSERT, (str(i),))
    conn.execute("COMMIT")


def one_clock(conn: pg_conn.PgConn, i: int) -> None:
    conn.execute(db.PG_BEGIN_WRITE).last_result()
    conn.execute(UPSERT, (str(i),))
    conn.execute("COMMIT")


def one_clock_check(conn: pg_conn.PgConn, i: int) -> None:
    conn.execute(db.PG_BEGIN_WRITE).last_result()
    authority.authority_signature(conn)
    conn.execute(UPSERT, (str(i),))
    conn.execute("COMMIT")


def measure(transactions: int, settings: str = BENCH_SETTINGS) -> dict[str, float]:
    """Median µs per write transaction of each kind, on a cluster started with `settings`."""
    bindir = pg_cluster.find_bindir()
    if bindir is None:
        raise SystemExit("PostgreSQL is not installed: nothing measured")
    cluster = pg_cluster.start(bindir, settings)
    try:
        name = cluster.create_database()
        with contextlib.closing(pg_conn.connect(cluster.url(name))) as conn:
            pg_schema.migrate(conn)
            kinds: dict[str, Callable[[pg_conn.PgConn, int], None]] = {
                "lock": one_lock,
                "clock": one_clock,
                "clock+check": one_clock_check,
            }
            times: dict[str, list[float]] = {kind: [] for kind in kinds}
            for run in kinds.values():  # warm up
                for i in range(50):
                    run(conn, i)
            # the kinds take turns transaction by transaction, each timed alone: a burst of load on a shared
            # machine falls on all of them alike, and the median leaves it out
            for i in range(transactions):
                for kind, run in kinds.items():
                    started = time.perf_counter()
                    run(conn, i)
                    times[kind].append((time.perf_counter() - started) * 1e6)
        return {kind: statistics.median(values) for kind, values in times.items()}
    finally:
        cluster.stop()


def main() -> None:
    args = sys.argv[1:]
    settings = pg_cluster.TEST_SETTINGS if "--no-fsync" in args else BENCH_SETTINGS
    numbers = [int(a) for a in args if a.isdigit()]
    result = measure(numbers[0] if numbers else 2000, settings)
    base = result["lock"]
    for kind, us in result.items():
        print(f"{kind:12} {us:8.1f} µs per write transaction ({us - base:+.1f} µs, {us / base:.3f}x)")


if __name__ == "__main__":
    main()
