"""The dashboard in headless Chromium against a real node on a loopback port: every view with real data."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from playwright.async_api import expect

from node.service import Node
from tests.node.dashboard.conftest import PHONE, Browser, Seeded, seed_workflows
from wire.api import PostEntry

OpenBrowser = Callable[..., Awaitable[Browser]]


async def test_views_load_with_real_data(
    open_browser: OpenBrowser, seeded: Seeded, data_dir: tuple[object, str]
) -> None:
    b = await open_browser()
    await b.sign_in(data_dir[1])
    page = b.page

    await b.view("#/feed", "#feed-list article.entry")
    assert await page.locator("#feed-list article.entry").count() == 9  # the simulated entry is hidden
    wrong = page.locator(f'article[data-id="{seeded.ids["wrong"]}"]')
    assert await wrong.locator(".flag-retracted").count() == 1
    assert await page.locator(f'article[data-id="{seeded.ids["old"]}"] .flag-superseded').count() == 1
    assert await page.locator(f'article[data-id="{seeded.ids["question"]}"] .truth-hypothesis').count() == 1
    assert "Alice" in await page.locator(f'article[data-id="{seeded.ids["root"]}"] .author').inner_text()
    await b.shot("feed")

    await b.view(f"#/entry/{seeded.ids['root']}?hops=1", "#graph svg g.node")
    assert await page.locator("#graph svg g.node").count() == 6  # root and its five linked entries
    assert await page.locator("#graph svg path.edge").count() == 5
    assert await page.locator('#graph svg path.edge[data-type="contradicts"]').count() == 2
    assert await page.locator("#graph svg g.node.retracted").count() == 1
    assert "valid" in await page.locator("dl.prov").inner_text()
    assert await page.locator("table tr.link").count() == 5
    await b.shot("entry")

    await page.select_option("#hops", "2")
    await expect(page.locator("#graph svg g.node")).to_have_count(9)
    assert await page.locator('#graph svg path.edge[data-type="retracted_by"]').count() == 1
    await b.shot("entry-2-hops")
    await page.select_option("#link-type", "supports")  # only the chain of support: root <- #4 <- #12
    await expect(page.locator("#graph svg g.node")).to_have_count(3)
    assert await page.locator("#graph svg path.edge").count() == 2

    await b.view("#/search?q=kettle&entry_type=finding", "#results article.entry")
    contents = await page.locator("#results .content").all_inner_texts()
    assert contents and all("kettle" in c.lower() for c in contents)
    assert await page.locator('input[name="entry_type"][value="finding"]').is_checked()
    await b.shot("search")

    await b.view("#/agents", "#agents tbody tr")
    rows = await page.locator("#agents tbody tr").all_inner_texts()
    assert len(rows) == 2 and any("Alice" in r for r in rows) and any("Bob" in r for r in rows)
    await b.shot("agents")

    # a simulation entry is hidden from the feed, but its own view shows it (it was a blank page)
    await b.view(f"#/entry/{seeded.ids['sim']}", "dl.prov")
    assert "kettle in space" in await page.locator("main").inner_text()
    for name in ("__proto__", "constructor", "toString"):  # names an object inherits are not views
        await b.view(f"#/{name}", "main h1")
        assert await page.locator("main h1").inner_text() == "Not found"
    assert b.errors == []


async def test_feed_updates_without_reload(
    open_browser: OpenBrowser, seeded: Seeded, node: Node, data_dir: tuple[object, str]
) -> None:
    b = await open_browser()
    await b.sign_in(seeded.alice.api_key)
    await b.view("#/feed", "#feed-list article.entry")
    assert await b.page.evaluate("document.getElementById('who').textContent") == "Alice"
    await b.page.evaluate("window.__marker = 1")  # survives only if the page is never reloaded
    entry, _ = await node.entries.post(
        seeded.bob.agent_id, PostEntry(entry_type="finding", performative="inform", content="A brand new finding"), None
    )
    fresh = b.page.locator(f'#feed-list article.entry.fresh[data-id="{entry.id}"]')
    await fresh.wait_for()
    assert await b.page.evaluate("window.__marker") == 1
    assert b.errors == []


async def test_phone_width_and_keyboard(
    open_browser: OpenBrowser, seeded: Seeded, data_dir: tuple[object, str]
) -> None:
    b = await open_browser(viewport=PHONE)
    page = b.page
    await page.goto(b.base + "/")
    await page.wait_for_selector("#key")
    # Keyboard only: the key field has focus, Enter submits.
    await page.keyboard.type(data_dir[1])
    await page.keyboard.press("Enter")
    await page.wait_for_selector("#feed-list article.entry")
    assert await page.evaluate("document.documentElement.scrollWidth") <= PHONE["width"]
    await b.shot("phone-feed")
    # Tab to the graph's first node link and follow it with Enter.
    await b.view(f"#/entry/{seeded.ids['root']}", "#graph svg g.node")
    assert await page.evaluate("document.documentElement.scrollWidth") <= PHONE["width"]
    await b.shot("phone-entry")
    for _ in range(60):
        await page.keyboard.press("Tab")
        if await page.evaluate("document.activeElement.closest('#graph svg') !== null"):
            break
    else:
        raise AssertionError("no graph node is reachable with Tab")
    target = await page.evaluate("document.activeElement.getAttribute('href')")
    await page.keyboard.press("Enter")
    await page.wait_for_selector("#graph svg g.node.focus")
    await expect(page.locator("h1")).to_have_text(f"Entry #{target.removeprefix('#/entry/')}")
    assert b.errors == []


async def test_bad_key_is_refused(open_browser: OpenBrowser, seeded: Seeded) -> None:
    b = await open_browser(allow_errors=True)  # the refused request is logged by Chromium as a failed load
    await b.page.goto(b.base + "/")
    await b.page.fill("#key", "bbs_0000000000000000_wrong")
    await b.page.press("#key", "Enter")
    await b.page.wait_for_selector("#status.error")
    assert "not accepted" in await b.page.inner_text("#status") or "unknown" in await b.page.inner_text("#status")
    assert await b.page.is_hidden("#nav")
    assert await b.page.evaluate("sessionStorage.getItem('bbs.key')") is None
    assert [e for e in b.errors if "pageerror" in e] == []


async def test_tasks_and_bus_views(
    open_browser: OpenBrowser, seeded: Seeded, node: Node, data_dir: tuple[object, str]
) -> None:
    await seed_workflows(node, seeded.alice, seeded.bob)
    b = await open_browser()
    await b.sign_in(seeded.bob.api_key)
    page = b.page
    await b.view("#/tasks", "#task-graph svg g.node")
    assert await page.locator("#task-graph svg g.node").count() == 6  # five tasks and the undeclared 'legal'
    assert await page.locator("#task-graph svg path.edge").count() == 5
    for key, state in [("design", "done"), ("build", "leased"), ("docs", "ready"), ("test", "blocked")]:
        assert await page.locator(f'#task-graph svg g.node.task-{state}[data-key="{key}"]').count() == 1
    build = await page.locator('#tasks tr[data-key="build"]').inner_text()
    assert "Bob" in build and "UTC" in build  # holder and lease expiry
    # The DAG is layered: each task is drawn right of every task it depends on.
    xs = {}
    for key in ("design", "build", "test", "ship"):
        transform = await page.locator(f'#task-graph svg g.node[data-key="{key}"]').get_attribute("transform")
        xs[key] = float(transform.split("(")[1].split(",")[0])
    assert xs["design"] < xs["build"] < xs["test"] < xs["ship"]
    await b.shot("tasks")

    # Live: a lease taken elsewhere shows up without a reload.
    from wire.workflows import LeaseIn

    await node.workflows.lease(seeded.alice.agent_id, "docs", LeaseIn(seconds=600))
    await page.locator('#task-graph svg g.node.task-leased[data-key="docs"]').wait_for()

    await b.view("#/bus", "#bus-list article.message")
    assert await page.locator("#bus-list article.message").count() == 3
    await page.get_by_role("link", name="kettle (2)").click()
    await expect(page.locator("#bus-list article.message")).to_have_count(2)
    assert "Alice" in await page.locator("#bus-list").inner_text()
    await b.shot("bus")
    assert b.errors == []


async def test_peers_view_shows_cursor_lag_counters_and_digest(open_browser: OpenBrowser, make_peer: Any) -> None:
    a, b_node = await make_peer("a"), await make_peer("b")
    await a.add_peer(b_node)
    await b_node.add_peer(a)
    writer = await b_node.agent("writer")
    for i in range(3):
        await b_node.post(writer, f"federated finding {i}")
    await a.puller().pull_once(b_node.config)
    count, sha = await a.digest()
    assert (count, sha) == await b_node.digest()

    browser = await open_browser(base=a.url)
    await browser.sign_in(a.token)
    page = browser.page
    await browser.view("#/peers", "#peers tbody tr")
    row = await page.locator("#peers tbody tr").inner_text()
    assert "4 saved" in row and "0 invalid" in row  # the agent document and three entries
    assert "4 of 4" in row and "0 records" in row  # cursor at the peer's head, no lag
    assert await page.locator("#my-digest").inner_text() == sha
    await page.get_by_role("button", name="Check").click()
    await expect(page.locator("#peers .agreement .ok")).to_contain_text("in agreement")

    # Diverge: a writes two records (an agent document and an entry) that b has not pulled yet.
    await a.post(await a.agent("local-writer"), "only on a so far")
    await page.get_by_role("button", name="Check").click()
    await expect(page.locator("#peers .agreement .bad")).to_contain_text(
        "this node lacked 0 (fetched 0), the peer lacks 2"
    )
    await browser.shot("peers")
    assert browser.errors == []


async def test_agent_text_is_bidi_isolated(open_browser: OpenBrowser, node: Node, data_dir: tuple[object, str]) -> None:
    """A right-to-left override in a display name or tag stays inside it (bylines read backwards before)."""
    created = await node.agents.create("mallory", "mallory\u202e evil")
    await node.entries.post(created.agent_id, PostEntry("finding", "inform", "a note", tags=["t\u202eag"]), None)
    b = await open_browser()
    await b.sign_in(data_dir[1])
    await b.view("#/feed", "#feed-list article.entry")
    author = await b.page.locator("#feed-list article.entry .author").first.inner_text()
    tag = await b.page.locator("#feed-list article.entry .tag").first.inner_text()
    assert author == "\u2068mallory\u202e evil\u2069"
    assert tag == "#\u2068t\u202eag\u2069"
    assert b.errors == []


async def test_push_view_shows_each_endpoint_and_its_failures(
    open_browser: OpenBrowser, node: Node, data_dir: tuple[object, str], client: Any
) -> None:
    """The admin sees every agent's push endpoints with their tiers and breaker state."""
    created = await node.agents.create("hooked", "Hooked")
    headers = {"Authorization": f"Bearer {created.api_key}"}
    resp = await client.post("/v1/push/endpoints", json={"url": "http://127.0.0.1:10/hook"}, headers=headers)
    endpoint = await resp.json()
    b = await open_browser()
    await b.sign_in(data_dir[1])
    await b.view("#/push", "#push tbody tr")
    row = await b.page.locator("#push tbody tr").inner_text()
    assert "http://127.0.0.1:10/hook" in row and "Hooked" in row and "closed" in row and "tier 1" in row
    assert endpoint["state"]["breaker"] == "closed"
    await b.shot("push")
    assert b.errors == []


async def test_purges_view_lists_what_the_operator_removed(
    open_browser: OpenBrowser, node: Node, data_dir: tuple[object, str]
) -> None:
    """The admin sees the purged records (kind, author, reason, versions) and the counts `bbs doctor` shows."""
    created = await node.agents.create("spammer", "Spammer")
    entry, _ = await node.entries.post(created.agent_id, PostEntry("finding", "inform", "buy now"), None)
    await node.redactions.purge(entry.record_hash, None, "abuse")
    b = await open_browser()
    await b.sign_in(data_dir[1])
    await b.view("#/purges", "#purges tbody tr")
    row = await b.page.locator("#purges tbody tr").inner_text()
    assert "entry" in row and "Spammer" in row and "abuse" in row
    assert await b.page.locator("#purged-total").inner_text() == "1 records of 1 authors"
    assert "buy now" not in await b.page.locator("main").inner_text()
    await b.shot("purges")
    assert b.errors == []


async def test_an_agents_key_history_after_a_rotation_and_a_revocation(
    open_browser: OpenBrowser, client: Any, seeded: Seeded, admin_headers: dict[str, str], data_dir: tuple[object, str]
) -> None:
    alice = seeded.alice.agent_id
    for path in (f"/v1/agents/{alice}/signing-key", f"/v1/agents/{alice}/revocation"):
        resp = await client.post(path, json={}, headers=admin_headers)
        assert resp.status == 201, await resp.text()
    current = (await (await client.get(f"/v1/agents/{alice}", headers=admin_headers)).json())["key_history"]
    b = await open_browser()
    await b.sign_in(data_dir[1])
    await b.view("#/agents", "#agents tbody tr")
    await b.page.locator("#agents tbody tr", has_text="Alice").get_by_role("link", name="keys").click()
    await b.page.wait_for_selector("#key-events tbody tr")
    rows = await b.page.locator("#key-events tbody tr").all_inner_texts()
    assert len(rows) == 2
    assert rows[0].split("\t")[:2] == ["1", "rotate"] and "current" in rows[0]
    assert rows[1].split("\t")[:2] == ["2", "revoke"] and "recovery" in rows[1]
    facts = await b.page.locator("#agent-keys").inner_text()
    assert current["current_key"] in facts and current["recovery"] in facts
    assert "Void records\n0" in facts
    await b.shot("agent-keys")
    assert b.errors == []


async def test_spaces_and_a_spaces_members(
    open_browser: OpenBrowser, client: Any, seeded: Seeded, data_dir: tuple[object, str]
) -> None:
    """An agent's spaces, then one space's members by a click; the admin sees the space with role `operator`."""
    alice, bob = seeded.alice, seeded.bob
    resp = await client.post("/v1/spaces", json={"name": "Family notes", "description": "home"}, headers=alice.headers)
    assert resp.status == 201, await resp.text()
    space = (await resp.json())["space_id"]
    resp = await client.post(
        f"/v1/spaces/{space}/members", json={"agent_id": bob.agent_id, "role": "writer"}, headers=alice.headers
    )
    assert resp.status == 201, await resp.text()
    body = {"entry_type": "finding", "performative": "inform", "content": "the attic key", "space": space}
    resp = await client.post("/v1/entries", json=body, headers=alice.headers)
    assert resp.status == 201, await resp.text()
    b = await open_browser()
    await b.sign_in(bob.api_key)
    await b.view("#/spaces", "#spaces tbody tr")
    row = await b.page.locator("#spaces tbody tr").inner_text()
    assert "Family notes" in row and "writer" in row and "Alice" in row
    await b.page.get_by_role("link", name="Family notes").click()
    await b.page.wait_for_selector("#space-members tbody tr")
    members = await b.page.locator("#space-members tbody tr").all_inner_texts()
    names = sorted(m.split("\n")[0].split("\t")[0].strip("\u2068\u2069") for m in members)  # bidi-isolated
    assert names == ["Alice", "Bob"]
    assert any("owner" in m and "Alice" in m for m in members) and any("writer" in m and "Bob" in m for m in members)
    assert "the attic key" in await b.page.locator("#space-entries").inner_text()  # its recent entries
    await b.shot("space")
    await b.view(f"#/search?space={space}", "#results")  # the space picker narrows a search to the space
    assert await b.page.locator("select[name=space]").input_value() == space
    assert "the attic key" in await b.page.locator("#results").inner_text()
    # the space's task on the task board: drawn as key@<space>, its row says which space
    resp = await client.post("/v1/agent-workflows/tasks", json={"key": "chore", "space": space}, headers=alice.headers)
    assert resp.status == 201, await resp.text()
    await b.view("#/tasks", f'#task-graph svg g.node[data-key="chore@{space[:12]}"]')
    assert f"in space {space[:12]}" in await b.page.locator('#tasks tr[data-key="chore"]').inner_text()
    admin = await open_browser()
    await admin.sign_in(data_dir[1])
    await admin.view("#/spaces", "#spaces tbody tr")
    assert "operator" in await admin.page.locator("#spaces tbody tr").inner_text()
    assert b.errors == [] and admin.errors == []


async def test_a_redacted_entry_shows_as_a_tombstone_and_links_to_it_say_so(
    open_browser: OpenBrowser, client: Any, seeded: Seeded
) -> None:
    alice, bob = seeded.alice, seeded.bob
    body = {"entry_type": "finding", "performative": "inform", "content": "the alarm code is 4711"}
    resp = await client.post("/v1/entries", json=body, headers=alice.headers)
    assert resp.status == 201, await resp.text()
    leaked = await resp.json()
    reply = {**body, "content": "noted", "links": [{"target": leaked["record_hash"], "link_type": "responds_to"}]}
    resp = await client.post("/v1/entries", json=reply, headers=bob.headers)
    assert resp.status == 201, await resp.text()
    answer = await resp.json()
    resp = await client.post("/v1/redactions", json={"target": leaked["record_hash"]}, headers=alice.headers)
    assert resp.status == 201, await resp.text()
    b = await open_browser()
    await b.sign_in(bob.api_key)
    await b.view(f"#/entry/{leaked['record_hash']}", "article.tombstone")
    shown = await b.page.locator("main").inner_text()
    assert "Redacted entry" in shown and "Alice" in shown and "4711" not in shown
    await b.shot("tombstone")
    await b.view(f"#/entry/{answer['id']}", "table tr.link")
    assert await b.page.locator("table tr.link a.redacted").count() == 1
    assert b.errors == []
