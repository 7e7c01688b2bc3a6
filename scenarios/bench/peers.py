"""Peer systems side by side, installed by this script from the package registries, run on loopback.

- signed-event ingest: `nostr-relay` (PyPI) accepting signed nostr events from concurrent websocket
  clients, beside our node accepting author-signed entries (the ingest benchmark's figure, same run);
- agent messaging: `mcp-agent-mail` (PyPI) sending messages over MCP beside our bus (`peer_messaging`);
- replication: two `pouchdb-server` (npm) instances beside two nodes syncing (`peer_replication`).

A peer that cannot be installed or run here gets a row saying why (the error), never a dropped row.
Peers live in `$BBS_BENCH_PEERS_DIR` (`peer_install`) so a second run does not reinstall them. `--quick`
installs nothing and says so.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from pathlib import Path

from scenarios.bench import corpus, ingest, peer_messaging, peer_replication
from scenarios.bench.context import Context
from scenarios.bench.harness import free_port
from scenarios.bench.peer_install import PeerUnavailable, pip_peer, stop, wait_for_port
from scenarios.bench.report import Row, ms, percentile, rate, ratio

BENCH = "peers"
DRIVERS = Path(__file__).parent / "peer_drivers"


def nostr_ingest(ctx: Context) -> None:
    """nostr-relay accepting N signed events from the same number of concurrent clients as our ingest."""
    if "ingest_author_signed" not in ctx.cache:
        ingest.run(ctx)
    ours = ctx.cache["ingest_author_signed"]
    n, clients = ctx.sizes.ingest_posts, ctx.sizes.clients
    python, version = pip_peer("nostr-relay", "nostr-relay")
    work = ctx.workdir / "nostr-relay"
    work.mkdir(parents=True, exist_ok=True)
    port = free_port()
    config = work / "config.yaml"
    subprocess.run(
        [str(python), str(DRIVERS / "nostr_config.py"), str(config), str(work / "relay.sqlite3"), str(port)],
        check=True,
        capture_output=True,
    )
    gen = corpus.TextGen(seed=31)
    contents = work / "contents.txt"
    contents.write_text("\n".join(gen.content(i) for i in range(1000)) + "\n", encoding="utf-8")
    relay_bin = python.parent / "nostr-relay"
    with open(work / "relay.log", "wb") as log:
        relay = subprocess.Popen([str(relay_bin), "-c", str(config), "serve"], stdout=log, stderr=subprocess.STDOUT)
    try:
        wait_for_port(port, relay)
        proc = subprocess.run(
            [
                str(python),
                str(DRIVERS / "nostr_ingest.py"),
                f"ws://127.0.0.1:{port}",
                str(n),
                str(clients),
                str(contents),
            ],
            capture_output=True,
            text=True,
            timeout=1800,
        )
    finally:
        stop(relay)
    if proc.returncode != 0:
        raise PeerUnavailable(f"the nostr client failed: {proc.stderr.strip().splitlines()[-1][:200]}")
    result = json.loads(proc.stdout)
    if result["accepted"] != n:
        raise PeerUnavailable(f"nostr-relay accepted {result['accepted']} of {n} events")
    theirs = result["count"] / result["elapsed"]
    lat = result["latencies"]
    ctx.report.add(
        Row(
            BENCH,
            "signed-event ingest: our author-signed entries/s vs nostr-relay events/s",
            rate(ours["rate"]),
            rate(theirs),
            ratio(ours["rate"], theirs),
            "",
            None,
            f"nostr-relay {version} (PyPI; gunicorn+uvicorn, 1 worker, SQLite via aiosqlite, its default validators"
            f" incl. the Schnorr signature check) took {n} events signed beforehand with aionostr from {clients}"
            " concurrent websocket clients, one EVENT awaiting its OK at a time; ours: the ingest benchmark's"
            f" author-signed run ({ours['count']} posts, {clients} clients) in this run",
        )
    )
    ctx.report.add(
        Row(
            BENCH,
            "signed-event ingest latency p50 / p99: ours vs nostr-relay",
            f"{ms(ours['p50'])} / {ms(ours['p99'])}",
            f"{ms(percentile(lat, 50))} / {ms(percentile(lat, 99))}",
            ratio(ours["p99"], percentile(lat, 99)),
            "",
            None,
            "per message from send to reply, measured by each client; ratio of p99",
        )
    )


def run(ctx: Context) -> None:
    """Each peer comparison, or the reason it was not run."""
    _compare(
        ctx,
        (
            ("signed-event ingest", nostr_ingest),
            ("agent messaging", peer_messaging.run),
            ("replication", peer_replication.run),
        ),
    )


def run_replication(ctx: Context) -> None:
    """The replication comparison alone (`python -m scenarios.bench replication`)."""
    _compare(ctx, (("replication", peer_replication.run),))


def _compare(ctx: Context, comparisons: tuple[tuple[str, Callable[[Context], None]], ...]) -> None:
    for name, fn in comparisons:
        if ctx.quick:
            skipped = "skipped in --quick"
            ctx.report.add(Row(BENCH, name, skipped, skipped, method=f"{skipped}: it installs no peer systems"))
            continue
        try:
            fn(ctx)
        except (PeerUnavailable, subprocess.SubprocessError, OSError) as exc:
            ctx.report.add(Row(BENCH, name, "not run", "not run", method=str(exc)))
