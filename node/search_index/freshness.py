"""How fresh a search's index is: the position it covers as an awaitable, the age of what it has not yet indexed,
and what a search waits for before it is answered (docs/api.md, "Search", freshness).

A search answers from the index as it stands; it first waits for the index to cover the highest entry id at
request time when it asks for `fresh`, and by default when the calling agent's own newest entry is not yet
indexed (read your own writes). A wait is bounded (`search_fresh_timeout_ms`); when it runs out the search
answers from the index as it is and says so (`stale`, `indexed_through`).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from node.search_index import store
from node.store.conn import Conn


def targets(conn: Conn, agent: str | None) -> tuple[int, int]:
    """(highest entry id, `agent`'s newest entry id): what a fresh search, and a search by `agent`, need covered
    (two seeks: node/search_index/store.py `TARGETS_SQL`)."""
    return store.targets(conn, agent or "")


class Watermark:
    """A position that only grows (the highest entry id the index's searchers see), and waits for it to reach one."""

    def __init__(self, position: int = 0) -> None:
        self.position = position
        self._waiters: list[tuple[int, asyncio.Future[None]]] = []

    @property
    def waiting(self) -> int:
        """Waits not yet over."""
        return len(self._waiters)

    def advance(self, position: int) -> None:
        """Publish a position (once searchers see it); every wait it reaches ends."""
        if position <= self.position:
            return
        self.position = position
        still = []
        for target, future in self._waiters:
            if target <= position:
                if not future.done():
                    future.set_result(None)
            else:
                still.append((target, future))
        self._waiters = still

    def restart(self, position: int) -> None:
        """Start again from `position`, lower or not (an index rebuilt from nothing); waits stay and end as the
        position grows back to their target."""
        self.position = position

    async def reach(self, target: int, timeout_s: float) -> bool:
        """Wait until the position is at least `target`, at most `timeout_s`; whether it got there."""
        if self.position >= target:
            return True
        if timeout_s <= 0:
            return False
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        entry = (target, future)
        self._waiters.append(entry)
        try:
            async with asyncio.timeout(timeout_s):
                await future
            return True
        except TimeoutError:
            return self.position >= target
        finally:
            if entry in self._waiters:
                self._waiters.remove(entry)


class CommitAges:
    """When the oldest commit not yet searchable happened (time.monotonic seconds), for the lag in seconds.

    The writer reports each commit (`committed`); an indexing round takes the pending commits over (`start`) and,
    when it has indexed what they wrote, gives the delay since the oldest of them (`finish`). A commit that
    wrote no entry (a link, an inbox ack) is dropped by the next round that finds nothing to index; one that
    lands during a round is left to the next round, so a delay is never under-reported.
    """

    def __init__(self) -> None:
        self.pending: float | None = None  # the oldest commit no round has taken over yet
        self.in_round: float | None = None  # the oldest commit the running round took over

    def committed(self, at: float) -> None:
        """A commit happened at `at`."""
        if self.pending is None or at < self.pending:
            self.pending = at

    def start(self) -> None:
        """A round begins: it will read every entry of the pending commits (and of a failed round's)."""
        self.in_round, self.pending = _oldest(self.in_round, self.pending), None

    def finish(self, indexed: int, now: float) -> float | None:
        """The round has made what it read searchable: the delay of its oldest commit, None if it indexed none."""
        since, self.in_round = self.in_round, None
        return None if since is None or not indexed else max(now - since, 0.0)

    def age(self, now: float) -> float:
        """Seconds since the oldest commit not yet known to be searchable (0 with none)."""
        oldest = _oldest(self.in_round, self.pending)
        return 0.0 if oldest is None else max(now - oldest, 0.0)


def _oldest(a: float | None, b: float | None) -> float | None:
    return b if a is None else a if b is None else min(a, b)


@dataclass(frozen=True)
class Pace:
    """How often the indexer commits: `commit_s` apart at most while writes keep coming, `flush_s` apart while a
    search waits for a position (a flush), so that sustained writes and repeated fresh searches both leave
    the number of index commits bounded."""

    commit_s: float = 0.2
    flush_s: float = 0.05

    def next_commit(self, last_commit: float, flushing: bool) -> float:
        """The earliest time (time.monotonic) the next index commit may start."""
        return last_commit + (self.flush_s if flushing else self.commit_s)
