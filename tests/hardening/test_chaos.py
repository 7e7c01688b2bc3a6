"""The CI form of scenarios/chaos.py (a short seeded run of four real `bbs serve` nodes with every adversary),
and the invariant bookkeeping of scenarios/chaos_ledger.py on hand-made observations."""

from __future__ import annotations

from pathlib import Path

import pytest

from scenarios import chaos
from scenarios.chaos_ledger import (
    EXPECTED_TO_HOLD,
    FAILED,
    HELD,
    INVARIANTS,
    SKIPPED,
    Ledger,
    Trace,
    evaluate,
    table,
    tracebacks,
)


@pytest.mark.slow
async def test_a_short_chaos_run_keeps_every_promise(tmp_path: Path) -> None:
    report = await chaos.run(tmp_path, chaos.Options(seed=7, duration=16))
    print(report.text)
    ledger = report.ledger
    assert all(ledger.ran[name] >= 1 for name in chaos.ADVERSARIES), report.text  # every adversary acted
    assert len(ledger.acked) > 50 and ledger.completed > 5 and ledger.lease_samples > 5
    assert set(report.results) == set(INVARIANTS)
    held = {name for name, r in report.results.items() if r.status == HELD}
    assert not EXPECTED_TO_HOLD - held, report.text


def test_two_holders_seen_at_once_or_granted_in_overlap_break_the_lease_invariant(tmp_path: Path) -> None:
    ledger = Ledger()
    ledger.sample_leases({"a": {"t1": "did:1"}, "b": {"t1": "did:1", "t2": "did:2"}}, "1s")
    assert ledger.lease_conflicts == []
    ledger.sample_leases({"a": {"t1": "did:1"}, "c": {"t1": "did:3"}}, "2s")
    assert ledger.lease_conflicts == ["t1 at 2s: held by a:did:1, c:did:3"]

    ledger = Ledger()
    first = ledger.grant("t", "did:1", {"lease_id": "L1"}, 1.0)
    ledger.grant("t", "did:2", {"lease_id": "L2"}, 3.0)
    first.ended = 2.0  # the first holder began completing before the second grant: no overlap
    ledger.grant("u", "did:1", {"lease_id": "L3"}, 1.0)
    ledger.grant("u", "did:2", {"lease_id": "L4"}, 2.0)  # the first never finished: overlap
    ledger.grant("v", "did:1", {"lease_id": "L5"}, 1.0)
    ledger.grant("v", "did:1", {"lease_id": "L6"}, 2.0)  # the holder extending its own lease
    result = evaluate(ledger, {}, [], set())["one_live_lease_per_task"]
    assert result.status == FAILED and "['u']" in result.detail


def test_missing_writes_fail_unless_lost_with_a_restore_nobody_pulled() -> None:
    ledger = Ledger(acked={"h1": ("a", 1.0), "h2": ("b", 2.0), "h3": ("b", 3.0)}, excused={"h3"})
    present = {"a": {"h1", "h2"}, "b": {"h1", "h2"}}
    result = evaluate(ledger, present, [], set())["no_acknowledged_write_missing"]
    assert result.status == HELD and "1 of them lost" in result.detail
    present["b"].discard("h2")
    result = evaluate(ledger, present, [], set())["no_acknowledged_write_missing"]
    assert result.status == FAILED and "h2" in result.detail


def test_5xx_other_than_503_fail_from_metrics_or_client_answers() -> None:
    ledger = Ledger()
    ledger.scrape(
        "a",
        1,
        'bbs_http_requests_total{method="POST",route="/v1/agent-workflows/tasks/{task_id}/lease",status="503"} 2.0\n'
        'bbs_http_requests_total{method="GET",route="/v1/node",status="200"} 9.0\n',
    )
    assert evaluate(ledger, {}, [], set())["no_5xx_but_503"].status == HELD
    ledger.scrape("b", 1, 'bbs_http_requests_total{method="POST",route="/v1/entries",status="500"} 1.0\n')
    assert evaluate(ledger, {}, [], set())["no_5xx_but_503"].status == FAILED
    ledger = Ledger()
    ledger.client_5xx["502  GET /v1/node"] += 1
    assert evaluate(ledger, {}, [], set())["no_5xx_but_503"].status == FAILED


def test_a_traceback_in_a_log_is_found_with_its_exception(tmp_path: Path) -> None:
    log = tmp_path / "a.log"
    log.write_text('INFO fine\nTraceback (most recent call last):\n  File "x.py", line 1\nOverflowError: big\n')
    assert tracebacks(log) == [Trace("OverflowError: big", "")]
    results = evaluate(Ledger(), {}, [log], set())
    assert results["no_traceback"].status == FAILED and "OverflowError" in results["no_traceback"].detail


def test_a_chain_of_tracebacks_counts_once_with_the_record_that_logged_it(tmp_path: Path) -> None:
    log = tmp_path / "a.log"
    log.write_text(
        "2026-12-07 09:24:07,350 ERROR bbs.sync sync with p crashed\n"
        "Traceback (most recent call last):\n"
        '  File "a.py", line 1, in f\n'
        "OSError: server closed the connection unexpectedly\n"
        "\tThis probably means the server terminated abnormally\n"
        "\n"
        "The above exception was the direct cause of the following exception:\n"
        "\n"
        "Traceback (most recent call last):\n"
        '  File "b.py", line 2, in g\n'
        "psycopg.OperationalError: the connection is closed\n"
        "2026-12-07 09:24:08,000 INFO bbs.http fine\n"
        "2026-12-07 09:24:09,000 ERROR bbs.db rollback failed\n"
        "Traceback (most recent call last):\n"
        '  File "c.py", line 3, in h\n'
        "ValueError: x\n"
    )
    assert tracebacks(log) == [
        Trace(
            "psycopg.OperationalError: the connection is closed",
            "2026-12-07 09:24:07,350 ERROR bbs.sync sync with p crashed",
        ),
        Trace("ValueError: x", "2026-12-07 09:24:09,000 ERROR bbs.db rollback failed"),
    ]


def test_equivocated_addresses_need_one_body_everywhere_and_adversaries_left_out_are_skipped() -> None:
    ledger = Ledger(equivocated={"h": "content"})
    body = {"scope": "federation", "tags": ["x"], "equivocated": True}
    ledger.bodies["h"] = {"a": body, "b": dict(body)}
    results = evaluate(ledger, {}, [], {"equivocate"})
    assert results["one_body_per_address"].status == HELD and results["equivocation_flagged"].status == HELD
    ledger.bodies["h"]["b"] = {**body, "tags": ["y"], "equivocated": False}
    results = evaluate(ledger, {}, [], {"equivocate"})
    assert results["one_body_per_address"].status == FAILED and results["equivocation_flagged"].status == FAILED
    results = evaluate(Ledger(), {}, [], set())
    assert results["one_body_per_address"].status == SKIPPED and results["replay_refused"].status == SKIPPED
    assert "FAILED invariants: digests_converge_10s" in table(results)


def test_a_message_line_that_begins_with_the_word_traceback_is_no_traceback(tmp_path: Path) -> None:
    log = tmp_path / "a.log"
    log.write_text(
        "2026-12-07 09:24:07,350 WARNING bbs.node a note on two lines\n"
        "Traceback-free: nothing raised\n"
        "2026-12-07 09:24:08,000 ERROR bbs.db rollback failed\n"
        "Traceback (most recent call last):\n"
        '  File "c.py", line 3, in h\n'
        "ValueError: x\n"
    )
    assert tracebacks(log) == [Trace("ValueError: x", "2026-12-07 09:24:08,000 ERROR bbs.db rollback failed")]


def test_occurrences_at_one_site_share_it_whatever_their_time_and_key_value_pairs() -> None:
    first = Trace("ValueError: x", '2026-12-07 09:24:08,000 ERROR bbs.http failed request_id="r1" status=500')
    again = Trace("ValueError: x", '2026-12-07 10:01:00,123 ERROR bbs.http failed request_id="r 2" status=500')
    other = Trace("ValueError: x", "2026-12-07 10:01:00,123 ERROR bbs.db rollback failed")
    assert first.site == again.site == "ERROR bbs.http failed"
    assert other.site == "ERROR bbs.db rollback failed" and Trace("E: y", "").site == ""
