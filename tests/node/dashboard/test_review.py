"""The admin reviews default-mode candidates in the dashboard: approve one, reject another, promote the approved."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from aiohttp.test_utils import TestClient
from playwright.async_api import expect

from tests.node.dashboard.conftest import Browser, Seeded
from tests.node.dashboard.test_candidates import propose

OpenBrowser = Callable[..., Awaitable[Browser]]


async def test_admin_approves_rejects_and_promotes_as_a_chosen_agent(
    open_browser: OpenBrowser, client: TestClient, seeded: Seeded, data_dir: tuple[object, str]
) -> None:
    ids = await propose(client, seeded)  # critic: one approved, one needs_review (risky), one rejected
    b = await open_browser()
    await b.sign_in(data_dir[1])
    page = b.page
    await b.view("#/candidates", "#candidate-list article.candidate")
    cards = page.locator("#candidate-list article.candidate")
    await expect(cards).to_have_count(2)
    risky = page.locator(f'#candidate-list article[data-id="{ids["needs_review"]}"]')
    critic_ok = page.locator(f'#candidate-list article[data-id="{ids["approved"]}"]')
    await b.shot("candidates-admin")

    # Approve the risky one: approved now, still a hypothesis (approval is not a fact check).
    await risky.get_by_role("button", name="Approve").click()
    await expect(risky).to_have_class("entry candidate status-approved")
    assert "approved by admin" in await risky.inner_text()
    assert await risky.locator(".badge.truth-hypothesis").count() == 1
    assert await risky.get_by_role("button", name="Approve").count() == 0  # decided: nothing left to approve

    # Reject the critic-approved one: it leaves the review list and shows under Rejected.
    await critic_ok.get_by_role("button", name="Reject").click()
    await expect(cards).to_have_count(1)
    assert "rejected" in await page.inner_text("#status")

    # Promote the approved one, signed by bob (an agent whose key the node keeps), chosen in the page.
    await page.select_option("#promote-author", seeded.bob.agent_id)
    await risky.get_by_role("button", name="Promote").click()
    link = page.locator("#promoted-link")
    await link.wait_for()
    await expect(cards).to_have_count(0)

    # End to end through the API: the entry exists, authored by bob, a hypothesis, carrying the admin's decision.
    entry_id = (await link.get_attribute("href") or "").removeprefix("#/entry/")
    resp = await client.get(f"/v1/entries/{entry_id}", headers=seeded.alice.headers)
    (entry,) = (await resp.json())["entries"]
    assert entry["author_id"] == seeded.bob.agent_id and entry["truth_state"] == "hypothesis"
    assert entry["content"] == "The kettle cable looks frayed and could be a fire hazard"
    assert entry["metadata"]["default_mode"]["review"]["decided_by"] == "admin"
    resp = await client.get(f"/v1/default-mode/candidates/{ids['approved']}", headers=seeded.alice.headers)
    assert (await resp.json())["status"] == "rejected"

    await b.view("#/candidates?show=rejected", f'#candidate-list article[data-id="{ids["approved"]}"]')
    assert "rejected by admin" in await page.inner_text(f'#candidate-list article[data-id="{ids["approved"]}"]')
    await b.shot("candidates-admin-rejected")
    await b.view("#/candidates?show=promoted", f'#candidate-list article[data-id="{ids["needs_review"]}"]')
    await b.shot("candidates-admin-promoted")
    assert b.errors == []
