"""Smoke test of scenarios/bench/key_history.py at tiny sizes (never asserts times), and its corpora: the history
author's chain is the one the node decides (every record stored), and the waiting workload waits, then is stored."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

from identity import key_history, vouching
from node.service import Node
from scenarios.bench import corpus
from scenarios.bench import key_history as kh

ROOT = Path(__file__).resolve().parents[2]


def test_the_key_history_benchmark_runs_quick_and_prints_its_rows(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "scenarios.bench", "key-history", "--quick", "--workdir", str(tmp_path / "w")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "BBS_BENCH_KEYHIST_RECORDS": "120"},
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    rows = [line for line in proc.stdout.splitlines() if line.startswith("| key-history |")]
    assert len(rows) == 3, proc.stdout
    assert "catch-up of 120 entries by a 3-step key history in the home node's log order" in rows[0]
    assert "with the key events and pages first" in rows[1]
    assert "records of 4 rotated authors arriving before their key events" in rows[2]
    assert all("load average up to" in row for row in rows)


def test_the_history_corpus_is_a_three_step_chain_with_verifying_pages() -> None:
    items, extra = kh.history_corpus(2100)  # 525 records per key: one page per rotation
    events = [r for r, _ in items if r["kind"] == "key_event"]
    pages = [r for r, _ in items if r["kind"] == "vouch_page"]
    assert len(items) == 2100 + extra and len(events) == kh.STEPS and len(pages) == extra - kh.STEPS
    history = key_history.resolve(events[0]["author_id"], [(kh.records.compute_hash(e), e) for e in events])
    assert len(history.chain) == kh.STEPS and history.state.recovery == events[0]["recovery"]
    for page in pages:
        (event,) = [e for e in events if kh.records.compute_hash(e) == page["event"]]
        vouch = vouching.vouch_for(event, page["subject"])
        assert vouch is not None and vouch.count == 525
        assert vouching.verify_page(vouch, page["page"], page["versions"], page["proof"])
    assert {r["author_id"] for r, _ in items} == {events[0]["author_id"]}


def test_both_orders_of_the_history_are_stored_whole_and_waiting_records_are_stored_after_their_rotation(
    tmp_path: Path,
) -> None:
    items, _ = kh.history_corpus(300)
    for name, order in (("log", items), ("events-first", kh.events_first(items))):
        data, _ = corpus.fresh_data_dir(tmp_path, name)
        _, count = asyncio.run(kh.ingest_all(data, kh.in_batches(kh.verified(order), 50)))
        assert count == len(items), name

    work = kh.waiting_workload(3, 10)
    data, _ = corpus.fresh_data_dir(tmp_path, "waiting")

    async def records_first() -> tuple[list[str], int]:
        node = Node(data)
        node.open()
        try:
            outcomes = await node.sync.ingest("file", work.records, [], None)
            waited = [str(o.outcome) for o in outcomes]
            await node.sync.ingest("file", work.events, [], None)
            return waited, (await node.sync.digest()).count
        finally:
            node.close()

    waited, count = asyncio.run(records_first())
    assert set(waited) == {"waiting"} and len(waited) == 30
    assert count == 33
