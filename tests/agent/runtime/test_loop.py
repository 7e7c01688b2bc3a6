"""The run loop against a real node on loopback: tiers, telemetry, fetch-only-chosen, cold start, bad output."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from pathlib import Path

from aiohttp.test_utils import TestClient

from agent.client import Client
from agent.runtime.config import load_skill, parse_config
from agent.runtime.engines import EngineError, Prompt, ScriptedEngine
from agent.runtime.loop import AgentRuntime
from agent.runtime.memory import WorkingMemory
from tests.conftest import AgentCreds, FakeClock

Factory = Callable[[str], Awaitable[AgentCreds]]
CONFIG = """
scoring: {watched_tags: [perf], activation_threshold: 4.0, max_batch: 1}
schedule: {synthesis_review: null, hygiene: null}
polling: {active_min_s: 0.01, active_max_s: 0.02, idle_min_s: 0.03, idle_max_s: 0.04, backoff_base_s: 0.01}
model: {engine: scripted}
"""


def base(client: TestClient) -> str:
    return str(client.make_url("")).rstrip("/")


def runtime(
    client: TestClient, creds: AgentCreds, engine: ScriptedEngine, tmp: Path, clock: FakeClock, config: str = CONFIG
) -> AgentRuntime:
    return AgentRuntime(
        parse_config(config),
        "I am a careful tester.",
        load_skill(),
        Client(base(client), api_key=creds.api_key),
        engine,
        WorkingMemory(tmp / f"{creds.name}.sqlite", clock),
        clock=clock,
    )


async def test_malformed_output_is_recorded_and_the_loop_goes_on(
    client: TestClient, make_agent: Factory, tmp_path: Path, clock: FakeClock
) -> None:
    boss, worker = await make_agent("boss"), await make_agent("worker")
    engine = ScriptedEngine(
        [
            "Sure! I'll get right on that.",  # no JSON at all
            json.dumps({"actions": [{"op": "post"}, {"op": "post", "content": "Done: 41%."}]}),
        ]
    )
    rt = runtime(client, worker, engine, tmp_path, clock)
    async with Client(base(client), api_key=boss.api_key) as b:
        await rt.start()
        await b.post("Measure it", entry_type="task", performative="request", directed_to=[worker.agent_id])
        assert await rt.tick() == 1
        bad = rt.memory.events("malformed_output")
        assert len(bad) == 1 and bad[0]["reply"] == "Sure! I'll get right on that."
        assert rt.memory.pending() == []  # engaged once, not retried forever
        await b.post("And this one", entry_type="task", performative="request", directed_to=[worker.agent_id])
        assert await rt.tick() == 1
        assert [a["op"] for a in rt.memory.actions()] == ["post"]  # the good action of the mixed reply ran
        assert "missing required field `content`" in rt.memory.events("malformed_output")[1]["errors"][0]
    await rt.client.close()
    rt.memory.close()


async def test_engine_error_keeps_the_notification_for_the_next_tick(
    client: TestClient, make_agent: Factory, tmp_path: Path, clock: FakeClock
) -> None:
    boss, worker = await make_agent("boss"), await make_agent("worker")
    calls: list[str] = []

    def flaky(p: Prompt) -> str:
        calls.append(p.trigger)
        if len(calls) == 1:
            raise EngineError("model server restarting")
        return json.dumps({"actions": [{"op": "ack", "request": str(p.batch[0].entry_id)}]})

    rt = runtime(client, worker, ScriptedEngine(flaky), tmp_path, clock)
    async with Client(base(client), api_key=boss.api_key) as b:
        await rt.start()
        await b.post("Measure it", entry_type="task", performative="request", directed_to=[worker.agent_id])
        assert await rt.tick() == 0
        assert len(rt.memory.pending()) == 1 and rt.memory.events("engine_error")
        assert await rt.tick() == 1
        assert calls == ["immediate", "immediate"] and [a["op"] for a in rt.memory.actions()] == ["ack"]
    await rt.client.close()
    rt.memory.close()


async def test_batch_threshold_telemetry_and_fetch_only_the_chosen(
    client: TestClient, make_agent: Factory, tmp_path: Path, clock: FakeClock
) -> None:
    writer, reader = await make_agent("writer"), await make_agent("reader")
    engine = ScriptedEngine([])
    rt = runtime(client, reader, engine, tmp_path, clock)
    async with Client(base(client), api_key=writer.api_key) as w:
        await rt.start()
        await w.post("perf note one", tags=["perf"], confidence=0.2)
        assert await rt.tick() == 0  # 1.5 + 0.1 + 0.5 = 2.1 < 4.0
        await w.post("perf note two, the important one", tags=["perf"], confidence=1.0)
        await w.post("unrelated", tags=["cooking"])  # not subscribed: never arrives
        assert await rt.tick() == 1  # 2.1 + 2.5 >= 4.0
    decisions = rt.memory.events("decision")
    assert [(d["engaged"], len(d["notifications"]), len(d["chosen"])) for d in decisions] == [
        (False, 1, 0),
        (True, 2, 1),
    ]
    scored = rt.memory.events("scored")
    assert [round(s["score"], 2) for s in scored] == [2.1, 2.5]
    assert scored[0]["features"]["watched_tag"] == 1.0 and scored[1]["features"]["confidence"] == 1.0
    [prompt] = engine.prompts
    assert [e.content for e in prompt.fetched.values()] == ["perf note two, the important one"]  # max_batch 1
    user = prompt.messages[1]["content"]
    assert "perf note two" in user and "perf note one" not in user
    assert rt.memory.pending() == []  # the unchosen one was dismissed with the batch
    await rt.client.close()
    rt.memory.close()


async def test_cold_start_seeds_summaries_from_a_bounded_search(
    client: TestClient, make_agent: Factory, tmp_path: Path, clock: FakeClock
) -> None:
    writer, reader = await make_agent("writer"), await make_agent("reader")
    async with Client(base(client), api_key=writer.api_key) as w:
        for i in range(5):
            await w.post(f"old perf finding {i}", tags=["perf"])
        await w.post("old cooking finding", tags=["cooking"])
    config = CONFIG + "memory: {cold_start_limit: 3}\n"
    rt = runtime(client, reader, ScriptedEngine([]), tmp_path, clock, config)
    await rt.start()
    assert rt.memory.thread_count() == 3
    assert rt.memory.events("cold_start")[0]["entries"] == 3
    assert all("perf finding" in s["summary"] for s in rt.memory.summaries())
    await rt.start()  # memory is no longer empty: no second cold start
    assert len(rt.memory.events("cold_start")) == 1
    await rt.client.close()
    rt.memory.close()


async def test_run_survives_a_failing_tick_and_stops_when_told(
    client: TestClient, make_agent: Factory, tmp_path: Path, clock: FakeClock
) -> None:
    boss, worker = await make_agent("boss"), await make_agent("worker")
    stop = asyncio.Event()
    seen: list[int] = []

    def script(p: Prompt) -> str:
        seen.append(len(seen))
        if len(seen) == 1:
            raise RuntimeError("a bug in a tool")
        stop.set()
        return '{"actions": []}'

    rt = runtime(client, worker, ScriptedEngine(script), tmp_path, clock)
    async with Client(base(client), api_key=boss.api_key) as b:
        await b.post("Measure it", entry_type="task", performative="request", directed_to=[worker.agent_id])
        await asyncio.wait_for(rt.run(stop), timeout=30)
    assert seen == [0, 1]
    [error] = rt.memory.events("tick_error")
    assert error["error"] == "RuntimeError"
    await rt.client.close()
    rt.memory.close()


async def test_scheduled_hygiene_compacts_and_forgets(
    client: TestClient, make_agent: Factory, tmp_path: Path, clock: FakeClock
) -> None:
    reader = await make_agent("reader")
    config = CONFIG.replace("hygiene: null", "hygiene: '* * * * *'")
    rt = runtime(client, reader, ScriptedEngine([]), tmp_path, clock, config)
    await rt.start()
    rt.memory.record("scored", score=1.0)
    rt.memory.record("action", op="post")
    rt.memory.note_entry("1" * 64, [], "- an old thread", [])
    clock.advance(100 * 86_400)
    assert await rt.tick() == 0  # hygiene never wakes the model
    [hygiene] = rt.memory.events("hygiene")
    assert (hygiene["compacted"], hygiene["forgotten"]) == (2, 1)  # the scored and cold_start events
    assert rt.memory.events("action") and not rt.memory.events("scored")
    await rt.client.close()
    rt.memory.close()


async def test_a_push_wakes_the_loop_before_its_interval(
    client: TestClient, make_agent: Factory, tmp_path: Path, clock: FakeClock
) -> None:
    """With an hour-long poll interval, setting `wake` (what agent/runtime/push.py does) makes the loop poll now."""
    worker = await make_agent("worker")
    slow = CONFIG.replace(
        "polling: {active_min_s: 0.01, active_max_s: 0.02, idle_min_s: 0.03, idle_max_s: 0.04, backoff_base_s: 0.01}",
        "polling: {active_min_s: 3000, active_max_s: 3600, idle_min_s: 3600, idle_max_s: 3600}",
    )
    rt = runtime(client, worker, ScriptedEngine([]), tmp_path, clock, slow)
    ticks = 0
    real_tick = rt.tick

    async def counted() -> int:
        nonlocal ticks
        ticks += 1
        return await real_tick()

    rt.tick = counted  # type: ignore[method-assign]
    stop = asyncio.Event()
    await rt.start()
    task = asyncio.create_task(rt.run(stop))
    for _ in range(200):
        if ticks == 1:
            break
        await asyncio.sleep(0.01)
    rt.wake.set()
    for _ in range(200):
        if ticks == 2:
            break
        await asyncio.sleep(0.01)
    assert ticks == 2  # the second poll came from the wake-up, not the hour-long interval
    stop.set()
    await asyncio.wait_for(task, timeout=10)
    await rt.client.close()


async def test_a_redaction_notice_drops_the_runtimes_copies_and_engages_nobody(
    client: TestClient, make_agent: Factory, tmp_path: Path, clock: FakeClock
) -> None:
    boss, worker = await make_agent("boss"), await make_agent("worker")
    engine = ScriptedEngine([json.dumps({"actions": []})])  # one engagement only: a second would find no reply
    rt = runtime(client, worker, engine, tmp_path, clock)
    async with Client(base(client), api_key=boss.api_key) as b:
        await rt.start()
        posted = await b.post("The vault code is 9931, measure it", entry_type="task", performative="request",
                              directed_to=[worker.agent_id])  # fmt: skip
        assert await rt.tick() == 1
        assert "9931" in str(rt.memory.summaries(limit=10))  # the runtime holds a copy of the content
        resp = await client.post("/v1/redactions", json={"target": posted.record_hash}, headers=boss.headers)
        assert resp.status == 201, await resp.text()
        redaction = (await resp.json())["redaction"]
        assert await rt.tick() == 0  # the notice engages nobody
        assert "9931" not in str(rt.memory.summaries(limit=10))
        (told,) = rt.memory.events("redacted")
        assert (told["record_hash"], told["redaction"], told["summaries_dropped"]) == (posted.record_hash, redaction, 1)
        assert (await rt.client.inbox()).notifications == []  # the notice was acknowledged
    await rt.client.close()
    rt.memory.close()
