"""Agent messaging side by side: `mcp-agent-mail` (PyPI) vs our bus, the same messages at the same concurrency.

Theirs: `python -m mcp_agent_mail.http` (its HTTP transport: FastAPI + the MCP Streamable HTTP endpoint,
SQLite through aiosqlite, and a Git mailbox archive it commits every message to), started with a scratch
database and archive, LLM features off. C + 1 agents are registered in one project; then C MCP sessions each call
`send_message` from their agent to the next agent, one call awaiting its result at a time.

Ours: C + 1 agents registered on a fresh node; C keep-alive HTTP clients each `POST /v1/agent-workflows/messages` from
their agent to the next agent (node-signed message records), one request awaiting its answer at a time,
against a real `bbs serve` subprocess. The message bodies are the same texts on both sides.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
from pathlib import Path

from scenarios.bench import corpus
from scenarios.bench.context import Context
from scenarios.bench.harness import Call, LoadResult, Server, bearer, free_port, run_load
from scenarios.bench.peer_install import PeerUnavailable, pip_peer, stop, wait_for_port
from scenarios.bench.report import Row, ms, percentile, rate, ratio

BENCH = "peers"
DRIVERS = Path(__file__).parent / "peer_drivers"


def _bodies(count: int) -> list[str]:
    gen = corpus.TextGen(seed=41)
    return [gen.content(i) for i in range(count)]


def _split(n: int, clients: int) -> list[int]:
    return [n // clients + (1 if i < n % clients else 0) for i in range(clients)]


def ours(ctx: Context, n: int, clients: int, bodies: list[str]) -> LoadResult:
    """Our bus: n messages from `clients` concurrent agents, each to the next agent, through REST."""
    data, _ = corpus.fresh_data_dir(ctx.workdir, "peers-bus")
    agents = corpus.register_agents(data, clients + 1, keep_key=True, prefix="mailer")  # sender i writes to i + 1
    lanes: list[list[Call]] = []
    for i, count in enumerate(_split(n, clients)):
        _, api_key = agents[i]
        recipient = agents[i + 1][0].did
        calls = []
        for j in range(count):
            body = {
                "message_type": "note",
                "body": bodies[(i * 131 + j) % len(bodies)],
                "to_agent": recipient,
                "project": "bench",
            }
            calls.append(Call("POST", "/v1/agent-workflows/messages", bearer(api_key), json.dumps(body).encode()))
        lanes.append(calls)
    with Server(data) as server:
        warm = [[lane[0]] for lane in lanes if lane]
        asyncio.run(run_load(server.url, warm, expect=lambda s: s == 201))
        return asyncio.run(run_load(server.url, lanes, expect=lambda s: s == 201))


def theirs(ctx: Context, n: int, clients: int, bodies: list[str]) -> tuple[dict, str]:
    """mcp-agent-mail: n `send_message` calls from `clients` concurrent MCP sessions; (result, version)."""
    python, version = pip_peer("mcp-agent-mail", "mcp-agent-mail")
    work = ctx.workdir / "mcp-agent-mail"
    work.mkdir(parents=True, exist_ok=True)
    contents = work / "bodies.txt"
    contents.write_text("\n".join(bodies) + "\n", encoding="utf-8")
    port = free_port()
    env = {
        **os.environ,
        "DATABASE_URL": f"sqlite+aiosqlite:///{work / 'mail.sqlite3'}",
        "STORAGE_ROOT": str(work / "archive"),
        "LLM_ENABLED": "false",
        "HTTP_HOST": "127.0.0.1",
        "HTTP_PORT": str(port),
        "LOG_RICH_ENABLED": "false",
        "TOOLS_LOG_ENABLED": "false",
    }
    with open(work / "server.log", "wb") as log:
        server = subprocess.Popen(
            [str(python), "-m", "mcp_agent_mail.http", "--port", str(port), "--log-level", "warning"],
            cwd=work,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    try:
        wait_for_port(port, server, timeout=120)
        proc = subprocess.run(
            [
                str(python),
                str(DRIVERS / "agent_mail_send.py"),
                f"http://127.0.0.1:{port}/mcp/",
                str(n),
                str(clients),
                str(contents),
            ],
            capture_output=True,
            text=True,
            timeout=3600,
            cwd=work,
        )
    finally:
        stop(server)
    if proc.returncode != 0:
        lines = [line.strip(" |") for line in proc.stderr.splitlines() if "Error:" in line] or ["no message"]
        raise PeerUnavailable(f"the mcp-agent-mail client failed: {lines[-1][:300]}")
    result = json.loads(proc.stdout)
    if result["sent"] != n:
        raise PeerUnavailable(f"mcp-agent-mail sent {result['sent']} of {n} messages")
    return result, version


def run(ctx: Context) -> None:
    """Both buses, the same n messages from the same number of concurrent senders."""
    n, clients = ctx.sizes.peer_messages, ctx.sizes.message_clients
    bodies = _bodies(500)
    mail, version = theirs(ctx, n, clients, bodies)
    bus = ours(ctx, n, clients, bodies)
    their_rate = mail["count"] / mail["elapsed"]
    lat = mail["latencies"]
    ctx.report.add(
        Row(
            BENCH,
            f"agent messaging ({n:,} messages, {clients} sender(s) each): messages/s, our bus vs mcp-agent-mail",
            rate(bus.per_second),
            rate(their_rate),
            ratio(bus.per_second, their_rate),
            "",
            None,
            f"mcp-agent-mail {version} (PyPI; `python -m mcp_agent_mail.http`, SQLite + its Git mailbox archive,"
            f" LLM off): {clients} MCP Streamable HTTP session(s) each calling send_message to the next agent, one"
            f" call at a time; ours: {clients} keep-alive HTTP client(s) each POSTing /v1/agent-workflows/messages"
            " (node-signed message records) to the next agent, one at a time, real `bbs serve`; same bodies",
        )
    )
    ctx.report.add(
        Row(
            BENCH,
            "agent messaging latency p50 / p99: ours vs mcp-agent-mail",
            f"{ms(percentile(bus.latencies, 50))} / {ms(percentile(bus.latencies, 99))}",
            f"{ms(percentile(lat, 50))} / {ms(percentile(lat, 99))}",
            ratio(percentile(bus.latencies, 99), percentile(lat, 99)),
            "",
            None,
            "per message from send to answer, measured by each client; ratio of p99",
        )
    )
