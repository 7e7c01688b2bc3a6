"""Seqs and notification ids are never reused (migration 0049): a number once handed out (an entry id, a changes
feed cursor, a notification id a runtime keeps) never names another row, even when the newest rows are deleted by
a purge or a redaction. A real node on a real data folder."""

from __future__ import annotations

import sqlite3
from collections.abc import Awaitable, Callable
from pathlib import Path

from node.service import Node
from node.store import db
from tests.conftest import AgentCreds
from wire.api import InboxQuery, PostEntry, SubscriptionIn

MakeAgent = Callable[[str], Awaitable[AgentCreds]]


def _entry(content: str, tags: list[str] | None = None) -> PostEntry:
    return PostEntry(entry_type="finding", performative="inform", content=content, tags=tags or [])


async def test_a_purge_of_the_newest_record_leaves_its_seq_unused(node: Node, make_agent: MakeAgent) -> None:
    alice = await make_agent("alice")
    await node.entries.post(alice.agent_id, _entry("kept"), None)
    newest, _ = await node.entries.post(alice.agent_id, _entry("illegal content"), None)
    await node.redactions.purge(newest.record_hash, None, "abuse")
    top = await node.db.read(lambda c: int(c.execute("SELECT max(seq) FROM records").fetchone()[0]))
    assert top < newest.id  # the purged record was the newest: nothing was appended after it
    after, _ = await node.entries.post(alice.agent_id, _entry("posted after the purge"), None)
    assert after.id > newest.id  # a peer whose cursor passed the purged seq still gets this one from the feed


async def test_a_redaction_of_the_newest_notifications_leaves_their_ids_unused(
    node: Node, make_agent: MakeAgent
) -> None:
    alice, bob = await make_agent("alice"), await make_agent("bob")
    await node.inbox.subscribe(bob.agent_id, SubscriptionIn(tags=["news"]))

    async def newest_notification() -> int:
        sql = "SELECT coalesce(max(id), 0) FROM notifications"
        return await node.db.read(lambda c: int(c.execute(sql).fetchone()[0]))

    secret, _ = await node.entries.post(alice.agent_id, _entry("a secret", ["news"]), None)
    handed_out = await newest_notification()
    assert handed_out > 0
    await node.redactions.redact(alice.agent_id, secret.record_hash, None)  # bob's pending notification goes
    assert await newest_notification() < handed_out
    await node.entries.post(alice.agent_id, _entry("later news", ["news"]), None)
    assert await newest_notification() > handed_out


def test_the_migration_keeps_every_row_and_starts_each_sequence_at_the_highest_held(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    conn = sqlite3.connect(path, isolation_level=None)
    conn.create_function("bbs_sha256_hex", 1, lambda body: "", deterministic=True)
    for number, _name, sql in db.migrations():
        if number >= 49:
            break
        conn.execute("BEGIN IMMEDIATE")
        for statement in db._split_sql(sql):
            conn.execute(statement)
        conn.execute(f"PRAGMA user_version = {number}")
        conn.execute("COMMIT")
    row = ("h", "federation", "a", "2026-12-05T00:00:00.000Z", 0, "local", 0, b"{}")
    for seq in (1, 2, 7):
        conn.execute(
            "INSERT INTO records (seq, hash, version, kind, author_id, created_at, created_ms, scope, origin,"
            " received_ms, body) VALUES (?, ?, ?, 'entry', ?, ?, ?, 'federation', ?, ?, ?)",
            (seq, f"{row[0]}{seq}", f"v{seq}", *row[2:5], row[5], row[6], row[7]),
        )
    conn.execute(
        "INSERT INTO notifications (id, agent_id, entry_id, tier, reason, created_ms, expires_ms)"
        " VALUES (5, 'did:key:z', 7, 1, 'subscription', 0, 1)"
    )
    assert db.migrate(conn) >= 49
    assert [r[0] for r in conn.execute("SELECT seq FROM records ORDER BY seq")] == [1, 2, 7]
    assert conn.execute("SELECT id, entry_id FROM notifications").fetchall() == [(5, 7)]
    conn.execute("DELETE FROM records WHERE seq = 7")
    conn.execute(
        "INSERT INTO records (hash, version, kind, author_id, created_at, created_ms, scope, origin, received_ms,"
        " body) VALUES ('h8', 'v8', 'entry', 'a', '2026-12-05T00:00:00.000Z', 0, 'federation', 'local', 0, x'7b7d')"
    )
    assert conn.execute("SELECT max(seq) FROM records").fetchone()[0] == 8
    conn.execute("DELETE FROM notifications")
    conn.execute(
        "INSERT INTO notifications (agent_id, entry_id, tier, reason, created_ms, expires_ms)"
        " VALUES ('did:key:z', 8, 1, 'subscription', 0, 1)"
    )
    assert conn.execute("SELECT id FROM notifications").fetchone()[0] == 6
    conn.close()


async def test_a_redaction_notice_takes_an_id_never_handed_out(node: Node, make_agent: MakeAgent) -> None:
    """A notice replacing a seen notification takes a new id, above one a pending notification held before an
    earlier redaction deleted it (the highest id held is then below the highest handed out)."""
    alice, bob = await make_agent("alice"), await make_agent("bob")
    await node.inbox.subscribe(bob.agent_id, SubscriptionIn(tags=["news"]))
    seen, _ = await node.entries.post(alice.agent_id, _entry("seen news", ["news"]), None)
    (delivered,) = (await node.inbox.poll(bob.agent_id, InboxQuery(mark_delivered=True))).notifications
    pending, _ = await node.entries.post(alice.agent_id, _entry("pending news", ["news"]), None)
    handed_out = await node.db.read(lambda c: int(c.execute("SELECT max(id) FROM notifications").fetchone()[0]))
    assert handed_out > delivered.notification_id
    await node.redactions.redact(alice.agent_id, pending.record_hash, None)  # pending: deleted, no notice
    await node.redactions.redact(alice.agent_id, seen.record_hash, None)  # seen: a notice replaces it
    (notice,) = (await node.inbox.poll(bob.agent_id, InboxQuery())).notifications
    assert notice.reason == "redacted" and notice.notification_id > handed_out
