"""node.web.background: `periodic` work as aiohttp cleanup contexts (a round at start-up, then one every period; a
failed round logged and the next one tried; stopped with the app), and the two the node runs: the trust refresh
and the notification expiry sweep, each doing its job on a real node."""

from __future__ import annotations

import asyncio
import logging
import sqlite3
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TypeVar

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient

from node.inbox import notify
from node.service import Node
from node.store.conn import ConnectionLost
from node.trust import service as trust
from node.web import background
from node.web.appkeys import NODE
from node.web.background import periodic
from tests.conftest import AgentCreds, FakeClock
from wire.api import LinkSpec, PostEntry

MakeClient = Callable[..., Awaitable[TestClient]]
LOG = logging.getLogger("tests.background")
T = TypeVar("T")


async def until(condition: Callable[[], bool], rounds: int = 1000) -> None:
    for _ in range(rounds):
        if condition():
            return
        await asyncio.sleep(0.005)
    raise AssertionError("the condition never held")


async def eventually(read: Callable[[], Awaitable[T]], holds: Callable[[T], bool], rounds: int = 1000) -> None:
    for _ in range(rounds):
        if holds(await read()):
            return
        await asyncio.sleep(0.005)
    raise AssertionError(f"never held; last value {await read()!r}")


def app_running(node: Node, *contexts: background.CleanupContext) -> web.Application:
    app = web.Application()
    app[NODE] = node
    app.cleanup_ctx.extend(contexts)
    return app


def task_names() -> set[str]:
    return {t.get_name() for t in asyncio.all_tasks()}


async def test_the_first_round_runs_at_start_up(aiohttp_client: MakeClient, node: Node) -> None:
    seen: list[Node] = []

    async def run(n: Node) -> None:
        seen.append(n)

    client = await aiohttp_client(app_running(node, periodic("hourly", 3600, run, LOG)))
    await until(lambda: len(seen) == 1)  # no period waited first
    assert seen[0] is node
    assert "hourly" in task_names()
    await client.close()
    assert "hourly" not in task_names()
    assert len(seen) == 1


async def test_rounds_repeat_every_period(aiohttp_client: MakeClient, node: Node) -> None:
    rounds = 0

    async def run(n: Node) -> int:
        nonlocal rounds
        rounds += 1
        return rounds

    client = await aiohttp_client(app_running(node, periodic("often", 0.001, run, LOG)))
    await until(lambda: rounds >= 3)
    await client.close()


async def test_a_failed_round_is_logged_and_the_next_one_runs(
    aiohttp_client: MakeClient, node: Node, caplog: pytest.LogCaptureFixture
) -> None:
    rounds = 0

    async def run(n: Node) -> None:
        nonlocal rounds
        rounds += 1
        if rounds == 1:
            raise RuntimeError("first round breaks")

    with caplog.at_level(logging.ERROR, logger=LOG.name):
        client = await aiohttp_client(app_running(node, periodic("flaky", 0.001, run, LOG)))
        await until(lambda: rounds >= 3)
        await client.close()
    (record,) = [r for r in caplog.records if r.name == LOG.name]
    assert record.getMessage() == "flaky failed"
    assert record.exc_info is not None and str(record.exc_info[1]) == "first round breaks"


async def test_a_node_closing_underneath_is_not_logged(
    aiohttp_client: MakeClient, node: Node, caplog: pytest.LogCaptureFixture
) -> None:
    """Rounds on a closed node fail (the real database refuses), quietly: the app is shutting down."""
    failures: list[BaseException] = []

    async def run(n: Node) -> None:
        try:
            await n.trust.refresh()
        except Exception as exc:
            failures.append(exc)
            raise

    node.close()
    with caplog.at_level(logging.ERROR, logger=LOG.name):
        client = await aiohttp_client(app_running(node, periodic("closing", 0.001, run, LOG)))
        await until(lambda: len(failures) >= 2)
        await client.close()
    assert not [r for r in caplog.records if r.name == LOG.name]


async def test_a_round_in_progress_is_cancelled_when_the_app_stops(aiohttp_client: MakeClient, node: Node) -> None:
    started, cancelled = asyncio.Event(), asyncio.Event()

    async def run(n: Node) -> None:
        started.set()
        try:
            await asyncio.Event().wait()  # a round that would never end
        except asyncio.CancelledError:
            cancelled.set()
            raise

    client = await aiohttp_client(app_running(node, periodic("stuck", 0.001, run, LOG)))
    await started.wait()
    await client.close()  # returns: the stop does not wait for the round
    assert cancelled.is_set()
    assert "stuck" not in task_names()


async def test_trust_refresh_computes_the_cache(
    aiohttp_client: MakeClient, node: Node, make_agent: Callable[[str], Awaitable[AgentCreds]]
) -> None:
    alice, bob = await make_agent("alice"), await make_agent("bob")
    first, _ = await node.entries.post(alice.agent_id, PostEntry("finding", "inform", "the sky is blue"), None)
    confirm = PostEntry(
        "finding", "confirm", "it is", links=[LinkSpec(target=first.record_hash, link_type="responds_to")]
    )
    await node.entries.post(bob.agent_id, confirm, None)
    assert await node.db.read(trust.computed_seq) == 0
    client = await aiohttp_client(app_running(node, background.trust_refresh))
    await eventually(lambda: node.db.read(trust.computed_seq), lambda seq: seq > 0)
    stored = await node.db.read(lambda c: trust.agent_trust(c, alice.agent_id))
    assert stored.computed_seq > 0 and stored.confirms == 1 and stored.score > trust.NEUTRAL
    await client.close()


async def test_expiry_sweep_marks_expired_notifications(
    aiohttp_client: MakeClient,
    node: Node,
    clock: FakeClock,
    make_agent: Callable[[str], Awaitable[AgentCreds]],
) -> None:
    alice, bob = await make_agent("alice"), await make_agent("bob")
    await node.entries.post(alice.agent_id, PostEntry("finding", "inform", "for bob", directed_to=[bob.agent_id]), None)

    async def status() -> str:
        def run(conn: sqlite3.Connection) -> str:
            row = conn.execute("SELECT status FROM notifications WHERE agent_id = ?", (bob.agent_id,)).fetchone()
            return str(row[0])

        return await node.db.read(run)

    assert await status() == "pending"
    clock.advance(notify.NOTIFICATION_TTL_MS / 1000 + 1)
    client = await aiohttp_client(app_running(node, background.expiry_sweep))
    await eventually(status, lambda value: value == "expired")
    await client.close()


def test_the_sweep_period_is_short_against_the_notification_lifetime() -> None:
    assert 0 < background.EXPIRY_SWEEP_SECONDS * 1000 < notify.NOTIFICATION_TTL_MS / 1000


async def test_leader_work_stops_when_the_app_stops_as_its_term_ends(node: Node) -> None:
    """The app stops in the very loop turn the term ends (the lead lost on PostgreSQL; here the one process's term
    ended by the leadership's stop): `leader_only`'s task is then stopping the work of the term, and the app's stop
    of that task reaches it, where it used to be swallowed by the work's own stop and leave the app's cleanup
    waiting for the next term without end."""
    await node.leadership.start()
    ran = asyncio.Event()

    async def run(n: Node) -> None:
        ran.set()

    gated = background.leader_only(periodic("probe of the term", 60, run, LOG))
    app = app_running(node)
    context = gated(app)
    await anext(context)
    await ran.wait()
    await node.leadership.stop()  # ends the term: the task running the term's work wakes first...
    stopping = asyncio.ensure_future(anext(context, None))  # ...then the app's cleanup reaches this context
    done, _ = await asyncio.wait({stopping}, timeout=5)
    leftover = [t for t in asyncio.all_tasks() if t.get_name().endswith("while leading")]
    for task in leftover:  # a hung run's task, so that the test ends
        task.cancel()
    assert done, "the app's cleanup waited for the leader work's task"
    assert not leftover and "probe of the term" not in task_names()


async def test_leader_work_whose_start_finds_the_store_unavailable_starts_later_in_its_term(
    node: Node, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A term that outlives a database server's restart (the lease renewed just before) starts its work when the
    store answers again, not at the next term: before, work such as the push dispatcher stayed off for the term."""
    monkeypatch.setattr(background, "START_RETRY_S", 0.01)
    await node.leadership.start()
    tries: list[int] = []
    running = asyncio.Event()

    async def flaky(app: web.Application) -> AsyncIterator[None]:
        tries.append(len(tries))
        if len(tries) < 3:
            raise ConnectionLost("server closed the connection unexpectedly")
        running.set()
        yield

    context = background.leader_only(flaky)(app_running(node))
    with caplog.at_level(logging.WARNING, logger="bbs.leader"):
        await asyncio.wait_for(anext(context), 5)  # the app's start does not wait for the store
        await asyncio.wait_for(running.wait(), 5)
        await node.leadership.stop()
        await asyncio.wait_for(anext(context, None), 5)
    assert len(tries) == 3
    unavailable = [r for r in caplog.records if "failed for now" in r.getMessage()]
    assert len(unavailable) == 1 and unavailable[0].exc_info is None  # the second try's is at debug
    assert any("works again, after 2 rounds" in r.getMessage() for r in caplog.records)


async def test_leader_work_whose_start_fails_otherwise_stays_off_for_the_term(
    node: Node, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(background, "START_RETRY_S", 0.01)
    await node.leadership.start()
    tries: list[int] = []

    async def broken(app: web.Application) -> AsyncIterator[None]:
        tries.append(len(tries))
        raise ValueError("a bug")
        yield

    context = background.leader_only(broken)(app_running(node))
    with caplog.at_level(logging.WARNING, logger="bbs.leader"):
        await asyncio.wait_for(anext(context), 5)
        await asyncio.sleep(0.1)
        await node.leadership.stop()
        await asyncio.wait_for(anext(context, None), 5)
    assert tries == [0]
    assert [r.exc_info is not None for r in caplog.records if "could not start" in r.getMessage()] == [True]


async def test_leader_work_waiting_to_start_again_stops_when_the_app_stops_as_its_term_ends(
    node: Node, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The term ends (its lease lost in the same outage) and the app stops in one loop turn while the work waits to
    try its start again: the app's stop reaches it, where a wait that swallowed it left the cleanup waiting for the
    next term without end."""
    monkeypatch.setattr(background, "START_RETRY_S", 30.0)
    await node.leadership.start()

    async def down(app: web.Application) -> AsyncIterator[None]:
        raise ConnectionLost("server closed the connection unexpectedly")
        yield

    context = background.leader_only(down)(app_running(node))
    await anext(context)
    await asyncio.sleep(0.05)  # the task running the terms waits to try again
    await node.leadership.stop()  # ends the term: the waiting task wakes first...
    stopping = asyncio.ensure_future(anext(context, None))  # ...then the app's cleanup reaches this context
    done, _ = await asyncio.wait({stopping}, timeout=5)
    leftover = [t for t in asyncio.all_tasks() if t.get_name().endswith("while leading")]
    for task in leftover:
        task.cancel()
    assert done, "the app's cleanup waited for the leader work's task"
    assert not leftover
