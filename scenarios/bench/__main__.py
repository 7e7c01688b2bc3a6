"""`python -m scenarios.bench all|NAME... [--quick]`: run benchmarks and print their tables."""

from __future__ import annotations

import argparse
import os
import platform
import sys
import tempfile
import time
import traceback
from pathlib import Path

from scenarios.bench import registry
from scenarios.bench.context import Context, Sizes
from scenarios.bench.report import Report


def parse(argv: list[str] | None) -> argparse.Namespace:
    names = list(registry())
    parser = argparse.ArgumentParser(prog="python -m scenarios.bench", description=__doc__)
    parser.add_argument("names", nargs="+", metavar="NAME", help=f"'all' or any of: {', '.join(names)}")
    parser.add_argument(
        "--quick", action="store_true", default=os.environ.get("BBS_BENCH_QUICK") == "1", help="tiny sizes (CI smoke)"
    )
    parser.add_argument("--entries", type=int, help="search/read corpus size (default 100,000)")
    parser.add_argument("--rss-entries", type=int, help="build a separate corpus this large for the memory figure")
    parser.add_argument("--posts", type=int, help="posts per ingest path (default 6,000)")
    parser.add_argument("--clients", type=int, help="concurrent REST clients (default 64)")
    parser.add_argument("--agents", type=int, help="agents with subscriptions for the inbox benchmark (default 1,000)")
    parser.add_argument(
        "--peer-docs", type=int, help="documents replicated by pouchdb-server vs our nodes (default 100,000)"
    )
    parser.add_argument(
        "--replication-rounds", type=int, help="alternating replication runs per side; medians compared (default 3)"
    )
    parser.add_argument("--peer-messages", type=int, help="messages per bus, ours vs mcp-agent-mail (default 1,000)")
    parser.add_argument("--message-clients", type=int, help="concurrent senders on each bus (default 1)")
    parser.add_argument("--workdir", type=Path, help="keep scratch data here instead of a temporary folder")
    parser.add_argument("--markdown", type=Path, help="also write the combined table to this file")
    args = parser.parse_args(argv)
    unknown = [n for n in args.names if n != "all" and n not in names]
    if unknown:
        parser.error(f"unknown benchmark(s) {', '.join(unknown)}; choose from all, {', '.join(names)}")
    return args


def sizes_from(args: argparse.Namespace) -> Sizes:
    sizes = Sizes.quick() if args.quick else Sizes()
    for flag, attr in (
        ("entries", "search_entries"),
        ("rss_entries", "rss_entries"),
        ("posts", "ingest_posts"),
        ("clients", "clients"),
        ("agents", "inbox_agents"),
        ("peer_docs", "peer_docs"),
        ("replication_rounds", "replication_rounds"),
        ("peer_messages", "peer_messages"),
        ("message_clients", "message_clients"),
    ):
        value = getattr(args, flag)
        if value is not None:
            setattr(sizes, attr, value)
    return sizes


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    benches = registry()
    chosen = list(benches) if "all" in args.names else list(dict.fromkeys(args.names))
    with tempfile.TemporaryDirectory(prefix="bbs-bench-") as tmp:
        workdir = args.workdir or Path(tmp)
        workdir.mkdir(parents=True, exist_ok=True)
        ctx = Context(sizes=sizes_from(args), workdir=workdir, quick=args.quick)
        print(
            f"# Agent BBS benchmarks ({'quick' if args.quick else 'default'} sizes) on {platform.node()}:"
            f" {os.cpu_count()} cores, Python {platform.python_version()}, SQLite {_sqlite_version()},"
            f" load average {os.getloadavg()[0]:.2f} at start",
            flush=True,
        )
        failed = []
        for name in chosen:
            started, first = time.perf_counter(), len(ctx.report.rows)
            print(f"\n## {name}", flush=True)
            try:
                benches[name](ctx)
            except Exception:
                failed.append(name)
                traceback.print_exc()
                print(f"{name}: FAILED", flush=True)
                continue
            print(Report(rows=ctx.report.rows[first:]).table(), flush=True)  # its rows, whatever their bench
            print(f"({name} took {time.perf_counter() - started:.1f}s)", flush=True)
        for note in ctx.report.notes:
            print(f"\nNote: {note}")
        if args.markdown:
            args.markdown.write_text(ctx.report.table() + "\n", encoding="utf-8")
        if failed:
            print(f"\nFAILED: {', '.join(failed)}", file=sys.stderr)
            return 1
        return 0


def _sqlite_version() -> str:
    import sqlite3

    return sqlite3.sqlite_version


if __name__ == "__main__":
    sys.exit(main())
