"""Scenario: chaos on a federation of four `bbs serve` nodes, with adversaries, then named invariants.

Four nodes in a ring (a - b - c - d - a) plus a chord (a - c); every peer link runs through its own TCP relay
(scenarios/fednet.py `Link`) so it can be cut. While writers post on every node and agents declare, lease
(forwarded to the task's home node) and complete tasks on different nodes, a schedule drawn from `--seed`
runs the adversaries:

* kill       SIGKILL a node, restart it 1-3 s later (several times);
* partition  cut one peer link, or isolate a node, for 3-8 s (several times);
* restore    back a node up (`bbs backup`), let an agent on a neighbour lease a task homed there, isolate the
             node (its last writes reach no peer), SIGKILL it, restore the backup (`bbs restore --force`) while
             it is still isolated, and let a second agent ask the restored node for the same lease;
* equivocate one author signs one entry address as two versions (tags and confidence differ) and posts them
             to two nodes, and another address as a `local` and a `federation` version, to two nodes;
* replay     capture a signed peer request (a forwarded lease) on its relay, replay it to its target, SIGKILL
             and restart the target, replay it again.

Then every link is mended and every node runs (the heal), and the invariants of scenarios/chaos_ledger.py
are checked and printed as a table. Exit status 1 when any invariant failed.

    python -m scenarios.chaos [--seed N] [--duration S] [--without restore --without replay ...]
    tests/hardening/test_chaos.py    # a short run in CI, asserting chaos_ledger.EXPECTED_TO_HOLD
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import itertools
import json
import random
import shutil
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

from agent import identity_file
from identity import canonical, records
from node.workflows.forward import PEER_LEASE_PATH
from scenarios.chaos_ledger import FAILED, Grant, Ledger, Result, evaluate, hashes, ledger_call, table
from scenarios.fednet import Capture, Link, ScenarioFailed, ServedNode, bbs, send_raw
from wire.api import PostEntry, unsigned_entry

ADVERSARIES = ("kill", "partition", "restore", "equivocate", "replay")
NAMES = ("a", "b", "c", "d")
EDGES = (("a", "b"), ("b", "c"), ("c", "d"), ("d", "a"), ("a", "c"))
WF = "/v1/agent-workflows"
CHAOS_ENV = {"BBS_SYNC_WAIT_MS": "5000", "BBS_RECONCILE_EVERY_S": "2"}
DEFAULT_DURATION = 90.0  # seconds of chaos; with setup and the checks the run stays under about 180 s
HEAL_WINDOW_S = 10.0
TIMEOUT = aiohttp.ClientTimeout(total=15)


@dataclass
class Options:
    """What to run: the seed of the schedule, the seconds of chaos, and which adversaries act."""

    seed: int = 23
    duration: float = DEFAULT_DURATION
    adversaries: frozenset[str] = frozenset(ADVERSARIES)
    writers_per_second: float = 4.0


@dataclass
class Report:
    """The outcome: each invariant's result, the ledger behind it, and the table as printed."""

    results: dict[str, Result]
    ledger: Ledger
    text: str

    @property
    def failed(self) -> list[str]:
        return [name for name, r in self.results.items() if r.status == FAILED]


def neighbours(name: str) -> list[str]:
    return sorted({y for x, y in EDGES if x == name} | {x for x, y in EDGES if y == name})


@dataclass
class World:
    """The running federation: nodes, relays, agents, and what has been observed."""

    root: Path
    session: aiohttp.ClientSession
    opts: Options
    rng: random.Random
    ledger: Ledger = field(default_factory=Ledger)
    nodes: dict[str, ServedNode] = field(default_factory=dict)
    links: dict[tuple[str, str], Link] = field(default_factory=dict)  # (from, to) -> relay `from` uses to reach `to`
    cuts: Counter[frozenset[str]] = field(default_factory=Counter)
    incarnation: Counter[str] = field(default_factory=Counter)
    busy: dict[str, asyncio.Lock] = field(default_factory=dict)
    writers: dict[str, dict[str, str]] = field(default_factory=dict)
    workers: dict[str, dict[str, str]] = field(default_factory=dict)
    equivocator: dict[str, dict[str, str]] = field(default_factory=dict)
    capture: Capture = field(default_factory=lambda: Capture(PEER_LEASE_PATH))
    stop: asyncio.Event = field(default_factory=asyncio.Event)
    t0: float = field(default_factory=time.monotonic)
    counter: itertools.count[int] = field(default_factory=itertools.count)

    def log(self, what: str) -> None:
        line = f"[{time.monotonic() - self.t0:6.1f}s] {what}"
        self.ledger.events.append(line)
        print(line, flush=True)

    # ---- requests ---------------------------------------------------------------------------------------

    async def call(
        self, name: str, method: str, path: str, body: Any = None, headers: dict[str, str] | None = None
    ) -> tuple[int, Any]:
        """(status, JSON) of one request; (0, None) when no answer came (the node is down or cut off)."""
        return await ledger_call(
            self.session, self.ledger, self.nodes[name], method, path, body, headers, timeout=TIMEOUT, where=""
        )

    async def lease_of(self, name: str, task: str) -> tuple[Any, ...] | None:
        status, data = await self.call(name, "GET", f"{WF}/tasks/{task}")
        lease = data.get("lease") if status == 200 and isinstance(data, dict) else None
        return (lease["lease_id"], lease["holder"], lease["expires_at"]) if lease else None

    async def until(self, check: Callable[[], Awaitable[bool]], seconds: float) -> bool:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            if await check():
                return True
            await asyncio.sleep(0.2)
        return False

    # ---- processes and links ----------------------------------------------------------------------------

    async def start(self, name: str) -> None:
        await self.nodes[name].start(self.session)
        self.incarnation[name] += 1

    async def kill(self, name: str) -> None:
        await asyncio.to_thread(self.nodes[name].kill)

    def cut(self, a: str, b: str) -> None:
        pair = frozenset((a, b))
        self.cuts[pair] += 1
        self.links[(a, b)].cut()
        self.links[(b, a)].cut()

    def mend(self, a: str, b: str) -> None:
        pair = frozenset((a, b))
        self.cuts[pair] -= 1
        if self.cuts[pair] <= 0:
            self.cuts[pair] = 0
            self.links[(a, b)].restore()
            self.links[(b, a)].restore()

    def running(self) -> list[str]:
        return [n for n, node in self.nodes.items() if node.proc is not None and node.proc.poll() is None]


# ---- setup --------------------------------------------------------------------------------------------------


async def build(w: World) -> None:
    """Four nodes, peered over relays; a writer and a worker on each; one equivocating author known to all."""
    for name in NAMES:
        w.nodes[name] = ServedNode(name, w.root / name, env=dict(CHAOS_ENV))
        w.busy[name] = asyncio.Lock()
    await asyncio.gather(*(asyncio.to_thread(n.init) for n in w.nodes.values()))
    await asyncio.gather(*(w.start(name) for name in NAMES))
    for x, y in EDGES:
        for src, dst in ((x, y), (y, x)):
            link = Link(w.nodes[dst].port, tap=w.capture.tap((src, dst)))
            await link.start()
            w.links[(src, dst)] = link

    async def peers_and_agents() -> None:
        for (src, dst), link in w.links.items():
            await w.nodes[src].peer(w.session, w.nodes[dst], via=link.url)
        for name, node in w.nodes.items():
            w.writers[name] = await node.agent(w.session, f"writer-{name}")
            w.workers[name] = await node.agent(w.session, f"worker-{name}")

    equivocator = register_equivocator(w) if "equivocate" in w.opts.adversaries else asyncio.sleep(0)
    await asyncio.gather(peers_and_agents(), equivocator)  # the CLI work overlaps the API calls


async def register_equivocator(w: World) -> None:
    """An agent created on a, its identity exported and imported on the other nodes (it signs its own records)."""
    a = w.nodes["a"]
    w.equivocator["a"] = await a.agent(w.session, "equivocator")
    identity = w.root / "equivocator.identity"
    await asyncio.to_thread(bbs, "agent", "export", "equivocator", "--data", str(a.data), "--out", str(identity))

    async def imported(name: str) -> None:
        out = await asyncio.to_thread(
            bbs, "agent", "import", str(identity), "--data", str(w.nodes[name].data), "--name", "equivocator", "--json"
        )
        created = json.loads(out)
        w.equivocator[name] = {"Authorization": f"Bearer {created['api_key']}", "X-Agent": created["agent_id"]}

    await asyncio.gather(*(imported(n) for n in NAMES if n != "a"))


# ---- workload -----------------------------------------------------------------------------------------------


async def writer(w: World, name: str) -> None:
    """Post on one node; every 201 is an acknowledged write that must survive."""
    pause = 1.0 / w.opts.writers_per_second
    while not w.stop.is_set():
        body = {"entry_type": "finding", "performative": "inform", "content": f"chaos {name} {next(w.counter)}"}
        status, data = await w.call(name, "POST", "/v1/entries", body, w.writers[name])
        if status == 201:
            w.ledger.acked[data["record_hash"]] = (name, time.monotonic())
        await asyncio.sleep(pause if status else 0.5)


async def lease(w: World, via: str, task: str, seconds: int = 900, retry_s: float = 0.0) -> Grant | None:
    """Ask node `via` for the lease of `task` for its worker; the grant (recorded in the ledger), or None."""
    deadline = time.monotonic() + retry_s
    while True:
        status, data = await w.call(via, "POST", f"{WF}/tasks/{task}/lease", {"seconds": seconds}, w.workers[via])
        if status in (200, 201) and data.get("lease"):
            return w.ledger.grant(task, w.workers[via]["X-Agent"], data["lease"], time.monotonic())
        if time.monotonic() >= deadline or status not in (0, 404, 503):
            return None
        await asyncio.sleep(0.5)


async def task_known(w: World, name: str, key: str) -> bool:
    return (await w.call(name, "GET", f"{WF}/tasks/{key}"))[0] == 200


async def tasker(w: World, rng: random.Random) -> None:
    """Declare a task on one node (its home), lease it from a node that peers the home, complete it there."""
    while not w.stop.is_set():
        home = rng.choice(NAMES)
        key = f"job-{next(w.counter)}"
        status, _ = await w.call(home, "POST", f"{WF}/tasks", {"key": key, "title": key}, w.writers[home])
        if status not in (200, 201):
            await asyncio.sleep(0.5)
            continue
        via = rng.choice([home, *neighbours(home)])
        if not await w.until(functools.partial(task_known, w, via, key), 8):
            continue
        grant = await lease(w, via, key)
        if grant is None:
            continue
        await asyncio.sleep(rng.uniform(0.3, 1.5))
        grant.ended = time.monotonic()  # from here on the holder is finishing: a later grant is no overlap
        body = {"lease": grant.lease_id}  # the fencing token: only the holder's live lease finishes the task
        status, data = await w.call(via, "POST", f"{WF}/tasks/{key}/complete", body, w.workers[via])
        if status in (200, 201):
            w.ledger.completed += 1
        elif 400 <= status < 500:
            w.ledger.completions_refused.append(f"{key}: {status} {data.get('code') if isinstance(data, dict) else ''}")


async def sampler(w: World) -> None:
    """Once a second: the live leases on every running node (one round), and each node's /metrics."""
    while not w.stop.is_set():
        await sample_once(w)
        await asyncio.sleep(1.0)


async def sample_once(w: World) -> None:
    names = w.running()

    async def one(name: str) -> tuple[str, dict[str, str]]:
        held: dict[str, str] = {}
        status, graph = await w.call(name, "GET", f"{WF}/graph")
        if status == 200:
            for task in graph["nodes"]:
                if task.get("state") == "leased" and task.get("lease_holder"):
                    held[str(task.get("identity") or task["key"])] = task["lease_holder"]
        try:
            async with w.session.get(w.nodes[name].url + "/metrics", headers=w.nodes[name].admin) as resp:
                if resp.status == 200:
                    w.ledger.scrape(name, w.incarnation[name], await resp.text())
        except (aiohttp.ClientError, TimeoutError):
            pass
        return name, held

    rounds = await asyncio.gather(*(one(n) for n in names))
    w.ledger.sample_leases(dict(rounds), f"{time.monotonic() - w.t0:.1f}s")


# ---- adversaries --------------------------------------------------------------------------------------------


async def kill_restart(w: World, name: str, down: float) -> None:
    if w.busy[name].locked():
        w.log(f"kill {name}: skipped (another adversary is using it)")
        return
    async with w.busy[name]:
        await w.kill(name)
        w.log(f"SIGKILL {name}; restart in {down:.1f}s")
        await asyncio.sleep(down)
        await w.start(name)
    w.ledger.ran["kill"] += 1


async def partition(w: World, pairs: list[tuple[str, str]], seconds: float, what: str) -> None:
    for a, b in pairs:
        w.cut(a, b)
    w.log(f"partition: {what} for {seconds:.1f}s")
    await asyncio.sleep(seconds)
    for a, b in pairs:
        w.mend(a, b)
    w.log(f"partition healed: {what}")
    w.ledger.ran["partition"] += 1


async def equivocate(w: World) -> None:
    """One address, two signed versions, posted to two nodes; then a local / federation pair."""
    identity = identity_file.load(w.root / "equivocator.identity")
    one, two, three, four = w.rng.sample(NAMES, 4)
    versions: list[tuple[str, dict[str, Any], dict[str, Any], tuple[str, str]]] = [
        ("content", {"tags": ["equivocation", "v1"], "confidence": 0.5}, {"tags": ["equivocation", "v2"]}, (one, two)),
        ("scope", {"scope": "local"}, {"scope": "federation"}, (three, four)),
    ]
    for kind, first, second, place in versions:
        created_at = canonical.now_created_at()
        content = f"one address, two bodies ({kind}, seed {w.opts.seed})"
        signed = []
        for fields in (first, second):
            entry = PostEntry(entry_type="finding", performative="inform", content=content, **fields)
            signed.append(records.sign(unsigned_entry(entry, identity.key.did, created_at, []), identity.key))
        address = records.compute_hash(signed[0])
        assert address == records.compute_hash(signed[1]), "the two versions must share one address"
        # Both at once: a node that already synced the other version answers 200 with it and stores nothing.
        answers = await asyncio.gather(*(post_signed(w, n, rec) for rec, n in zip(signed, place, strict=True)))
        for name, (status, data) in zip(place, answers, strict=True):
            w.log(f"equivocation ({kind}): a version posted to {name}: {status} {_tags(data)}")
        if all(status in (200, 201) for status, _ in answers):
            w.ledger.equivocated[address] = kind
    w.ledger.ran["equivocate"] += bool(w.ledger.equivocated)


async def post_signed(w: World, name: str, record: dict[str, Any]) -> tuple[int, Any]:
    """Post the equivocator's signed record to one node, retrying while the node is down (a kill)."""
    for _ in range(20):
        status, data = await w.call(name, "POST", "/v1/entries", {"record": record}, w.equivocator[name])
        if status:
            return status, data
        await asyncio.sleep(0.5)
    return 0, None


def _tags(answer: Any) -> str:
    return f"{answer.get('scope')} {answer.get('tags')}" if isinstance(answer, dict) else ""


async def replay_raw(port: int, raw: bytes) -> int:
    """Send captured request bytes as they are; the status of the answer (0 when none)."""
    return (await send_raw(port, raw))[0]


def replay_outcome(before: Any, after: Any, status: int, when: str) -> tuple[bool, str]:
    """(the replay changed nothing, why): the lease is the same before and after, and no 5xx came back."""
    if before is None:
        return False, f"answered {status}{when}; the target showed no lease to compare (not tested)"
    if after != before:
        now = after[2] if after else None
        return False, f"answered {status}{when}; the lease changed: expires {before[2]} -> {now}"
    return status < 500, f"answered {status}{when}; lease unchanged"


async def replay(w: World) -> None:
    """A neighbour forwards a lease to the task's home; the captured request is replayed, before and after a
    restart of the home. Each replay must leave the lease as it was (no extension, no new grant)."""
    target = w.rng.choice(NAMES)
    sender = w.rng.choice(neighbours(target))
    async with w.busy[target], w.busy[sender]:
        key = f"replayed-{w.opts.seed}"
        await w.call(target, "POST", f"{WF}/tasks", {"key": key}, w.writers[target])
        await w.until(functools.partial(task_known, w, sender, key), 10)
        w.capture.arm((sender, target))
        granted = await lease(w, sender, key, seconds=600, retry_s=15)
        w.capture.arm(None)
        if granted is None or w.capture.raw is None:
            w.log(f"replay: no forwarded lease captured on {sender} -> {target}")
            return
        raw, captured_at = w.capture.raw, w.capture.at
        w.log(f"replay: captured {sender}'s signed lease request to {target} ({len(raw)} bytes)")
        await asyncio.sleep(1.1)  # a later second: an extension would show in expires_at
        port = w.nodes[target].port
        before = await w.lease_of(target, key)
        status = await replay_raw(port, raw)
        after = await w.lease_of(target, key)
        w.ledger.replays["replay_refused"] = replay_outcome(before, after, status, "")
        await w.kill(target)
        await w.start(target)
        if time.monotonic() - captured_at > 55:
            w.log("replay: the restart took too long; the capture is no longer fresh")
            return
        before = await w.lease_of(target, key)
        status = await replay_raw(port, raw)
        after = await w.lease_of(target, key)
        age = f" {time.monotonic() - captured_at:.0f}s after the capture"
        w.ledger.replays["replay_refused_after_restart"] = replay_outcome(before, after, status, age)
        w.log(f"replay: after {target}'s restart answered {status}")
    w.ledger.ran["replay"] += 1


@dataclass
class Restore:
    """The restore adversary's state between its two steps."""

    node: str = ""
    neighbour: str = ""
    archive: Path = Path()
    backed_up_at: float = 0.0


async def back_up(w: World, plan: Restore) -> None:
    """Declare a task homed on the node, back the node up, then a neighbour's agent leases the task."""
    r, n = plan.node, plan.neighbour
    async with w.busy[r]:
        key = f"amnesia-{w.opts.seed}"
        await w.call(r, "POST", f"{WF}/tasks", {"key": key}, w.writers[r])
        await w.until(functools.partial(task_known, w, n, key), 10)
        plan.backed_up_at = time.monotonic()
        await asyncio.to_thread(bbs, "backup", "--data", str(w.nodes[r].data), "--out", str(plan.archive))
        w.log(f"restore: {r} backed up")
        granted = await lease(w, n, key, retry_s=15)
        w.log(f"restore: {n}'s agent leased {key} from {r} after the backup: {'granted' if granted else 'refused'}")


async def restore(w: World, plan: Restore) -> None:
    """Isolate the node, SIGKILL it, note which of its post-backup writes no peer holds, restore it while still
    isolated, and let its own agent ask it for the lease it granted after the backup."""
    r, key = plan.node, f"amnesia-{w.opts.seed}"
    async with w.busy[r]:
        for other in neighbours(r):
            w.cut(r, other)  # its last writes reach no peer: they are lost with the restore, and counted
        w.log(f"restore: {r} isolated; its disk is lost in 1 s")
        await asyncio.sleep(1.0)
        await w.kill(r)
        peers_hold: set[str] = set()
        for name in NAMES:
            if name != r:
                peers_hold |= await asyncio.to_thread(hashes, w.nodes[name].data / "bbs.db")
        w.ledger.excused = {
            h for h, (node, at) in w.ledger.acked.items() if node == r and at >= plan.backed_up_at
        } - peers_hold
        result = await asyncio.to_thread(
            bbs, "restore", "--data", str(w.nodes[r].data), "--from", str(plan.archive), "--force"
        )
        w.log(f"restore: {r} restored from its backup while isolated: {result.strip()[:80]}")
        await w.start(r)
        granted = await lease(w, r, key)
        w.log(f"restore: {r}'s own agent asked the restored {r} for {key}: {'granted' if granted else 'refused'}")
        await sample_once(w)
        await asyncio.sleep(2)
        await sample_once(w)
        for other in neighbours(r):
            w.mend(r, other)
        w.log(f"restore: {r} rejoined")
    w.ledger.ran["restore"] += 1


def schedule(w: World) -> list[tuple[float, str, Callable[[], Coroutine[Any, Any, None]]]]:
    """The seeded timeline: (seconds from the start, what, action)."""
    rng, d, adv = w.rng, w.opts.duration, w.opts.adversaries
    plan = Restore(node=rng.choice(NAMES), archive=w.root / "backup.tar")
    plan.neighbour = rng.choice(neighbours(plan.node))
    events: list[tuple[float, str, Callable[[], Coroutine[Any, Any, None]]]] = []
    if "equivocate" in adv:
        events.append((0.15 * d, "equivocate", lambda: equivocate(w)))
    if "replay" in adv:
        events.append((0.25 * d, "replay", lambda: replay(w)))
    if "restore" in adv:
        events.append((0.45 * d, "backup", lambda: back_up(w, plan)))
        events.append((0.65 * d, "restore", lambda: restore(w, plan)))
    if "kill" in adv:
        for _ in range(max(2, int(d / 15))):
            victim, down = rng.choice(NAMES), rng.uniform(1, 3)
            events.append((rng.uniform(0.05, 0.85) * d, f"kill {victim}", _bind(kill_restart, w, victim, down)))
    if "partition" in adv:
        for _ in range(max(2, int(d / 20))):
            seconds = rng.uniform(3, 8)
            if rng.random() < 0.5:
                a, b = rng.choice(EDGES)
                pairs, what = [(a, b)], f"link {a} - {b} cut"
            else:
                alone = rng.choice(NAMES)
                pairs, what = [(alone, o) for o in neighbours(alone)], f"{alone} isolated"
            events.append((rng.uniform(0.05, 0.85) * d, what, _bind(partition, w, pairs, seconds, what)))
    return sorted(events, key=lambda e: e[0])


def _bind(fn: Callable[..., Coroutine[Any, Any, None]], *args: Any) -> Callable[[], Coroutine[Any, Any, None]]:
    return lambda: fn(*args)


async def timeline(w: World) -> None:
    """Run the schedule: kills and partitions in the background, the other adversaries one after another."""
    background: list[asyncio.Task[None]] = []
    for at, what, action in schedule(w):
        await asyncio.sleep(max(0.0, w.t0 + at - time.monotonic()))
        if what.startswith(("kill", "link", "partition")) or what.endswith("isolated"):
            background.append(asyncio.create_task(action()))
        else:
            w.log(f"adversary: {what}")
            await action()
    await asyncio.sleep(max(0.0, w.t0 + w.opts.duration - time.monotonic()))
    await asyncio.gather(*background)


# ---- the heal and the checks --------------------------------------------------------------------------------


async def heal(w: World) -> None:
    """Every link up, every node running; then wait (at most 10 s counts) for the nodes to agree."""
    for link in w.links.values():
        link.restore()
    w.cuts.clear()
    for name in NAMES:
        if name not in w.running():
            await w.start(name)
    healed = time.monotonic()
    w.log("healed: every link up, every node running")
    equivocated = set(w.ledger.equivocated)
    while time.monotonic() - healed < HEAL_WINDOW_S:
        digests = {name: (await w.call(name, "GET", "/v1/sync/digest"))[1] for name in NAMES}
        pairs = {name: (d or {}).get("sha256") for name, d in digests.items()}
        took = time.monotonic() - healed
        if len(set(pairs.values())) == 1 and w.ledger.digest_after_heal_s is None:
            w.ledger.digest_after_heal_s = took
        if w.ledger.records_after_heal_s is None:
            sets = [await asyncio.to_thread(hashes, w.nodes[n].data / "bbs.db", federation_only=True) for n in NAMES]
            if all(s - equivocated == sets[0] - equivocated for s in sets):
                w.ledger.records_after_heal_s = took
        w.ledger.digests_at_end = {n: (d or {}).get("count") for n, d in digests.items()}
        if w.ledger.digest_after_heal_s is not None and w.ledger.records_after_heal_s is not None:
            break
        await asyncio.sleep(0.25)
    agreed, hashes_ = _secs(w.ledger.digest_after_heal_s), _secs(w.ledger.records_after_heal_s)
    w.log(f"after the heal: digests agreed {agreed}, record hashes (equivocated set aside) {hashes_}")


def _secs(seconds: float | None) -> str:
    return "never within 10 s" if seconds is None else f"after {seconds:.1f}s"


async def check_leases_kept(w: World) -> None:
    """Every grant whose holder never began to finish it is live for that holder on every node."""
    for grant in w.ledger.grants:
        if grant.ended != float("inf"):
            continue
        for name in NAMES:
            lease = await w.lease_of(name, grant.task)
            if lease is None or lease[1] != grant.holder:
                held = f"held by {lease[1][-8:]}" if lease else "no live lease"
                w.ledger.leases_lost.append(f"{grant.task} of {grant.holder[-8:]}: {held} on {name}")


async def read_bodies(w: World) -> None:
    """What each node serves for every equivocated address (the signed fields that may differ)."""
    for address in w.ledger.equivocated:
        served: dict[str, Any] = {}
        for name in NAMES:
            status, data = await w.call(name, "GET", f"/v1/entries/{address}")
            entry = next((e for e in (data or {}).get("entries", []) if e["record_hash"] == address), None)
            if status != 200 or entry is None:
                served[name] = None
                continue
            fields = ("scope", "tags", "confidence", "truth_state", "directed_to", "equivocated")
            served[name] = {k: entry.get(k) for k in fields}
        w.ledger.bodies[address] = served


async def run(root: Path, opts: Options) -> Report:
    """Build the federation in `root`, run the seeded chaos and the workload, heal, check every invariant."""
    w_rng = random.Random(opts.seed)
    async with aiohttp.ClientSession(timeout=TIMEOUT) as session:
        w = World(root, session, opts, w_rng)
        try:
            await build(w)
            built, w.t0 = time.monotonic() - w.t0, time.monotonic()
            w.log(
                f"four nodes up in {built:.1f}s; seed {opts.seed}, {opts.duration:.0f}s of chaos:"
                f" {', '.join(sorted(opts.adversaries))}"
            )
            work_rng = random.Random(opts.seed + 1)
            workload = [asyncio.create_task(writer(w, n)) for n in NAMES]
            workload += [asyncio.create_task(tasker(w, random.Random(work_rng.random()))) for _ in range(2)]
            workload.append(asyncio.create_task(sampler(w)))
            await timeline(w)
            w.stop.set()
            await asyncio.gather(*workload)
            await heal(w)
            await read_bodies(w)
            await check_leases_kept(w)
            await sample_once(w)  # the last /metrics of every process
            present = {n: await asyncio.to_thread(hashes, w.nodes[n].data / "bbs.db") for n in NAMES}
        finally:
            w.stop.set()
            for node in w.nodes.values():
                node.kill()
            for link in w.links.values():
                await link.close()
    results = evaluate(w.ledger, present, sorted(root.glob("*.log")), set(opts.adversaries))
    acted = ", ".join(f"{name} x{w.ledger.ran[name]}" for name in ADVERSARIES if name in opts.adversaries)
    refused = ", ".join(f"{k.strip()} x{v}" for k, v in w.ledger.refused.most_common(6))
    text = f"adversaries acted: {acted}\nrefused client requests (most): {refused or 'none'}\n" + table(results)
    return Report(results, w.ledger, text)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seed", type=int, default=23, help="seed of the schedule (default 23)")
    parser.add_argument("--duration", type=float, default=DEFAULT_DURATION, help="seconds of chaos (default 90)")
    parser.add_argument(
        "--without", action="append", default=[], choices=ADVERSARIES, help="leave an adversary out (repeatable)"
    )
    parser.add_argument("--keep", type=Path, help="keep the data folders and logs in this (new) folder")
    args = parser.parse_args()
    opts = Options(seed=args.seed, duration=args.duration, adversaries=frozenset(ADVERSARIES) - set(args.without))
    with tempfile.TemporaryDirectory(prefix="bbs-chaos-") as tmp:
        root = Path(tmp)
        try:
            report = asyncio.run(run(root, opts))
        except ScenarioFailed as exc:  # the federation could not even be run (a node did not start, ...)
            print(f"chaos scenario: FAILED to run: {exc}", file=sys.stderr)
            for log in sorted(root.glob("*.log")):
                tail = log.read_text(errors="replace").splitlines()[-20:]
                print(f"--- {log.name} (tail)\n" + "\n".join(tail), file=sys.stderr)
            return 1
        finally:
            if args.keep:
                shutil.copytree(root, args.keep)
    print(report.text)
    if report.failed:
        print(f"chaos scenario: FAILED ({', '.join(report.failed)})", file=sys.stderr)
        return 1
    print("chaos scenario: OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
