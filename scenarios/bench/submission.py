"""The cost of the submission rules (node/store/submission.py) on the post path, against what the path did before
them, measured in the same run: decoding a post's JSON body (msgspec alone vs `decode_json` with the duplicate-
key and NUL checks), and checking a record (`identity.records.check` vs that plus `submission.check_record`)."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

import msgspec

from identity import records
from node.store import submission
from node.web.http import decode_json
from scenarios.bench.context import Context
from scenarios.bench.raw import sample_records
from scenarios.bench.report import Row, ratio

BENCH = "submission"


def per_item_us(items: list[Any], fn: Callable[[Any], object], rounds: int = 3) -> float:
    """The best of `rounds` passes of `fn` over `items`, in microseconds per item."""
    best = float("inf")
    for _ in range(rounds):
        started = time.perf_counter()
        for item in items:
            fn(item)
        best = min(best, time.perf_counter() - started)
    return best / len(items) * 1e6


def post_bodies(recs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The node-signed POST /v1/entries bodies of the sample records."""
    fields = ("entry_type", "performative", "content", "confidence", "tags", "metadata", "truth_state")
    return [{name: rec[name] for name in fields} for rec in recs]


def run(ctx: Context) -> None:
    """Measure and report the submission rules' share of decoding and checking."""
    recs = [record for record, _ in sample_records(ctx)]
    bodies = post_bodies(recs)
    add = ctx.report.add
    for label, encode in (
        ("compact (as the SDK sends)", msgspec.json.encode),
        ("spaced (json.dumps)", lambda b: json.dumps(b).encode()),
    ):
        raws = [encode(b) for b in bodies]
        plain = per_item_us(raws, msgspec.json.decode)
        checked = per_item_us(raws, decode_json)
        add(
            Row(
                BENCH,
                f"decode a post body, {label}: with the rules vs msgspec alone",
                f"{checked:.1f} µs",
                f"{plain:.1f} µs",
                ratio(checked, plain),
                "",
                None,
                f"node.web.http.decode_json (depth, duplicate keys, NUL) vs msgspec.json.decode over {len(raws)}"
                " bodies",
            )
        )
    shared = per_item_us(recs, records.check)

    def both_checks(record: Any) -> None:
        records.check(record)
        submission.check_record(record)

    both = per_item_us(recs, both_checks)
    add(
        Row(
            BENCH,
            "check a signed record: with the submission rules vs the shared check alone",
            f"{both:.1f} µs",
            f"{shared:.1f} µs",
            ratio(both, shared),
            "",
            None,
            f"identity.records.check + node.store.submission.check_record vs records.check over {len(recs)} entry"
            " records",
        )
    )
