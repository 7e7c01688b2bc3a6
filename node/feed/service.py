"""The feed: entries in arrival order after a cursor, with long-poll (GET /v1/feed, `bbs tail`).

An entry's local id is its record's seq on this node, assigned on first insert by the one writer, so ids
are committed in order and a reader never sees a later id before an earlier one: the last id returned is
a cursor that misses nothing. Synthetic entries (truth_state simulation) are left out unless asked for, as
in reads and searches.
"""

from __future__ import annotations

import asyncio
import contextlib

from node.entries import queries
from node.errors import NotFound
from node.feed import store
from node.spaces.sight import Sight, Viewer
from node.spaces.store import sight_of
from node.store.conn import Conn
from node.store.db import Database
from wire.feed import FeedPage, FeedQuery

POLL_S = 0.1  # how often a waiting request looks for a new entry (one read however many wait)
# Besides, a commit (this process's, or on PostgreSQL another's: record 85) wakes the waiting requests (`wake`).


class Feed:
    """Pages of the feed, and waiting for the next entry."""

    def __init__(self, db: Database) -> None:
        self.db = db
        self.closing = asyncio.Event()  # set on shutdown: long-polls answer at once
        self._head_lock = asyncio.Lock()
        self._head = 0
        self._head_at = float("-inf")
        self._head_wakes = 0  # `_wakes` when `_head` was read
        self._wakes = 0
        self._woken = asyncio.Event()  # replaced at each wake: a waiter holds the one of its last look
        self.poll_s = POLL_S

    def wake(self) -> None:
        """Something was committed: waiting requests look again (on the event loop; see node/app.py)."""
        self._wakes += 1
        self._woken.set()
        self._woken = asyncio.Event()

    async def page(self, q: FeedQuery, viewer: Viewer) -> FeedPage:
        """The entries after `q.after` that `viewer` may read (`node.spaces.store.sight_of`), waiting up to
        `q.wait_ms` for the first new entry (any entry: a page may then be empty, with `next` at the head)."""
        if q.wait_ms:
            await self.wait_for_entry(q.after, q.wait_ms / 1000)
        return await self.db.read(lambda c: read_page(c, q, sight_of(c, viewer)), quick=True)

    async def wait_for_entry(self, after: int, timeout: float) -> None:
        """Return once an entry newer than `after` is stored, `timeout` seconds pass, or the node shuts down;
        at once for a cursor beyond the newest entry (read_page moves it back)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while not self.closing.is_set():
            woken = self._woken  # taken before the look: a wake during it is not missed
            if await self._newest() != after:
                return
            remaining = deadline - loop.time()
            if remaining <= 0:
                return
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(woken.wait(), min(self.poll_s, remaining))

    async def _newest(self) -> int:
        """The newest entry id, read at most once per half poll interval (and once per wake) however many
        requests wait."""
        loop = asyncio.get_running_loop()
        async with self._head_lock:
            if self._head_wakes != self._wakes or loop.time() - self._head_at >= self.poll_s / 2:
                wakes = self._wakes  # a wake during the read makes the next look read again
                self._head = await self.db.read(store.newest_id, quick=True)
                self._head_at, self._head_wakes = loop.time(), wakes
            return self._head


def read_page(conn: Conn, q: FeedQuery, sight: Sight) -> FeedPage:
    """`Feed.page` on one connection (one snapshot: the page and the head agree).

    A short page holds every visible entry up to the head, so `next` moves to the head: the synthetic entries
    it skipped are not scanned again. A cursor beyond the head (given by another node, or kept from before a
    restore to an older backup) moves back to the head, so the entries that arrive next are not missed. Only what
    `sight` sees is shown (404 `unknown_space` for a space of `q.space` it does not)."""
    for i, space in enumerate(q.space):
        if not sight.sees(space):
            raise NotFound("no such space here", field=f"$.space[{i}]", code="unknown_space")
    rows = store.entry_rows(conn, q.after, q.limit, q.include_synthetic, sight, q.space)
    entries = [queries.entry_out(r) for r in rows]
    head = store.newest_id(conn)
    cursor = entries[-1].id if len(entries) == q.limit else head
    return FeedPage(entries=entries, next=cursor, head=head)
