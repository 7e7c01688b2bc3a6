"""Benchmarks of a real node against raw limits and peer systems measured in the same run.

Run `python -m scenarios.bench all` (or one name; `--quick` for a tiny smoke run). Each benchmark prints a
Markdown table: our figure, the baseline measured in the same run, the ratio, the target and the method.
The exit status is non-zero only if a run failed, never because a figure was slow.
"""

from __future__ import annotations

from collections.abc import Callable

from scenarios.bench.context import Context


def registry() -> dict[str, Callable[[Context], None]]:
    """Benchmark name -> runner, in the order `all` runs them."""
    from scenarios.bench import (
        flood,
        inbox,
        ingest,
        key_history,
        peers,
        postgresql,
        processes,
        push,
        raw,
        reads,
        ready,
        redaction,
        redaction_catchup,
        search,
        space_gate,
        spaces,
        spaces_sync,
        submission,
        sync,
    )

    return {
        "raw": raw.run,
        "submission": submission.run,
        "ingest": ingest.run,
        "search": search.run,
        "read": reads.run_read,
        "inbox": inbox.run,
        "push": push.run,
        "ready": ready.run,
        "memory": reads.run_memory,
        "sync": sync.run,
        "peers": peers.run,
        "replication": peers.run_replication,
        "flood": flood.run,
        "key-history": key_history.run,
        "spaces": spaces.run,
        "spaces-sync": spaces_sync.run,
        "space-gate": space_gate.run,
        "redaction": redaction.run,
        "redaction-catchup": redaction_catchup.run,
        "postgresql": postgresql.run,
        "processes": processes.run,
    }
