"""Quick reads: answered on the event loop within the inline budget, moved to a reader thread past it."""

from __future__ import annotations

import signal
import sqlite3
import threading
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from aiohttp.test_utils import TestClient

from node.db import Database
from node.errors import NotFound, Unavailable
from node.queries import HeavyWords
from node.service import Node

# A statement that runs far longer than any inline budget (about a second of SQLite work).
LONG_SQL = "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 3000000) SELECT count(*) FROM n"


@pytest.fixture
async def database(tmp_path: Path) -> AsyncIterator[Database]:
    db = Database(tmp_path / "quick.db")
    db.open()
    await db.write(lambda c: c.execute("CREATE TABLE t (v INTEGER)"))
    yield db
    db.close()


async def test_a_quick_read_runs_on_the_event_loop_thread(database: Database) -> None:
    await database.write(lambda c: c.execute("INSERT INTO t VALUES (7)"))
    ran_on: list[threading.Thread] = []

    def fn(conn: sqlite3.Connection) -> int:
        ran_on.append(threading.current_thread())
        return int(conn.execute("SELECT v FROM t").fetchone()[0])

    assert await database.read(fn, quick=True) == 7  # sees the write committed before it
    assert ran_on == [threading.current_thread()]
    assert (database.read_stats.inline, database.read_stats.moved) == (1, 0)


async def test_a_read_not_marked_quick_runs_on_a_reader_thread(database: Database) -> None:
    ran_on: list[str] = []
    await database.read(lambda c: ran_on.append(threading.current_thread().name))
    assert ran_on[0].startswith("bbs-read")
    assert database.read_stats.inline == 0


async def test_a_quick_read_over_budget_is_stopped_and_run_again_on_a_reader_thread(database: Database) -> None:
    ran_on: list[str] = []

    def fn(conn: sqlite3.Connection) -> int:
        ran_on.append(threading.current_thread().name)
        return int(conn.execute(LONG_SQL).fetchone()[0])

    assert await database.read(fn, quick=True) == 3000000
    assert ran_on[0] == threading.current_thread().name and ran_on[1].startswith("bbs-read")
    assert (database.read_stats.inline, database.read_stats.moved) == (0, 1)
    # the loop's connection is usable again, with a fresh budget
    assert await database.read(lambda c: c.execute("SELECT 1").fetchone()[0], quick=True) == 1
    assert database.read_stats.inline == 1


async def test_a_budget_run_out_after_the_last_select_never_stops_the_end_of_the_read(database: Database) -> None:
    """The progress handler also runs inside the statement that ends a read (SQLite counts a cached statement's
    steps across runs, so about one run in 300 of a three-step ROLLBACK crosses the check interval). A read whose
    budget ran out in Python after its last SELECT must still end cleanly and answer from the loop: a stopped
    ROLLBACK would leave the loop's connection inside a transaction and fail every later quick read."""
    database.inline_budget_s = 0.0001

    def fn(conn: sqlite3.Connection) -> int:
        value = int(conn.execute("SELECT 1").fetchone()[0])
        time.sleep(0.0002)  # past the deadline, outside SQLite: nothing stops this part
        return value

    for _ in range(700):
        assert await database.read(fn, quick=True) == 1
    assert (database.read_stats.inline, database.read_stats.moved) == (700, 0)
    assert await database.read(lambda c: c.in_transaction, quick=True) is True  # a fresh transaction of its own


async def test_an_answer_made_after_catching_the_interruption_is_discarded(database: Database) -> None:
    def fn(conn: sqlite3.Connection) -> int:
        try:
            return int(conn.execute(LONG_SQL).fetchone()[0])
        except sqlite3.OperationalError:
            return -1  # a partial answer: must never reach the caller

    assert await database.read(fn, quick=True) == 3000000
    assert database.read_stats.moved == 1


async def test_an_interruption_turned_into_another_error_still_moves_the_read(database: Database) -> None:
    def fn(conn: sqlite3.Connection) -> int:
        try:
            return int(conn.execute(LONG_SQL).fetchone()[0])
        except sqlite3.OperationalError:
            raise NotFound("gone") from None

    assert await database.read(fn, quick=True) == 3000000
    assert database.read_stats.moved == 1


async def test_an_error_of_the_read_itself_reaches_the_caller_once(database: Database) -> None:
    calls: list[str] = []

    def fn(conn: sqlite3.Connection) -> None:
        calls.append(threading.current_thread().name)
        raise NotFound("no such thing", code="entry_not_found")

    with pytest.raises(NotFound):
        await database.read(fn, quick=True)
    assert len(calls) == 1 and database.read_stats.moved == 0
    with pytest.raises(sqlite3.OperationalError, match="no such table"):
        await database.read(lambda c: c.execute("SELECT * FROM missing"), quick=True)
    assert database.read_stats.moved == 0


async def test_a_database_closed_and_opened_again_reads_on_fresh_connections(database: Database) -> None:
    assert await database.read(lambda c: 1, quick=True) == 1
    assert await database.read(lambda c: 2) == 2
    database.close()
    for quick in (True, False):
        with pytest.raises(Unavailable):
            await database.read(lambda c: 3, quick=quick)
    database.open()
    assert await database.read(lambda c: c.execute("SELECT count(*) FROM t").fetchone()[0], quick=True) == 0
    assert await database.read(lambda c: c.execute("SELECT count(*) FROM t").fetchone()[0]) == 0


async def test_an_error_made_by_hand_reaches_the_caller_unchanged(database: Database) -> None:
    def fn(conn: sqlite3.Connection) -> None:
        raise sqlite3.OperationalError("made by fn")  # no sqlite_errorcode attribute

    with pytest.raises(sqlite3.OperationalError, match="made by fn"):
        await database.read(fn, quick=True)


async def test_a_keyboard_interrupt_is_never_turned_into_a_moved_read(database: Database) -> None:
    """Raised by fn once the budget has run out: it goes up, the read does not quietly run again."""

    def fn(conn: sqlite3.Connection) -> int:
        try:
            return int(conn.execute(LONG_SQL).fetchone()[0])
        except sqlite3.OperationalError:
            raise KeyboardInterrupt from None

    with pytest.raises(KeyboardInterrupt):
        await database.read(fn, quick=True)
    assert database.read_stats.moved == 0
    assert await database.read(lambda c: c.in_transaction, quick=True) is True  # the connection is clean


async def test_a_signal_that_raises_during_the_sql_fails_the_read_cleanly(database: Database) -> None:
    """Python runs a signal handler during a long statement inside the progress handler, where sqlite3 prints and
    drops what it raised: the read fails as interrupted (it is not moved: the budget did not run out), and the
    loop's connection is left clean. `bbs serve` takes its signals through the event loop instead."""
    database.inline_budget_s = 60.0  # the statement runs on; only the signal stops it

    def on_alarm(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGALRM, on_alarm)
    try:
        signal.setitimer(signal.ITIMER_REAL, 0.05)
        with pytest.raises((KeyboardInterrupt, sqlite3.OperationalError)):
            await database.read(lambda c: c.execute(LONG_SQL).fetchone()[0], quick=True)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    assert database.read_stats.moved == 0
    assert await database.read(lambda c: c.in_transaction, quick=True) is True


async def test_a_zero_budget_sends_every_read_to_a_reader_thread(tmp_path: Path) -> None:
    db = Database(tmp_path / "zero.db", inline_budget_s=0)
    db.open()
    try:
        name = await db.read(lambda c: threading.current_thread().name, quick=True)
        assert name.startswith("bbs-read") and db.read_stats.inline == 0
    finally:
        db.close()


async def test_a_busy_database_moves_the_read_instead_of_blocking_the_loop(database: Database) -> None:
    """SQLITE_BUSY on the loop's connection (busy_timeout 0 there: it never sleeps) moves the read to a reader
    thread, which waits for the lock with its normal busy timeout. The loop thread's attempt is told busy here:
    a WAL database gives a reader SQLITE_BUSY only in rare moments (recovery) that a test cannot arrange."""
    loop_thread = threading.current_thread()

    def fn(conn: sqlite3.Connection) -> str:
        if threading.current_thread() is loop_thread:
            busy = sqlite3.OperationalError("database is locked")
            busy.sqlite_errorcode = sqlite3.SQLITE_BUSY
            raise busy
        return threading.current_thread().name

    assert (await database.read(fn, quick=True)).startswith("bbs-read")
    assert database.read_stats.moved == 1
    assert await database.read(lambda c: c.execute("PRAGMA busy_timeout").fetchone()[0], quick=True) == 0


async def test_search_and_read_over_http_are_answered_inline(
    client: TestClient,
    make_agent,
    admin_headers: dict[str, str],  # type: ignore[no-untyped-def]
) -> None:
    agent = await make_agent("quick")
    posted = await client.post(
        "/v1/entries",
        json={"entry_type": "finding", "performative": "inform", "content": "zeppelins float on hydrogen"},
        headers=agent.headers,
    )
    assert posted.status == 201
    entry_id = (await posted.json())["id"]
    found = await client.get("/v1/search", params={"q": "zeppelins"}, headers=agent.headers)
    assert [e["id"] for e in (await found.json())["entries"]] == [entry_id]
    read = await client.get(f"/v1/entries/{entry_id}", headers=agent.headers)
    assert (await read.json())["entries"][0]["content"] == "zeppelins float on hydrogen"
    metrics = await (await client.get("/metrics", headers=admin_headers)).text()
    inline = next(line for line in metrics.splitlines() if line.startswith("bbs_reads_inline_total "))
    assert float(inline.split()[1]) >= 2
    assert "bbs_reads_moved_total 0.0" in metrics


def test_heavy_words_are_remembered_in_any_case_and_the_oldest_forgotten_first() -> None:
    heavy = HeavyWords(size=2, strikes=1)
    heavy.observe(["Kernel"], overran=True)
    assert heavy.any_of(["the", "KERNEL"]) and not heavy.any_of(["zeppelin"])
    heavy.observe(["alpha"], overran=True)
    assert heavy.any_of(["kernel"])  # seen again: now the newest
    heavy.observe(["beta"], overran=True)  # over the size: the least recently seen (alpha) goes
    assert heavy.any_of(["kernel"]) and heavy.any_of(["beta"]) and not heavy.any_of(["alpha"])


def test_a_word_is_remembered_only_after_overruns_in_a_row() -> None:
    heavy = HeavyWords()  # two strikes
    heavy.observe(["zeppelin", "Kernel"], overran=True)  # e.g. the first search on a cold connection
    assert not heavy.any_of(["zeppelin"]) and not heavy.any_of(["kernel"])
    heavy.observe(["ZEPPELIN"], overran=False)  # within the budget: no longer a suspect
    heavy.observe(["zeppelin", "kernel"], overran=True)
    assert not heavy.any_of(["zeppelin"])  # one overrun in a row again
    assert heavy.any_of(["kernel"])  # the second in a row
    heavy.observe(["zeppelin"], overran=True)
    assert heavy.any_of(["zeppelin"])


def test_suspects_are_bounded_like_the_remembered_words() -> None:
    heavy = HeavyWords(size=2)
    for word in ("a", "b", "c"):  # one overrun each: c pushes a out of the suspects
        heavy.observe([word], overran=True)
    for word in ("c", "b", "a"):  # a second overrun: remembered, but a starts again from one
        heavy.observe([word], overran=True)
    assert not heavy.any_of(["a"]) and heavy.any_of(["b"]) and heavy.any_of(["c"])


async def test_a_search_that_held_the_loop_too_long_sends_its_words_to_the_reader_threads(
    client: TestClient,
    node: Node,
    make_agent,  # type: ignore[no-untyped-def]
) -> None:
    agent = await make_agent("words")
    for content in ("alpha beta", "gamma delta"):
        posted = await client.post(
            "/v1/entries",
            json={"entry_type": "finding", "performative": "inform", "content": content},
            headers=agent.headers,
        )
        assert posted.status == 201

    async def search(q: str) -> tuple[list[str], int, int]:
        before = (node.db.read_stats.inline, node.db.read_stats.moved)
        found = await client.get("/v1/search", params={"q": q}, headers=agent.headers)
        assert found.status == 200
        after = (node.db.read_stats.inline, node.db.read_stats.moved)
        return [e["content"] for e in (await found.json())["entries"]], after[0] - before[0], after[1] - before[1]

    assert await search("alpha") == (["alpha beta"], 1, 0)  # on the loop, within the budget
    node.db.inline_budget_s = 1e-9  # every search now outlasts the budget: twice in a row, its words are remembered
    for q in ("Beta", "beta"):
        contents, inline, moved = await search(q)
        assert contents == ["alpha beta"] and inline + moved == 1
    node.db.inline_budget_s = 1.0
    assert await search("BETA") == (["alpha beta"], 0, 0)  # a remembered word: straight to a reader thread
    assert await search("alpha beta") == (["alpha beta"], 0, 0)
    assert await search("gamma") == (["gamma delta"], 1, 0)  # other words still run on the loop
