"""What every benchmark shares in one run: sizes, a scratch folder, the report, and results reused across them."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from scenarios.bench.report import Report


@dataclass
class Sizes:
    """Workload sizes. `quick()` shrinks everything so CI can prove the scripts still run."""

    raw_records: int = 20_000  # records for the raw limits (verify, canonical+hash, sqlite batches)
    ingest_posts: int = 6_000  # posts per ingest path
    clients: int = 64  # concurrent REST clients
    search_entries: int = 100_000  # corpus size for search, read and memory
    queries: int = 200  # timed queries per search/read figure
    inbox_agents: int = 1_000
    inbox_entries: int = 100  # entries posted to fill the inboxes
    inbox_backlog: int = 5_000  # notifications pending for one agent that polls (a poll's cost must not grow)
    rss_entries: int = 0  # 0: measure RSS on the search corpus; otherwise build a corpus this large
    peer_docs: int = 100_000  # peers: records/documents replicated
    replication_rounds: int = 3  # peers: alternating runs of each side; the row compares their medians
    peer_messages: int = 1_000  # peers: messages sent through each bus (mcp-agent-mail manages about 5/s here)
    # peers: concurrent senders on each bus. 1, because mcp-agent-mail 0.1.0 fails sends under concurrency
    # (4 senders: "Lock at '.../archive/.git/index.lock' could not be obtained"; 16: "Archive lock busy")
    message_clients: int = 1

    @classmethod
    def quick(cls) -> Sizes:
        return cls(
            raw_records=200,
            ingest_posts=64,
            clients=8,
            search_entries=400,
            queries=10,
            inbox_agents=20,
            inbox_entries=5,
            inbox_backlog=60,
            rss_entries=0,
            peer_docs=50,
            replication_rounds=1,
            peer_messages=20,
            message_clients=1,
        )


@dataclass
class Context:
    """One benchmark run."""

    sizes: Sizes
    workdir: Path
    report: Report = field(default_factory=Report)
    quick: bool = False
    cache: dict[str, Any] = field(default_factory=dict)
