"""Peer systems side by side (issue 8 item 6) and federation sync: run only once the `sync` package exists."""

from __future__ import annotations

import importlib.util

from scenarios.bench.context import Context
from scenarios.bench.report import Row

PEERS = (
    ("replication", "pouchdb-server (npm), two instances replicating documents of entry size"),
    ("signed-event ingest", "nostr-relay (PyPI) accepting signed events"),
    ("agent messaging", "mcp-agent-mail (PyPI) sending messages"),
)


def sync_ready() -> str | None:
    """None if nodes can sync with each other here; otherwise why not."""
    if importlib.util.find_spec("sync") is None:
        return "this tree has no `sync` package yet (federation is another issue)"
    from node import app

    if not any("sync" in getattr(r.handler, "__module__", "") for r in app.all_routes()):
        return "the `sync` package exists but the node does not mount its routes yet"
    return None


def run(ctx: Context) -> None:
    """Report each peer comparison; without working federation there is nothing to set beside them yet."""
    reason = sync_ready()
    if reason is not None:
        for name, peer in PEERS:
            ctx.report.add(
                Row(
                    "peers",
                    name,
                    "not run",
                    "not run",
                    None,
                    "",
                    None,
                    f"{peer}: skipped because {reason}",
                )
            )
        return
    for name, peer in PEERS:
        ctx.report.add(
            Row("peers", name, "not run", "not run", method=f"{peer}: the side-by-side run is not written yet")
        )
