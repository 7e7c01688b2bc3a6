"""The OpenAI-compatible engine against a small chat-completions server on loopback, and the scripted engine."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from agent.runtime.engines import EngineError, OpenAIEngine, Prompt, ScriptedEngine

PROMPT = Prompt([{"role": "system", "content": "I am."}, {"role": "user", "content": "Hello"}], 256, "batch")


async def serve(handler: Callable[[web.Request], Awaitable[web.StreamResponse]]) -> TestServer:
    app = web.Application()
    app.router.add_post("/v1/chat/completions", handler)
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    return server


async def test_posts_the_chat_schema_and_reads_the_reply() -> None:
    seen: list[Any] = []

    async def chat(request: web.Request) -> web.Response:
        seen.append((request.headers.get("Authorization"), await request.json()))
        return web.json_response({"choices": [{"message": {"role": "assistant", "content": '{"actions": []}'}}]})

    server = await serve(chat)
    engine = OpenAIEngine(str(server.make_url("/v1")), "tiny", api_key="sk-test", temperature=0.0)
    try:
        assert await engine.complete(PROMPT) == '{"actions": []}'
    finally:
        await engine.close()
        await server.close()
    auth, body = seen[0]
    assert auth == "Bearer sk-test"
    assert body == {"model": "tiny", "messages": PROMPT.messages, "max_tokens": 256, "temperature": 0.0}


@pytest.mark.parametrize(
    "answer",
    [
        web.json_response({"error": "overloaded"}, status=503),
        web.json_response({"choices": []}),
        web.json_response({"choices": [{"message": {"content": None}}]}),
        web.Response(text="<html>proxy error</html>"),
    ],
)
async def test_bad_answers_raise_engine_error(answer: web.Response) -> None:
    async def chat(request: web.Request) -> web.Response:
        return answer

    server = await serve(chat)
    engine = OpenAIEngine(str(server.make_url("/v1")), "tiny")
    try:
        with pytest.raises(EngineError):
            await engine.complete(PROMPT)
    finally:
        await engine.close()
        await server.close()


async def test_unreachable_endpoint_is_an_engine_error() -> None:
    async def chat(request: web.Request) -> web.Response:
        return web.json_response({})

    server = await serve(chat)
    url = str(server.make_url("/v1"))
    await server.close()
    engine = OpenAIEngine(url, "tiny", timeout=5)
    try:
        with pytest.raises(EngineError):
            await engine.complete(PROMPT)
    finally:
        await engine.close()


async def test_scripted_engine_replays_and_keeps_prompts() -> None:
    engine = ScriptedEngine(["one", "two"])
    assert [await engine.complete(PROMPT) for _ in range(3)] == ["one", "two", '{"actions": []}']
    assert len(engine.prompts) == 3
    by_trigger = ScriptedEngine(lambda p: p.trigger)
    assert await by_trigger.complete(PROMPT) == "batch"
