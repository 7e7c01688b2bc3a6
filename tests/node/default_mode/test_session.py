"""Reflecting a session from what it produced: the bus messages of a project and the entries tagged
`session:<id>`, through a real server. A line is never a duplicate of its own source."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp.test_utils import TestClient

from tests.conftest import AgentCreds, FakeClock

MakeAgent = Callable[[str], Awaitable[AgentCreds]]
DM = "/v1/default-mode"
BUS = "/v1/agent-workflows/messages"

# A household meeting about backups, as the agents said it on the bus: (speaker, line, the class it keeps).
MEETING: list[tuple[str, str, str | None]] = [
    ("alice", "Morning all, sorry I'm a couple of minutes late.", None),
    ("bob", "We decided to move the backups to the NAS in the hall cupboard.", "decision"),
    ("alice", "Who has the admin password for the NAS?", "open_question"),
    ("bob", "TODO next: restore one folder from the NAS before we wipe the old drive.", "open_loop"),
    ("alice", "Dana prefers nightly backups because the hourly ones wake her up.", "preference"),
    ("bob", "The backups hold the kids' school reports, so there is a privacy risk if the NAS is open.", "risk"),
    ("alice", "Anyway, did anyone watch the match last night?", None),
    ("bob", "Lovely weather for the weekend, apparently.", None),
]


async def _send(client: TestClient, who: AgentCreds, body: str, project: str = "backups") -> dict[str, Any]:
    resp = await client.post(BUS, json={"message_type": "chat", "body": body, "project": project}, headers=who.headers)
    assert resp.status == 201, await resp.text()
    return dict(await resp.json())


async def _reflect(client: TestClient, who: AgentCreds, body: dict[str, Any], status: int = 201) -> dict[str, Any]:
    resp = await client.post(f"{DM}/reflect-session", json=body, headers=who.headers)
    assert resp.status == status, await resp.text()
    return dict(await resp.json())


async def test_a_meeting_on_the_bus_keeps_what_matters(client: TestClient, make_agent: MakeAgent) -> None:
    people = {"alice": await make_agent("alice"), "bob": await make_agent("bob")}
    sent = {line: await _send(client, people[who], line) for who, line, _ in MEETING}
    await _send(client, people["bob"], "We decided to paint the shed green.", project="garden")  # another project
    out = await _reflect(client, people["alice"], {"project": "backups"})
    kept = {c["text"]: c for c in out["candidates"]}
    assert {t: c["kind"] for t, c in kept.items()} == {line: kind for _, line, kind in MEETING if kind}
    for text, cand in kept.items():
        assert cand["evidence_refs"] == [sent[text]["record_hash"]]  # the message it came from
        assert cand["payload"]["project"] == "backups" and cand["payload"]["source_ref"] == sent[text]["record_hash"]
        # evidenced lines are approved; the risk waits for a person
        assert cand["status"] == ("needs_review" if cand["kind"] == "risk" else "approved"), cand
    assert out["lines_scored"] == len(MEETING) and out["dropped"] == 3


async def test_entries_and_messages_of_a_session_between_two_times(
    client: TestClient, make_agent: MakeAgent, clock: FakeClock
) -> None:
    alice = await make_agent("alice")
    await _send(client, alice, "We decided to keep the old router as a spare.")  # before the window
    clock.advance(60)
    start = await _send(client, alice, "TODO next: order a new UPS for the NAS.")
    clock.advance(1)
    entry_resp = await client.post(
        "/v1/entries",
        json={"entry_type": "finding", "performative": "inform", "content": "Bob prefers the quiet UPS model.",
              "tags": ["session:s9"]},
        headers=alice.headers,
    )  # fmt: skip
    entry = await entry_resp.json()
    clock.advance(60)
    await _send(client, alice, "We decided to buy two UPS units.")  # after the window
    window = {"project": "backups", "session_id": "s9", "since": start["created_at"], "until": entry["created_at"]}
    out = await _reflect(client, alice, window)
    assert [c["text"] for c in out["candidates"]] == [
        "TODO next: order a new UPS for the NAS.",
        "Bob prefers the quiet UPS model.",
    ]
    # the entry's line is its own content: approved, not a duplicate of the entry it came from
    pref = out["candidates"][1]
    assert pref["status"] == "approved" and pref["evidence_refs"] == [entry["record_hash"]]
    resp = await client.post(f"{DM}/promote/{pref['id']}", headers=alice.headers)
    assert resp.status == 201, await resp.text()


async def test_a_line_already_posted_elsewhere_is_still_a_duplicate(client: TestClient, make_agent: MakeAgent) -> None:
    alice = await make_agent("alice")
    line = "We decided to move the backups to the NAS in the hall cupboard."
    await client.post("/v1/entries", json={"entry_type": "finding", "performative": "inform", "content": line},
                      headers=alice.headers)  # fmt: skip
    await _send(client, alice, line)
    (cand,) = (await _reflect(client, alice, {"project": "backups"}))["candidates"]
    assert cand["status"] == "rejected" and "duplicate_of_entry" in cand["critic_reasons"]


async def test_bad_session_requests_store_nothing(client: TestClient, make_agent: MakeAgent) -> None:
    alice = await make_agent("alice")
    await _send(client, alice, "We decided to move the backups.")
    cases: list[tuple[dict[str, Any], int, str, str]] = [
        ({}, 422, "transcript_or_session", "$.transcript"),
        ({"transcript": "We decided it", "project": "backups"}, 422, "transcript_or_session", "$.transcript"),
        ({"transcript": "We decided it", "since": "2026-01-01T00:00:00Z"}, 422, "transcript_or_session", "$.since"),
        ({"project": "backups", "since": "yesterday"}, 422, "validation_error", "$.since"),
        ({"project": "backups", "until": "2026-01-01T00:00:00"}, 422, "validation_error", "$.until"),
        ({"project": "backups", "since": "2026-02-01T00:00:00Z", "until": "2026-01-01T00:00:00Z"}, 422,
         "invalid_range", "$.until"),
        ({"project": "nothing-here"}, 404, "session_not_found", "$.project"),
        ({"project": ""}, 422, "validation_error", "$.project"),
    ]  # fmt: skip
    for body, status, code, field in cases:
        problem = await _reflect(client, alice, body, status)
        assert (problem["code"], problem["field"]) == (code, field), (body, problem)
    listed = await (await client.get(f"{DM}/candidates", headers=alice.headers)).json()
    assert listed["candidates"] == []
