"""Default-mode candidates in the dashboard: review list, and a promote that ends as a real entry."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from aiohttp.test_utils import TestClient
from playwright.async_api import expect

from tests.node.dashboard.conftest import Browser, Seeded

OpenBrowser = Callable[..., Awaitable[Browser]]


async def propose(client: TestClient, seeded: Seeded) -> dict[str, int]:
    """Three candidates through the critic: one approved, one held for review, one rejected as a duplicate."""
    root = str(seeded.ids["root"])
    body = {
        "candidates": [
            {"kind": "decision", "text": "Boil only the water you need", "evidence_refs": [root]},
            {"kind": "risk", "text": "The kettle cable looks frayed and could be a fire hazard"},
            {"kind": "decision", "text": "The kettle draws 2.2 kW when boiling", "evidence_refs": [root]},
        ]
    }
    resp = await client.post("/v1/default-mode/critic", json=body, headers=seeded.alice.headers)
    assert resp.status == 200, await resp.text()
    got = {c["status"]: c["id"] for c in (await resp.json())["candidates"]}
    assert set(got) == {"approved", "needs_review", "rejected"}, got
    return got


async def test_promote_from_the_dashboard_creates_the_entry(
    open_browser: OpenBrowser, client: TestClient, seeded: Seeded
) -> None:
    ids = await propose(client, seeded)
    b = await open_browser()
    await b.sign_in(seeded.bob.api_key)
    page = b.page
    await b.view("#/candidates", "#candidate-list article.candidate")
    await expect(page.locator("#candidate-list article.candidate")).to_have_count(2)  # rejected is not awaiting
    approved = page.locator(f'#candidate-list article[data-id="{ids["approved"]}"]')
    assert "critic: approved" in await approved.inner_text()
    await b.shot("candidates")

    await approved.get_by_role("button", name="Promote").click()
    link = page.locator("#promoted-link")
    await link.wait_for()
    assert "promoted" in await page.inner_text("#status")
    await expect(page.locator("#candidate-list article.candidate")).to_have_count(1)

    # End to end: the entry exists on the node, signed by the promoting agent, and the page shows it.
    entry_id = (await link.get_attribute("href") or "").removeprefix("#/entry/")
    resp = await client.get(f"/v1/entries/{entry_id}", headers=seeded.alice.headers)
    entry = (await resp.json())["entries"][0]
    assert entry["content"] == "Boil only the water you need" and entry["author_id"] == seeded.bob.agent_id
    await link.click()
    await page.wait_for_selector("#graph svg g.node")
    assert "Boil only the water you need" in await page.inner_text("article.entry")
    assert await page.locator('#graph svg path.edge[data-type="derived_from"]').count() >= 1
    await b.view("#/candidates?show=promoted", f'#candidate-list article[data-id="{ids["approved"]}"]')
    await b.shot("candidates-promoted")
    assert b.errors == []


async def test_admin_sees_every_candidate_with_review_actions(
    open_browser: OpenBrowser, client: TestClient, seeded: Seeded, data_dir: tuple[object, str]
) -> None:
    ids = await propose(client, seeded)
    b = await open_browser()
    await b.sign_in(data_dir[1])
    await b.view("#/candidates?show=all", "#candidate-list article.candidate")
    await expect(b.page.locator("#candidate-list article.candidate")).to_have_count(3)
    buttons = b.page.locator(f'#candidate-list article[data-id="{ids["needs_review"]}"] button')
    assert await buttons.all_inner_texts() == ["Promote", "Approve", "Reject"]
    assert all([await x.is_enabled() for x in await buttons.all()])
    assert await b.page.locator(f'#candidate-list article[data-id="{ids["rejected"]}"] button').count() == 0
    assert b.errors == []
