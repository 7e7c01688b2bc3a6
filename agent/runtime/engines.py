"""Chat engines: any OpenAI-compatible endpoint (llama.cpp, Ollama, vLLM, hosted) and a scripted one.

An engine gets a Prompt (the assembled messages plus what the runtime knows about why it was woken) and
returns the model's reply text; agent.runtime.actions parses that text.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import aiohttp

from wire.api import EntryOut, Envelope


class EngineError(Exception):
    """The engine could not produce a reply (unreachable, HTTP error, unexpected body)."""


@dataclass
class Prompt:
    messages: list[dict[str, str]]
    max_tokens: int
    trigger: str  # "immediate", "batch" or the scheduled job's name
    batch: list[Envelope] = field(default_factory=list)
    fetched: dict[str, EntryOut] = field(default_factory=dict)  # by record hash
    agent_id: str = ""


class Engine(Protocol):
    async def complete(self, prompt: Prompt) -> str: ...

    async def close(self) -> None: ...


class OpenAIEngine:
    """POST {base_url}/chat/completions with the OpenAI chat schema; the reply is choices[0].message.content."""

    def __init__(
        self,
        base_url: str,
        model: str,
        *,
        api_key: str | None = None,
        temperature: float = 0.2,
        timeout: float = 120.0,
    ) -> None:
        self.url = base_url.rstrip("/") + "/chat/completions"
        self.model = model
        self.api_key = api_key
        self.temperature = temperature
        self._timeout = aiohttp.ClientTimeout(total=timeout)
        self._session: aiohttp.ClientSession | None = None

    async def complete(self, prompt: Prompt) -> str:
        if self._session is None:
            self._session = aiohttp.ClientSession(timeout=self._timeout)
        headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
        body = {
            "model": self.model,
            "messages": prompt.messages,
            "max_tokens": prompt.max_tokens,
            "temperature": self.temperature,
        }
        try:
            async with self._session.post(self.url, json=body, headers=headers) as resp:
                text = await resp.text()
                if resp.status != 200:
                    raise EngineError(f"{self.url} answered {resp.status}: {text[:200]}")
        except (TimeoutError, aiohttp.ClientError) as exc:
            raise EngineError(f"{self.url} unreachable: {exc!r}") from None
        try:
            data: Any = json.loads(text)
            content = data["choices"][0]["message"]["content"]
        except (ValueError, KeyError, IndexError, TypeError):
            raise EngineError(f"{self.url} returned an unexpected body: {text[:200]}") from None
        if not isinstance(content, str):
            raise EngineError(f"{self.url} returned non-text content")
        return content

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None


class ScriptedEngine:
    """Replies from a script: a function of the Prompt, or a fixed sequence of replies (then '{"actions": []}').

    Every prompt it receives is kept in `prompts`, so tests and demos can check what the model was shown.
    """

    def __init__(self, script: Callable[[Prompt], str] | Sequence[str]) -> None:
        self._fn = script if callable(script) else None
        self._replies = [] if callable(script) else list(script)
        self.prompts: list[Prompt] = []

    async def complete(self, prompt: Prompt) -> str:
        self.prompts.append(prompt)
        if self._fn is not None:
            return self._fn(prompt)
        return self._replies.pop(0) if self._replies else '{"actions": []}'

    async def close(self) -> None:
        return None
