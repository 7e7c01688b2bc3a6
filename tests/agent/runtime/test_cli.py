"""`bbs agent run` end to end: a real process polling a node on loopback, its model an OpenAI-compatible
chat server on loopback that answers the way a model would (acknowledge the request it is shown)."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from agent.client import Client
from agent.runtime.memory import WorkingMemory
from tests.conftest import AgentCreds

Factory = Callable[[str], Awaitable[AgentCreds]]
ROOT = Path(__file__).resolve().parents[3]


@pytest.mark.slow
async def test_agent_run_acks_a_request_through_an_openai_endpoint(
    client: TestClient, make_agent: Factory, tmp_path: Path
) -> None:
    boss, worker = await make_agent("boss"), await make_agent("worker")
    prompts: list[list[dict[str, str]]] = []

    async def chat(request: web.Request) -> web.Response:
        body = await request.json()
        prompts.append(body["messages"])
        ids = re.findall(r"\[entry (\d+)\] task/request", body["messages"][1]["content"])
        actions = [{"op": "ack", "request": i, "note": "Acknowledged."} for i in ids]
        return web.json_response(
            {"choices": [{"message": {"role": "assistant", "content": json.dumps({"actions": actions})}}]}
        )

    app = web.Application()
    app.router.add_post("/v1/chat/completions", chat)
    model = TestServer(app, host="127.0.0.1")
    await model.start_server()
    node_url = str(client.make_url("")).rstrip("/")
    (tmp_path / "soul.md").write_text("I am the worker. I acknowledge requests.\n")
    (tmp_path / "agent-config.yaml").write_text(
        f"node: {{url: '{node_url}'}}\n"
        "polling: {active_min_s: 0.1, active_max_s: 0.2, idle_min_s: 0.3, idle_max_s: 0.4}\n"
        "schedule: {synthesis_review: null, hygiene: null}\n"
        f"model: {{engine: openai, base_url: '{model.make_url('/v1')}', model: tiny}}\n"
    )
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "node.cli", "agent", "run",
        "--config", str(tmp_path / "agent-config.yaml"), "--soul", str(tmp_path / "soul.md"),
        cwd=ROOT, env={**os.environ, "BBS_API_KEY": worker.api_key},
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )  # fmt: skip
    try:
        async with Client(node_url, api_key=boss.api_key) as b:
            await asyncio.sleep(1.0)  # the agent subscribes when it starts
            request = await b.post(
                "Measure it", entry_type="task", performative="request", directed_to=[worker.agent_id]
            )
            for _ in range(300):
                replies = (await b.search(author=[worker.agent_id])).entries
                if replies:
                    break
                await asyncio.sleep(0.1)
            assert [e.performative for e in replies] == ["ack"]
            assert replies[0].directed_to == [boss.agent_id]
        proc.send_signal(signal.SIGTERM)
        output = (await asyncio.wait_for(proc.communicate(), 30))[0].decode()
        assert proc.returncode == 0, output
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
        await model.close()
    assert prompts[0][0]["content"].startswith("I am the worker.")
    assert f"[entry {request.id}] task/request" in prompts[0][1]["content"]
    memory = WorkingMemory(tmp_path / "memory.sqlite")
    assert [(a["op"], a["status"]) for a in memory.actions()] == [("ack", "ok")]
    assert [d["trigger"] for d in memory.events("decision")] == ["immediate"]
    memory.close()


def test_a_skill_file_that_does_not_exist_is_a_config_error(tmp_path: Path) -> None:
    """It was silently replaced by the shipped skill."""
    import subprocess

    (tmp_path / "soul.md").write_text("I am the worker.\n")
    (tmp_path / "agent-config.yaml").write_text("node: {url: 'http://127.0.0.1:9'}\n")
    done = subprocess.run(
        [sys.executable, "-m", "node.cli", "agent", "run", "--config", str(tmp_path / "agent-config.yaml"),
         "--soul", str(tmp_path / "soul.md"), "--skill", str(tmp_path / "missing.md")],
        cwd=ROOT, env={**os.environ, "BBS_API_KEY": "bbs_x_y"}, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().splitlines() == [f"bbs: config: no skill file {tmp_path / 'missing.md'} (at --skill)"]
