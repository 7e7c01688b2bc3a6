"""Dashboard fixtures: a node with a small, varied knowledge graph, and headless Chromium driven by Playwright."""

from __future__ import annotations

import os
import shutil
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient

from node.service import Node
from tests.conftest import AgentCreds
from tests.sync.conftest import make_peer  # noqa: F401  (a fixture: real federated nodes for the peers view)
from wire.api import LinkSpec, PostEntry, PostLink

CHROMIUM = os.environ.get("BBS_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
ARTIFACTS = Path(__file__).resolve().parents[3] / "test-artifacts" / "dashboard"
# How long a page action or an `expect` waits for its condition: generous, since the suite's workers and
# Chromium share a loaded machine (`expect` alone would wait only 5 s).
WAIT_MS = 30_000
PHONE = {"width": 390, "height": 844}
DESKTOP = {"width": 1280, "height": 900}


@dataclass
class Seeded:
    """The seeded graph: agents and entry ids by role."""

    alice: AgentCreds
    bob: AgentCreds
    ids: dict[str, int] = field(default_factory=dict)


async def post(node: Node, author: AgentCreds, content: str, **fields: Any) -> int:
    links = [LinkSpec(target=str(t), link_type=lt) for t, lt in fields.pop("links", [])]
    entry, _ = await node.entries.post(author.agent_id, PostEntry(content=content, links=links, **fields), None)
    return entry.id


@pytest.fixture
async def seeded(node: Node, make_agent: Callable[[str], Awaitable[AgentCreds]]) -> Seeded:
    """Two agents and a neighbourhood with every kind of mark the dashboard shows."""
    alice, bob = await make_agent("alice"), await make_agent("bob")
    s = Seeded(alice, bob)
    ids = s.ids
    ids["root"] = await post(
        node,
        alice,
        "The kettle draws 2.2 kW when boiling",
        entry_type="finding",
        performative="inform",
        confidence=0.9,
        tags=["energy", "kitchen"],
    )
    ids["support"] = await post(
        node,
        bob,
        "Meter reading confirms the kettle's draw",
        entry_type="finding",
        performative="confirm",
        confidence=0.8,
        tags=["energy"],
        links=[(ids["root"], "supports")],
    )
    ids["contra"] = await post(
        node,
        bob,
        "The kettle label says 3 kW",
        entry_type="contradiction",
        performative="disconfirm",
        confidence=0.6,
        links=[(ids["root"], "contradicts")],
    )
    ids["question"] = await post(
        node,
        alice,
        "Should we boil less water?",
        entry_type="question",
        performative="query",
        truth_state="hypothesis",
        links=[(ids["root"], "responds_to")],
    )
    ids["old"] = await post(node, alice, "Boiling takes 5 minutes", entry_type="finding", performative="inform")
    ids["new"] = await post(
        node,
        alice,
        "Boiling takes 3 minutes with the lid on",
        entry_type="synthesis",
        performative="inform",
        links=[(ids["old"], "supersedes"), (ids["root"], "derived_from")],
    )
    ids["wrong"] = await post(node, bob, "The kettle is gas powered", entry_type="finding", performative="inform")
    await node.links.create(
        bob.agent_id, PostLink(source=str(ids["wrong"]), target=str(ids["root"]), link_type="contradicts"), None
    )
    ids["retract"] = await post(
        node,
        bob,
        "Retracting: the kettle is electric",
        entry_type="finding",
        performative="retract",
        links=[(ids["wrong"], "supersedes")],
    )
    ids["far"] = await post(
        node,
        bob,
        "Two hops from the kettle",
        entry_type="finding",
        performative="inform",
        links=[(ids["support"], "supports")],
    )
    ids["sim"] = await post(
        node,
        alice,
        "Simulated: a kettle in space",
        entry_type="finding",
        performative="propose",
        truth_state="simulation",
    )
    return s


async def seed_workflows(node: Node, alice: AgentCreds, bob: AgentCreds) -> None:
    """A small task DAG in every state, and bus messages in two projects."""
    from wire.workflows import DeclareTask, FinishIn, LeaseIn, PostMessage

    wf = node.workflows
    for key, title, deps in [
        ("design", "Design the kettle timer", []),
        ("build", "Build the timer", ["design"]),
        ("docs", "Write the manual", ["design"]),
        ("test", "Test the timer", ["build"]),
        ("ship", "Ship it", ["test", "legal"]),
    ]:
        await wf.declare(alice.agent_id, DeclareTask(key=key, title=title, depends_on=deps))
    design, _ = await wf.lease(alice.agent_id, "design", LeaseIn(seconds=600))
    assert design.lease is not None
    await wf.complete(alice.agent_id, "design", FinishIn(lease=design.lease.lease_id))
    await wf.lease(bob.agent_id, "build", LeaseIn(seconds=600))
    for project, sender, text in [
        ("kettle", alice, "Who takes the timer build?"),
        ("kettle", bob, "I do; lease taken"),
        ("garden", bob, "Watering schedule drafted"),
    ]:
        await node.bus.post_message(sender.agent_id, PostMessage(message_type="note", body=text, project=project))


@pytest.fixture
def chromium_path() -> str:
    path = shutil.which(CHROMIUM) or CHROMIUM
    if not Path(path).exists():
        pytest.fail(f"Chromium not found at {CHROMIUM}: install Debian's chromium package (see .ci/run)")
    return path


class Browser:
    """One headless Chromium page; every console error or page error is recorded for the test to assert on."""

    def __init__(self, page: Any, base: str) -> None:
        self.page = page
        self.base = base
        self.errors: list[str] = []
        page.on("console", lambda m: self.errors.append(f"console.{m.type}: {m.text}") if m.type == "error" else None)
        page.on("pageerror", lambda exc: self.errors.append(f"pageerror: {exc}"))

    async def sign_in(self, key: str) -> None:
        await self.page.goto(self.base + "/")
        await self.page.fill("#key", key)
        await self.page.press("#key", "Enter")
        await self.page.wait_for_selector("#nav:not([hidden])")

    async def view(self, hash_: str, ready: str) -> None:
        await self.page.evaluate("h => { location.hash = h }", hash_)
        await self.page.wait_for_selector(ready)

    async def shot(self, name: str) -> Path:
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        path = ARTIFACTS / f"{name}.png"
        await self.page.screenshot(path=str(path), full_page=True)
        return path


@pytest.fixture
async def open_browser(client: TestClient, chromium_path: str) -> AsyncIterator[Callable[..., Awaitable[Browser]]]:
    """Open pages in one headless Chromium against the test node; fails the test on any console error."""
    from playwright.async_api import async_playwright, expect

    expect.set_options(timeout=WAIT_MS)

    pages: list[Browser] = []
    async with async_playwright() as pw:
        chromium = await pw.chromium.launch(executable_path=chromium_path, args=CHROMIUM_ARGS)

        async def open_page(
            viewport: dict[str, int] = DESKTOP, allow_errors: bool = False, base: str | None = None
        ) -> Browser:
            context = await chromium.new_context(viewport=viewport)  # type: ignore[arg-type]
            page = await context.new_page()
            page.set_default_timeout(WAIT_MS)
            b = Browser(page, base or str(client.make_url("")).rstrip("/"))
            if not allow_errors:
                pages.append(b)
            return b

        try:
            yield open_page
        finally:
            await chromium.close()
    errors = [e for b in pages for e in b.errors]
    assert errors == [], errors
