"""Peer systems side by side, installed by this script into their own virtualenvs, run on loopback.

- signed-event ingest: `nostr-relay` (PyPI) accepting signed nostr events from concurrent websocket
  clients, beside our node accepting author-signed entries (the ingest benchmark's figure, same run);
- agent messaging: `mcp-agent-mail` (PyPI) and replication: `pouchdb-server` (npm) are reported with the
  reason they were not run, never dropped.

Peers live in `$BBS_BENCH_PEERS_DIR` (default `~/.cache/agent-bbs-bench/peers`) so a second run does not
reinstall them. `--quick` installs nothing and says so.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

from scenarios.bench import corpus, ingest
from scenarios.bench.context import Context
from scenarios.bench.harness import free_port
from scenarios.bench.report import Row, ms, percentile, rate, ratio

BENCH = "peers"
DRIVERS = Path(__file__).parent / "peer_drivers"
INSTALL_TIMEOUT_S = 600


class PeerUnavailable(RuntimeError):
    """A peer system could not be installed or run here; the message says why."""


def peers_dir() -> Path:
    return Path(os.environ.get("BBS_BENCH_PEERS_DIR", Path.home() / ".cache" / "agent-bbs-bench" / "peers"))


def pip_peer(name: str, package: str) -> tuple[Path, str]:
    """A virtualenv holding `package` (created and installed on first use); returns (python, version)."""
    venv = peers_dir() / name
    python = venv / "bin" / "python"
    if not python.exists():
        venv.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, capture_output=True)
    version = _pip_version(python, package)
    if version is None:
        try:
            proc = subprocess.run(
                [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check", package],
                capture_output=True,
                text=True,
                timeout=INSTALL_TIMEOUT_S,
            )
        except subprocess.TimeoutExpired:
            raise PeerUnavailable(f"`pip install {package}` did not finish in {INSTALL_TIMEOUT_S}s") from None
        errors = [line for line in proc.stderr.splitlines() if line.strip() and not line.startswith("WARNING")]
        if proc.returncode != 0:
            raise PeerUnavailable(f"`pip install {package}` failed: {(errors or ['no message'])[-1][:200]}")
        version = _pip_version(python, package)
        if version is None:
            raise PeerUnavailable(f"`pip install {package}` succeeded but the package is not importable")
    return python, version


def _pip_version(python: Path, package: str) -> str | None:
    proc = subprocess.run([str(python), "-m", "pip", "show", package], capture_output=True, text=True)
    for line in proc.stdout.splitlines():
        if line.startswith("Version:"):
            return line.split(":", 1)[1].strip()
    return None


def wait_for_port(port: int, proc: subprocess.Popen[bytes], timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise PeerUnavailable(f"the server exited with status {proc.returncode} before listening")
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.1)
    raise PeerUnavailable(f"the server did not listen on port {port} within {timeout:.0f}s")


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
        relay.terminate()
        try:
            relay.wait(timeout=15)
        except subprocess.TimeoutExpired:
            relay.kill()
            relay.wait()
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


def agent_mail(ctx: Context) -> None:
    raise PeerUnavailable(
        "mcp-agent-mail (PyPI) sending 5k messages vs our bus: the side-by-side driver is not written yet"
    )


def pouchdb(ctx: Context) -> None:
    raise PeerUnavailable(
        "two pouchdb-server (npm) instances replicating documents vs two nodes syncing: the side-by-side driver"
        " is not written yet; our own catch-up and reconciliation figures are in the sync table"
    )


def run(ctx: Context) -> None:
    """Each peer comparison, or the reason it was not run."""
    comparisons = (
        ("signed-event ingest", nostr_ingest),
        ("agent messaging", agent_mail),
        ("replication", pouchdb),
    )
    for name, fn in comparisons:
        if ctx.quick:
            reason = "--quick installs no peer systems (network, minutes)"
        else:
            try:
                fn(ctx)
                continue
            except (PeerUnavailable, subprocess.SubprocessError, OSError) as exc:
                reason = str(exc)
        ctx.report.add(Row(BENCH, name, "not run", "not run", method=reason))
