"""Drill: docker/compose.postgresql.yaml started for real, one node on PostgreSQL served by two processes behind Caddy.

Run by scenarios/containers.sh after it built the node's image and stand-ins for the `postgres:15` and `caddy:2`
images (scenarios/standins/: no registry can be pulled from on these machines). Brings the services up in the
compose file's order (podman before 4.6 ignores `condition: service_healthy`, so the drill waits for each
itself), then checks what docs/operations.md promises of the topology: node-1 makes the node and prints its admin
token once, node-2 joins it as a second process of the same node, a post through the proxy is read on both
processes, both processes are registered, the proxy keeps answering while node-1 is stopped, node-1 comes back
holding what was written meanwhile, `bbs backup` runs in a process's container, and the node answers again after
PostgreSQL restarts. Everything is removed at the end (`down -v`). About 25 to 40 s once the images are built.

    BBS_COMPOSE=".venv/bin/podman-compose" BBS_PG_PASSWORD=... python -m scenarios.compose_pg

BBS_COMPOSE is the compose command (podman-compose: the drill runs `podman exec`, `kill` and `logs` on the containers
it names `{project}_{service}_1`), BBS_COMPOSE_PROJECT the project's name (default bbspg). The stand-in images are
named by scenarios/standins/compose.standins.yaml.
"""

from __future__ import annotations

import asyncio
import json
import os
import shlex
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import aiohttp

from agent.client import BBSClientError, Client
from scenarios import checks

ROOT = Path(__file__).resolve().parent.parent
FILES = [
    "-f",
    str(ROOT / "docker/compose.postgresql.yaml"),
    "-f",
    str(ROOT / "scenarios/standins/compose.standins.yaml"),
]
PROXY, NODE_1, NODE_2 = "http://127.0.0.1:8420", "http://127.0.0.1:8421", "http://127.0.0.1:8422"
UP_TIMEOUT_S = 120.0
LANES, PER_LANE = 4, 15  # posts spread over about 2 s, node-1 killed half a second in


@dataclass
class World(checks.Drill):
    """The drill's checks; the compose command (with its project and files) it runs."""

    NAMES: ClassVar[Mapping[str, str]] = {
        "node made once": "node-1 made the node on PostgreSQL and printed its admin token once",
        "second process joined": "node-2 joined node-1's node: the same node id and key on both ports",
        "one store": "a post through the proxy is read back through each process's own port",
        "both registered": "`bbs processes` lists two processes of the node, both vouched",
        "proxy fails over": "node-1 killed (SIGKILL) amid posts through the proxy: every post acknowledged, each once",
        "back with the rest": "node-1, started again, reads every post acknowledged while it was down",
        "backup": "`bbs backup` in a process's container writes the node's database (pg_dump) into the backup",
        "database restart": "after PostgreSQL restarts, posts through the proxy are acknowledged again within 30 s",
    }

    compose: list[str]
    project: str

    def container(self, service: str) -> str:
        """The container podman-compose names for `service`."""
        return f"{self.project}_{service}_1"


async def sh(*argv: str, check: bool = True, timeout: float = 300.0) -> str:
    """Run `argv`; its stdout (stderr folded in). Raise when it fails and `check` is set."""
    proc = await asyncio.create_subprocess_exec(*argv, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
    out, _ = await asyncio.wait_for(proc.communicate(), timeout)
    text = out.decode(errors="replace")
    if check and proc.returncode != 0:
        raise RuntimeError(f"{shlex.join(argv)} exited {proc.returncode}: {text[-2000:]}")
    return text


async def wait_for(what: str, probe: Any, timeout: float = UP_TIMEOUT_S) -> None:
    """Call the coroutine function `probe` until it returns true; raise after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while not await probe():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what}: not within {timeout:.0f} s")
        await asyncio.sleep(0.5)


def healthy(http: aiohttp.ClientSession, base: str) -> Any:
    async def probe() -> bool:
        try:
            async with http.get(base + "/healthz", timeout=aiohttp.ClientTimeout(total=3)) as resp:
                return resp.status == 200
        except (TimeoutError, aiohttp.ClientError):
            return False

    return probe


async def node_info(http: aiohttp.ClientSession, base: str) -> dict[str, Any]:
    async with http.get(base + "/v1/node") as resp:
        resp.raise_for_status()
        info: dict[str, Any] = await resp.json()
        return info


async def post(http: aiohttp.ClientSession, base: str, api_key: str, content: str) -> str | None:
    """Post one entry as an agent does, through the project's client (a 5xx or a refused connection is retried
    with the same idempotency key); its record hash, or None when it was not acknowledged."""
    async with Client(base, api_key=api_key, session=http, backoff=0.1) as client:
        try:
            return (await client.post(content)).record_hash
        except BBSClientError:
            return None


async def lane(http: aiohttp.ClientSession, api_key: str, n: int) -> list[str | None]:
    """One agent's stream of posts through the proxy, a few at a time, across node-1's death."""
    done = []
    for i in range(PER_LANE):
        done.append(await post(http, PROXY, api_key, f"lane {n} post {i}"))
        await asyncio.sleep(0.1)
    return done


async def entry_count(w: World) -> int:
    """How many entries the node holds, from `bbs digest` run by node-2 (one database for both processes)."""
    return int(json.loads(await sh("podman", "exec", w.container("node-2"), "bbs", "digest", "--json"))["count"])


async def reads(http: aiohttp.ClientSession, base: str, api_key: str, record_hash: str) -> bool:
    headers = {"Authorization": f"Bearer {api_key}"}
    try:
        async with http.get(f"{base}/v1/entries/{record_hash}", headers=headers) as resp:
            return resp.status == 200
    except (TimeoutError, aiohttp.ClientError):
        return False


async def drive(w: World, http: aiohttp.ClientSession) -> None:
    """Bring the topology up in its order, then run the checks."""
    pg = w.container("postgres")
    await sh(*w.compose, "up", "-d", "postgres")

    async def pg_ready() -> bool:
        answer = await sh("podman", "exec", pg, "pg_isready", "-U", "bbs", "-d", "bbs", check=False)
        return "accepting connections" in answer

    await wait_for("postgres accepting connections", pg_ready)
    w.log("postgres is ready")
    await sh(*w.compose, "up", "-d", "node-1")
    await wait_for("node-1 healthy", healthy(http, NODE_1))
    logs_1 = await sh("podman", "logs", w.container("node-1"))
    tokens = logs_1.count("Admin token (shown once")
    first = await node_info(http, NODE_1)
    w.check("node made once", tokens == 1, f"node {first['node_id'][:16]}, {tokens} admin token line(s) in its log")

    await sh(*w.compose, "up", "-d", "node-2", "proxy")
    await wait_for("node-2 healthy", healthy(http, NODE_2))
    await wait_for("the proxy answering", healthy(http, PROXY))
    second = await node_info(http, NODE_2)
    joined = "Joined /data to node" in await sh("podman", "logs", w.container("node-2"))
    same = (first["node_id"], first["public_key"]) == (second["node_id"], second["public_key"])
    w.check("second process joined", same and joined, f"node ids {first['node_id'][:16]} and {second['node_id'][:16]}")

    created = json.loads(await sh("podman", "exec", w.container("node-1"), "bbs", "agent", "create", "drill", "--json"))
    key = str(created["api_key"])
    posted = [h for h in [await post(http, PROXY, key, f"through the proxy {i}") for i in range(4)] if h]
    on_1 = [await reads(http, NODE_1, key, h) for h in posted]
    on_2 = [await reads(http, NODE_2, key, h) for h in posted]
    w.check(
        "one store",
        len(posted) == 4 and all(on_1) and all(on_2),
        f"{len(posted)} of 4 posts acknowledged; read on node-1 {sum(on_1)}, on node-2 {sum(on_2)}",
    )

    async def two_processes() -> bool:
        out = await sh("podman", "exec", w.container("node-2"), "bbs", "processes", "--json", check=False)
        try:
            found = json.loads(out)["processes"]
        except (ValueError, KeyError):
            return False
        return len(found) == 2 and all(p["vouched"] for p in found)

    try:
        await wait_for("two processes registered", two_processes, timeout=30)
        w.check("both registered", True, "two processes, both vouched")
    except TimeoutError as e:
        w.check("both registered", False, str(e))

    before = await entry_count(w)
    lanes = [asyncio.create_task(lane(http, key, n)) for n in range(LANES)]
    await asyncio.sleep(0.5)
    await sh("podman", "kill", w.container("node-1"))
    w.log("node-1 killed")
    acked = [h for done in await asyncio.gather(*lanes) for h in done if h]
    added = await entry_count(w) - before
    errors = (await sh("podman", "logs", w.container("proxy"), check=False)).count('"level":"error"')
    w.check(
        "proxy fails over",
        len(acked) == LANES * PER_LANE and added == len(acked),
        f"{len(acked)} of {LANES * PER_LANE} posts acknowledged, {added} entries stored; the proxy logged {errors}"
        " errors its clients retried",
    )

    await sh("podman", "start", w.container("node-1"))
    await wait_for("node-1 healthy again", healthy(http, NODE_1))
    back = [await reads(http, NODE_1, key, h) for h in acked]
    w.check("back with the rest", bool(acked) and all(back), f"node-1 reads {sum(back)} of {len(acked)}")

    backup = await sh("podman", "exec", w.container("node-2"), "bbs", "backup", "--out", "/data/drill.tar", check=False)
    try:
        written = json.loads(backup)
        listed = await sh(
            "podman", "exec", w.container("node-2"), "python3", "-c",
            "import tarfile; print(' '.join(tarfile.open('/data/drill.tar').getnames()))",
        )  # fmt: skip
        held = listed.strip()
        w.check("backup", "bbs.pgdump" in held.split(), f"{written['records']} records; the archive holds {held}")
    except (ValueError, KeyError, RuntimeError):
        w.check("backup", False, " ".join(backup.split())[-300:])

    await sh("podman", "restart", "-t", "20", pg)
    restarted = time.monotonic()

    async def acknowledged() -> bool:
        return await post(http, PROXY, key, "after the database restarted") is not None

    try:
        await wait_for("a post after PostgreSQL restarted", acknowledged, timeout=30)
        w.check("database restart", True, f"acknowledged {time.monotonic() - restarted:.1f} s after the restart")
    except TimeoutError as e:
        w.check("database restart", False, str(e))


async def run(tmp: Path) -> checks.Report:
    """Run the drill; the project is taken down with its volumes whatever happened."""
    compose = shlex.split(os.environ.get("BBS_COMPOSE", "podman-compose"))
    project = os.environ.get("BBS_COMPOSE_PROJECT", "bbspg")
    w = World([*compose, "-p", project, *FILES], project)
    await sh(*w.compose, "down", "-v", "-t", "5", check=False)
    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=15)) as http:
            await drive(w, http)
    except (RuntimeError, TimeoutError) as e:
        w.log(f"stopped: {e}")
    finally:
        for service in ("postgres", "node-1", "node-2", "proxy"):
            (tmp / f"{service}.log").write_text(await sh("podman", "logs", w.container(service), check=False))
        await sh(*w.compose, "down", "-v", "-t", "5", check=False)
    outcomes = w.outcomes()
    wall = time.monotonic() - w.t0
    return checks.Report(outcomes, wall, f"{checks.table(outcomes)}\n\ncompose postgresql drill wall time {wall:.1f} s")


def main() -> int:
    return checks.drill_main(__doc__, "compose postgresql drill", run)


if __name__ == "__main__":
    raise SystemExit(main())
