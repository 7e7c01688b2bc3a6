"""Send N messages through an mcp-agent-mail server over MCP (Streamable HTTP) from C concurrent sessions.

Run with the mcp-agent-mail virtualenv's python (it ships the `mcp` SDK):
`python agent_mail_send.py URL N CLIENTS CONTENT_FILE`. One setup session registers C + 1 agents in one project;
then each of C sessions calls `send_message` from its agent to the next one, one call awaiting its result
at a time. Prints one JSON object: count, sent, elapsed, latencies (seconds), setup_seconds.
"""

import asyncio
import json
import sys
import time

from mcp import ClientSession
from mcp.client.streamable_http import streamablehttp_client

PROJECT = "/bench/agent-bbs-peers"


async def call(session: ClientSession, tool: str, args: dict) -> dict:
    result = await session.call_tool(tool, args)
    if result.isError:
        text = " ".join(getattr(c, "text", "") for c in result.content)
        raise RuntimeError(f"{tool} failed: {text[:300]}")
    return result.structuredContent or {}


async def setup(url: str, clients: int) -> list[str]:
    async with streamablehttp_client(url) as (read, write, _), ClientSession(read, write) as session:
        await session.initialize()
        await call(session, "ensure_project", {"human_key": PROJECT})
        names = []
        for i in range(clients + 1):  # sender i writes to agent i + 1
            agent = await call(
                session,
                "register_agent",
                {"project_key": PROJECT, "program": "bench", "model": "none", "name": f"BenchAgent{i}"},
            )
            names.append(agent.get("name", f"BenchAgent{i}"))
        return names


async def send_all(url: str, names: list[str], per_lane: list[int], contents: list[str]) -> tuple[int, float, list]:
    latencies: list[float] = []
    sent = 0

    async def lane(i: int) -> None:
        nonlocal sent
        async with streamablehttp_client(url) as (read, write, _), ClientSession(read, write) as session:
            await session.initialize()
            initialised[i].set()
            await ready.wait()
            for j in range(per_lane[i]):
                args = {
                    "project_key": PROJECT,
                    "sender_name": names[i],
                    "to": [names[i + 1]],
                    "subject": f"bench {i}-{j}",
                    "body_md": contents[(i * 131 + j) % len(contents)],
                }
                started = time.perf_counter()
                await call(session, "send_message", args)
                latencies.append(time.perf_counter() - started)
                sent += 1

    ready = asyncio.Event()
    initialised = [asyncio.Event() for _ in per_lane]
    tasks = [asyncio.create_task(lane(i)) for i in range(len(per_lane))]
    # every session finishes its MCP handshake before the clock starts (a failed lane raises here)
    waiting = [asyncio.create_task(e.wait()) for e in initialised]
    done, _ = await asyncio.wait([*tasks, asyncio.gather(*waiting)], return_when=asyncio.FIRST_COMPLETED)
    for task in done:
        if task in tasks:
            task.result()
    started = time.perf_counter()
    ready.set()
    await asyncio.gather(*tasks)
    return sent, time.perf_counter() - started, latencies


def main() -> None:
    url, n, clients, content_file = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    with open(content_file, encoding="utf-8") as fh:
        contents = [line.rstrip("\n") for line in fh if line.strip()]
    started = time.perf_counter()
    names = asyncio.run(setup(url, clients))
    setup_seconds = time.perf_counter() - started
    per_lane = [n // clients + (1 if i < n % clients else 0) for i in range(clients)]
    sent, elapsed, latencies = asyncio.run(send_all(url, names, per_lane, contents))
    print(
        json.dumps(
            {"count": n, "sent": sent, "elapsed": elapsed, "latencies": latencies, "setup_seconds": setup_seconds}
        )
    )


if __name__ == "__main__":
    main()
