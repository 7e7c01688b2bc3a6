"""Working memory in a real SQLite file: dual decay, access tracking, thread clusters, compaction, the queue."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from agent.runtime.memory import DAY_S, WorkingMemory
from tests.agent.runtime.envelopes import env


class Clock:
    def __init__(self) -> None:
        self.now = 1_700_000_000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def memory(tmp_path: Path, clock: Clock) -> Iterator[WorkingMemory]:
    m = WorkingMemory(tmp_path / "memory.sqlite", clock, time_half_life_h=1, access_half_life_h=1, access_weight=1)
    yield m
    m.close()


def test_dual_decay_by_time_and_access(memory: WorkingMemory) -> None:
    t = 0.0
    assert memory.relevance(t, t, 0, now=t) == 1.0
    assert memory.relevance(t, t, 0, now=t + 3600) == pytest.approx(0.5)  # time half-life
    read_often = memory.relevance(t, t + 3600, 5, now=t + 3600)
    assert read_often > memory.relevance(t, t + 3600, 1, now=t + 3600) > 0.5  # access lifts it
    later = memory.relevance(t, t + 3600, 5, now=t + 7200)
    assert later < read_often  # and the lift fades when it is not read again


def test_threads_cluster_and_reading_counts_as_access(memory: WorkingMemory, clock: Clock) -> None:
    root, reply, orphan = "1" * 64, "2" * 64, "3" * 64
    assert memory.note_entry(root, [], "- root claim", ["perf"]) == root
    assert memory.note_entry(reply, [root], "- reply to it", ["db"]) == root  # joins the thread it links to
    assert memory.note_entry(orphan, [], "- alone", []) == orphan  # per-entry fallback
    assert memory.note_entry(reply, [root], "- reply to it", ["db"]) == root  # noted once
    assert memory.thread_count() == 2
    clock.now += 7200
    [first, second] = memory.summaries(limit=5, touching=[reply])
    assert first["thread_id"] == root and first["touching"] and not second["touching"]
    assert first["summary"] == "- root claim\n- reply to it" and first["tags"] == ["db", "perf"]
    row = memory.conn.execute("SELECT access_count, last_access FROM thread_summaries WHERE thread_id = ?", (root,))
    assert tuple(row.fetchone()) == (1, clock.now)


def test_a_redaction_notice_drops_the_summary_holding_the_entry_and_its_queued_notifications(
    memory: WorkingMemory,
) -> None:
    root, reply, other = "1" * 64, "2" * 64, "3" * 64
    memory.note_entry(root, [], "- root claim", [])
    memory.note_entry(reply, [root], "- the wifi password is hunter2", [])
    memory.note_entry(other, [], "- unrelated", [])
    memory.enqueue([env(2, record_hash=reply), env(3, record_hash=other)], {2: 2, 3: 2})
    assert memory.forget_redacted(reply) == 1
    assert [s["thread_id"] for s in memory.summaries(limit=5)] == [other]
    assert "hunter2" not in str(memory.summaries(limit=5))
    assert [e.record_hash for e, _ in memory.pending()] == [other]
    assert memory.forget_redacted(reply) == 0  # nothing left of it


def test_hygiene_forgets_faded_threads(memory: WorkingMemory, clock: Clock) -> None:
    memory.note_entry("1" * 64, [], "- old", [])
    clock.now += 3 * 3600
    memory.note_entry("2" * 64, [], "- fresh", [])
    assert memory.forget(below=0.2) == 1  # 0.125 < 0.2 <= 1.0
    assert [s["thread_id"] for s in memory.summaries()] == ["2" * 64]


def test_compaction_keeps_audit_events(memory: WorkingMemory, clock: Clock) -> None:
    memory.record("scored", score=1.0)
    memory.record("action", op="post")
    memory.record("malformed_output", errors=["$"])
    clock.now += 89 * DAY_S
    memory.record("decision", engaged=False)
    clock.now += 2 * DAY_S
    assert memory.compact(90) == 1  # only the 91-day-old ordinary event
    kinds = [e["kind"] for e in memory.events()]
    assert kinds == ["action", "malformed_output", "decision", "compaction"]
    clock.now += 365 * DAY_S
    assert memory.compact(90) == 1
    assert [e["kind"] for e in memory.events()] == ["action", "malformed_output", "compaction", "compaction"]


def test_queue_stores_each_notification_once(memory: WorkingMemory, clock: Clock) -> None:
    a, b = env(1), env(2, tier=1)
    assert memory.enqueue([a, b], {1: 2, 2: 1}) == [1, 2]
    assert memory.enqueue([a], {1: 2}) == []  # a redelivered lease is not a new notification
    memory.set_scores({1: (2.5, {"directed": 0.0})})
    assert [(e.notification_id, s) for e, s in memory.pending()] == [(2, 0.0), (1, 2.5)]
    memory.mark([2])
    assert [e.notification_id for e, _ in memory.pending()] == [1]
    clock.now += 8 * DAY_S
    assert memory.dismiss_older_than(7 * DAY_S) == 1 and memory.pending() == []


def test_agent_actions_unique_by_key(memory: WorkingMemory) -> None:
    memory.record_action("post", "k1", {"content": "x"}, "failed", {"code": "unreachable"})
    assert memory.action_done("k1") is None
    memory.record_action("post", "k1", {"content": "x"}, "ok", {"id": 4})
    assert memory.action_done("k1") == {"id": 4}
    assert [(a["op"], a["status"]) for a in memory.actions()] == [("post", "ok")]
