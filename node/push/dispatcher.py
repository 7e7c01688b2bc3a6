"""The push dispatcher: after each commit, find the notifications new since the last look, for agents with push
endpoints, and hand their envelopes to each endpoint's sender (node/push/sender.py).

Nothing here runs inside a write transaction: the writer thread only flips a flag and wakes the event loop
(`Database.after_commit`), and the dispatcher then reads committed rows. Its cursor (the last notification id
seen) lives in memory and starts at the newest notification when the node starts: a push is a hint, so the
notifications made while the node was down, or while nobody listened, are the inbox's to deliver. A notification
raised to tier 1 after it was made (same id) is not pushed again.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections import defaultdict

import aiohttp

from identity import keys
from node.inbox.service import envelope
from node.push import store
from node.push.endpoints import Endpoint, PushEndpoints
from node.push.sender import PushFailed, PushSettings, Sender
from node.store.conn import Conn
from node.store.db import Database
from sync.store import RoundFailures
from wire import nlip
from wire.api import Envelope
from wire.push import TEST_LABEL, PushPayload, PushTestOut
from wire.push_auth import sign_push

log = logging.getLogger("bbs.push")
SCAN_LIMIT = 200  # envelopes read per scan; beyond, notifications are only counted (`more`)
# Between scans that found more than SCAN_LIMIT (a flood: a catch-up sync, a bulk ingest), at least this long, so
# reading envelopes does not compete with the writes that make them (tier-1 latency stays well under a second).
FLOOD_SCAN_S = 0.25


def scan(
    conn: Conn, after: int, agents: list[str]
) -> tuple[int, list[tuple[str, Envelope]], list[tuple[str, int, str, int]]]:
    """(newest notification id, the first SCAN_LIMIT new pending notifications of `agents` with their envelopes,
    and counts by (agent, tier, reason) of the others), all in one snapshot."""
    upto = store.newest_notification_id(conn)
    if upto <= after:
        return upto, [], []
    rows = store.new_notifications(conn, after, upto, agents, SCAN_LIMIT)
    rest: list[tuple[str, int, str, int]] = []
    if len(rows) == SCAN_LIMIT:
        rest = store.pending_counts(conn, rows[-1]["notification_id"], upto, agents)
    return upto, [(r["agent_id"], envelope(r)) for r in rows], rest


class Dispatcher:
    """Feeds every endpoint's sender from the notifications committed since the last scan."""

    def __init__(self, db: Database, key: keys.SigningKey, endpoints: PushEndpoints, settings: PushSettings) -> None:
        self.db, self.key, self.endpoints, self.settings = db, key, endpoints, settings
        self.senders: dict[int, Sender] = {}
        self.in_flight = 0
        self.cursor = 0
        self._wake = asyncio.Event()
        self._poked = threading.Event()  # set by the writer thread; cleared by the loop before it scans
        self._loop: asyncio.AbstractEventLoop | None = None
        self._session: aiohttp.ClientSession | None = None
        self._limit = asyncio.Semaphore(settings.max_concurrency)

    # ---- the endpoints ----------------------------------------------------------------------------------------

    async def reload(self) -> None:
        """Take the registered endpoints from the database (after a register or a delete)."""
        current = {e.id: e for e in await self.endpoints.all()}
        for gone in set(self.senders) - set(current):
            await self.senders.pop(gone).stop()
        for endpoint in current.values():
            sender = self.senders.get(endpoint.id)
            if sender is None:
                self.senders[endpoint.id] = Sender(endpoint, self._post, self.settings, self.endpoints.now_ms)
            else:
                sender.endpoint = endpoint
        listening = self._after_commit in self.db.after_commit
        if self.senders and not listening:
            self.db.after_commit.append(self._after_commit)
        elif not self.senders and listening:
            self.db.after_commit.remove(self._after_commit)

    # ---- running ----------------------------------------------------------------------------------------------

    async def start(self) -> None:
        """Start from the newest notification, with the endpoints registered now."""
        self._loop = asyncio.get_running_loop()
        self._session = aiohttp.ClientSession()
        self.cursor = await self.db.read(store.newest_notification_id)
        await self.reload()

    async def stop(self) -> None:
        """Stop every sender and close the HTTP session."""
        if self._after_commit in self.db.after_commit:
            self.db.after_commit.remove(self._after_commit)
        for sender in self.senders.values():
            await sender.stop()
        if self._session is not None:
            await self._session.close()

    async def run(self) -> None:
        """Scan after every wake-up, at most once per `coalesce_s`, for as long as the app runs."""
        rounds = RoundFailures(log, "push scan")
        while True:
            await self._wake.wait()
            self._wake.clear()
            self._poked.clear()
            flooded = False
            try:
                flooded = await self.scan_once()
                rounds.passed()
            except Exception as exc:
                if self.db.is_open:
                    rounds.failed(exc)
            # at most one scan per window, however busy the writer; fewer in a flood
            await asyncio.sleep(max(FLOOD_SCAN_S, self.settings.coalesce_s) if flooded else self.settings.coalesce_s)

    def poke(self) -> None:
        """Scan soon (on the event loop): what another process committed wakes no `after_commit` here."""
        self._wake.set()

    def _after_commit(self) -> None:
        # On the writer thread: one wake-up until the loop has scanned, however many commits meanwhile.
        if not self._poked.is_set() and self._loop is not None:
            self._poked.set()
            with contextlib.suppress(RuntimeError):  # the loop has closed
                self._loop.call_soon_threadsafe(self._wake.set)

    async def scan_once(self) -> bool:
        """Hand the notifications new since the cursor to the senders of their agents' endpoints; whether there
        were more than SCAN_LIMIT (the rest only counted)."""
        by_agent: dict[str, list[Sender]] = defaultdict(list)
        for sender in self.senders.values():
            by_agent[sender.endpoint.agent_id].append(sender)
        if not by_agent:
            return False
        after = self.cursor
        upto, new, rest = await self.db.read(lambda c: scan(c, after, sorted(by_agent)))
        self.cursor = max(self.cursor, upto)
        queued: dict[int, list[Envelope]] = defaultdict(list)
        more: dict[int, int] = defaultdict(int)
        for agent_id, env in new:
            for sender in by_agent[agent_id]:
                if sender.endpoint.wants(env.tier, env.reason):
                    queued[sender.endpoint.id].append(env)
        for agent_id, tier, reason, count in rest:
            for sender in by_agent[agent_id]:
                if sender.endpoint.wants(tier, reason):
                    more[sender.endpoint.id] += count
        for endpoint_id in set(queued) | set(more):
            self.senders[endpoint_id].offer(queued.get(endpoint_id, []), more.get(endpoint_id, 0))
        return bool(rest)

    # ---- sending ----------------------------------------------------------------------------------------------

    async def _post(self, endpoint: Endpoint, batch: list[Envelope], more: int) -> None:
        payload = PushPayload(node_id=self.key.did, agent_id=endpoint.agent_id, notifications=batch, more=more)
        await self._send(endpoint, nlip.push_message(payload))

    async def _send(self, endpoint: Endpoint, body: bytes) -> int:
        """POST one signed NLIP message; PushFailed unless the endpoint answers 2xx in time."""
        assert self._session is not None
        headers = {"Content-Type": "application/json", **sign_push(self.key, endpoint.url, body)}
        timeout = aiohttp.ClientTimeout(total=self.settings.timeout_s)
        async with self._limit:
            self.in_flight += 1
            try:
                async with self._session.post(
                    endpoint.url, data=body, headers=headers, timeout=timeout, allow_redirects=False
                ) as resp:
                    await resp.read()
                    status = resp.status
            except (TimeoutError, aiohttp.ClientError, OSError) as exc:
                raise PushFailed(f"no answer: {type(exc).__name__}: {exc}"[:300]) from None
            finally:
                self.in_flight -= 1
        if not 200 <= status < 300:
            raise PushFailed(f"the endpoint answered HTTP {status}", status)
        return status

    async def test(self, endpoint: Endpoint) -> PushTestOut:
        """Send one test message at once (no retries, breaker untouched) and say how it went."""
        text = "a test push from your Agent BBS node; nothing to do"
        payload = {"kind": "bbs.push_test", "node_id": self.key.did, "agent_id": endpoint.agent_id}
        try:
            status = await self._send(endpoint, nlip.encode(nlip.structured(payload, label=TEST_LABEL, text=text)))
        except PushFailed as exc:
            return PushTestOut(ok=False, status=exc.status, error=str(exc))
        return PushTestOut(ok=True, status=status)
