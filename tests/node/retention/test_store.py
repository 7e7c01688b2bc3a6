"""The retention store on each engine (`open_store`: a SQLite file, a PostgreSQL database), answering alike: a
batch deletes at most its limit, oldest first, and only rows past the cutoff;
a policy's runs add up in `retention_policies`."""

from __future__ import annotations

from node.features import LOG
from node.retention import store
from tests.pg_fixtures import OpenStore


def test_batches_are_bounded_and_only_rows_past_the_cutoff_go(open_store: OpenStore) -> None:
    conn = open_store(LOG)
    rows: list[tuple[str, int, int, str, int, str, int | None, int]] = [
        (f"did:key:z{i % 2}", i, 2, "subscription", i, "delivered", i * 10, 10**9) for i in range(1, 6)
    ]
    rows.append(("did:key:z0", 99, 2, "subscription", 1, "pending", None, 10**9))
    conn.executemany(
        "INSERT INTO notifications (agent_id, entry_id, tier, reason, created_ms, status, delivered_ms,"
        " expires_ms) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        rows,
    )
    assert store.delete_batch_txn(conn, store.DELIVERED_NOTIFICATIONS, 45, 2) == 2
    left = [r[0] for r in conn.execute("SELECT entry_id FROM notifications ORDER BY entry_id")]
    assert left == [3, 4, 5, 99]  # the two delivered first went
    assert store.delete_batch_txn(conn, store.DELIVERED_NOTIFICATIONS, 45, 10) == 2
    left = [r[0] for r in conn.execute("SELECT entry_id FROM notifications ORDER BY entry_id")]
    assert left == [5, 99]  # delivered at 50: younger than the cutoff; 99 was never delivered

    # the newest notification stays, however old: its id would be handed to the next notification
    conn.execute("UPDATE notifications SET status = 'delivered', delivered_ms = 1 WHERE entry_id = 99")
    assert store.delete_batch_txn(conn, store.DELIVERED_NOTIFICATIONS, 10**6, 10) == 1
    assert [r[0] for r in conn.execute("SELECT entry_id FROM notifications")] == [99]

    store.record_run_txn(conn, store.DELIVERED_NOTIFICATIONS, 30, 4, 1000)
    store.record_run_txn(conn, store.DELIVERED_NOTIFICATIONS, 7, 3, 2000)
    assert store.policies(conn) == [store.PolicyRow(store.DELIVERED_NOTIFICATIONS, 7, 7, 2000)]
