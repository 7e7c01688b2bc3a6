"""Drill: spaces across a federation of five real `bbs serve` nodes (issue 38, "Done when"; docs/spaces.md, "Which
nodes host a space"). About 35 to 50 s on a 2-core machine (each wait bounded by 45 s).

Five nodes a to e, each peered with every other (so a node that does not host a space still pulls from its hosts),
each peer link through its own TCP relay (scenarios/fednet.py `Link`, as in scenarios/chaos.py) so it can be cut.

- `alpha`: created on a by ann (a); bob (b) writes; hosted by a and b, and by d, named late.
- `beta`: created on b by bea (b); cal (c) and eve (e) write; hosted by b, c and e, until e's hosting is removed.
- `gamma`: created on c by cy (c); ann (a) writes; hosted by c and a.

Agents post into their spaces from their home nodes, and one agent of each node posts in public. Then c (a host of
beta and gamma) is stopped (SIGKILL); while it is down, posts go on in beta, gamma and public, d is named a host of
alpha and killed half a second later (its backlog may be on the way), and e's hosting of beta is removed; bea posts
into beta after the removal. c and d come back, catch up, and cal posts into beta from c. Once every host agrees,
each check, named. While the posts and changes go on (a window of CHAOS_WINDOW_S seconds from c's stop), a
schedule drawn from `--seed` (printed with the seed) SIGKILLs and restarts random running nodes (never c nor d once
the story has stopped it; a post or call to a node waits while it is down) and cuts random links between two of
a, b, d and e for a few seconds; the story's posts are paced over the window; every link is mended before the heal.

- `no_leak`: a node that never hosted a space holds no record of it, nor its id, in its log (`records`, read with
  sqlite3 read-only); each host's changes feed, fetch and reconciliation, asked with that node's own key
  (sync.client.PeerClient), answer nothing of it (fetch: every id `missing`; a reconciliation from an empty set:
  no id of it needed, no id of it nor the space's in the responder's messages); its digest of the space counts
  nothing. Asked by one host of another, the same probes find the whole space (they are not blind).
- `hosts_agree`: every hosting node's `GET /v1/sync/digest?space=` is identical, and their bodies of the space are
  equal, byte for byte.
- `late_host_backlog`: d, named a host of alpha after its posts, holds every one of its records.
- `removed_host_nothing_new`: e holds what beta had before its removal (its removal too) and none of the posts made
  after it.
- `public_digest_equal`: the public federation's digest is the same on all five nodes, and counts what it would
  without spaces: each agent's identity document and the public posts, nothing more.

    python -m scenarios.space_fed [--seed N]
    tests/hardening/test_space_fed_drill.py    # the CI form
"""

from __future__ import annotations

import argparse
import asyncio
import random
import sqlite3
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

from identity import key_files
from scenarios import checks
from scenarios.checks import Check, Report, table
from scenarios.fednet import Link, ScenarioFailed, ServedNode
from sync import messages as m
from sync.client import PeerClient, SyncError
from sync.negentropy import Negentropy, NegentropyError, VectorStorage

NODES = ("a", "b", "c", "d", "e")
AGENTS = {"ann": "a", "bob": "b", "bea": "b", "cal": "c", "cy": "c", "dan": "d", "eve": "e"}  # name -> home node
# name -> (owner, creation node's hosts named besides it, {writer: role})
SPACES: dict[str, tuple[str, tuple[str, ...], tuple[str, ...]]] = {
    "alpha": ("ann", ("b",), ("bob",)),
    "beta": ("bea", ("c", "e"), ("cal", "eve")),
    "gamma": ("cy", ("a",), ("ann",)),
}
PUBLIC = {"a": "ann", "b": "bea", "c": "cy", "d": "dan", "e": "eve"}  # node -> the agent posting public there
KILL_LATE_HOST_AFTER_S = 0.5  # d's SIGKILL after it is named a host: mid-backlog or just after, either must hold
CONVERGE_S = 45.0  # the bound on every wait for sync (a late host's wake is at most 10 s; a reconciliation 5 s)
TIMEOUT = aiohttp.ClientTimeout(total=30)
DEFAULT_SEED = 38  # fixed, so CI is reproducible; `--seed N` draws another schedule
CHAOS_WINDOW_S = 10.0  # the random kills and cuts start within this many seconds of c's stop
KILLS, CUTS = 3, 4  # random SIGKILL-and-restarts, random link cuts per run
KILLABLE = ("a", "b", "d", "e")  # c is down for the whole window (no kill nor cut draws it); d: no kill after the
# story has killed it


@dataclass(frozen=True)
class Event:
    """One step of the random schedule: at `at` seconds into the window, `kill` a node (down for `seconds`, then
    restarted) or `cut` the link between two nodes (both directions, for `seconds`)."""

    at: float
    kind: str
    nodes: tuple[str, ...]
    seconds: float

    def __str__(self) -> str:
        what = f"SIGKILL {self.nodes[0]}, restart" if self.kind == "kill" else f"cut {self.nodes[0]} - {self.nodes[1]}"
        return f"{self.at:5.1f}s  {what} after {self.seconds:.1f}s"


def draw_schedule(seed: int) -> list[Event]:
    """The random kills and cuts of one run, in order of time; the same seed draws the same schedule."""
    rng = random.Random(seed)
    events = [Event(rng.uniform(0, CHAOS_WINDOW_S), "kill", (rng.choice(KILLABLE),), rng.uniform(1, 2.5))
              for _ in range(KILLS)]  # fmt: skip
    for _ in range(CUTS):
        pair = tuple(sorted(rng.sample(KILLABLE, 2)))
        events.append(Event(rng.uniform(0, CHAOS_WINDOW_S), "cut", pair, rng.uniform(1.5, 4)))
    return sorted(events, key=lambda e: e.at)


CHECKS: dict[str, str] = {
    "no_leak": "a node that never hosted a space has nothing of it, nor its id: log, feed, fetch, digest",
    "hosts_agree": "every host's per-space digest is identical and its bodies equal",
    "late_host_backlog": "the node named a host late holds the space's whole backlog",
    "removed_host_nothing_new": "the node whose hosting was removed received nothing posted after the removal",
    "public_digest_equal": "the public federation's digest is the same on every node",
}


@dataclass
class World(checks.Drill):
    NAMES = CHECKS
    root: Path
    session: aiohttp.ClientSession
    nodes: dict[str, ServedNode] = field(default_factory=dict)
    agents: dict[str, dict[str, str]] = field(default_factory=dict)  # name -> headers (and X-Agent: its id)
    spaces: dict[str, str] = field(default_factory=dict)  # name -> id
    hosts: dict[str, set[str]] = field(default_factory=dict)  # space name -> node names hosting it now
    posts: dict[str, list[str]] = field(default_factory=dict)  # space name -> record hashes of its posts
    before_late: list[str] = field(default_factory=list)  # alpha's versions on a when d was named
    after_removal: list[str] = field(default_factory=list)  # beta's posts made after e's removal
    removal: str = ""  # the address of the hosting record removing e from beta
    public: int = 0  # public posts made
    seed: int = DEFAULT_SEED
    links: dict[tuple[str, str], Link] = field(default_factory=dict)  # (from, to) -> relay `from` uses to reach `to`
    cuts: Counter[frozenset[str]] = field(default_factory=Counter)  # how many cuts hold each link down
    busy: dict[str, asyncio.Lock] = field(default_factory=dict)  # held while a node is down (a random kill) or used
    down: set[str] = field(default_factory=set)  # nodes the story has stopped (no random kill touches them)
    chaos_log: list[str] = field(default_factory=list)  # what the random schedule did, in order
    phases: list[str] = field(default_factory=list)  # each step of the story and when it ended (from the start)

    def cut(self, a: str, b: str) -> None:
        """Cut the link between `a` and `b`, both directions (until as many `mend`s)."""
        self.cuts[frozenset((a, b))] += 1
        self.links[(a, b)].cut()
        self.links[(b, a)].cut()

    def mend(self, a: str, b: str) -> None:
        """Undo one `cut` of the link between `a` and `b`; it is up again when no cut holds it."""
        pair = frozenset((a, b))
        self.cuts[pair] = max(0, self.cuts[pair] - 1)
        if self.cuts[pair] == 0:
            self.links[(a, b)].restore()
            self.links[(b, a)].restore()

    def home(self, agent: str) -> ServedNode:
        return self.nodes[AGENTS[agent]]

    def never_hosted(self, space: str) -> list[str]:
        """The nodes that never hosted `space` (e hosted beta until its removal; d hosts alpha from late on)."""
        ever = {*self.hosts[space], *(("e",) if space == "beta" else ())}
        return [n for n in NODES if n not in ever]


def log_of(node: ServedNode, space: str, space_id: str) -> list[tuple[str, str]]:
    """(hash, version) of every record in `node`'s log that is of the space or names its id (read-only)."""
    with sqlite3.connect(f"file:{node.data / 'bbs.db'}?mode=ro", uri=True) as conn:
        rows = conn.execute(
            "SELECT hash, version FROM records WHERE space = ? OR hash = ? OR instr(CAST(body AS TEXT), ?) > 0",
            (space_id, space_id, space_id),
        ).fetchall()
    return [(str(h), str(v)) for h, v in rows]


def bodies_of(node: ServedNode, space_id: str) -> dict[str, bytes]:
    """version -> canonical body of every record of the space in `node`'s log (read-only)."""
    with sqlite3.connect(f"file:{node.data / 'bbs.db'}?mode=ro", uri=True) as conn:
        rows = conn.execute("SELECT version, body FROM records WHERE space = ?", (space_id,)).fetchall()
    return {str(v): bytes(b) for v, b in rows}


async def space_digest(w: World, node: ServedNode, space_id: str | None) -> tuple[int, str]:
    path = "/v1/sync/digest" + ("" if space_id is None else f"?space={space_id}")
    d = await node.call(w.session, "GET", path)
    return int(d["count"]), str(d["sha256"])


# ---- the story ---------------------------------------------------------------------------------------------------


async def build(w: World) -> None:
    """Five nodes, each peered with every other through a relay; the agents; three spaces, their hosts and writers."""
    for name in NODES:
        w.nodes[name] = ServedNode(name, w.root / name)
        w.busy[name] = asyncio.Lock()
    await asyncio.gather(*(asyncio.to_thread(n.init) for n in w.nodes.values()))
    await asyncio.gather(*(n.start(w.session) for n in w.nodes.values()))
    for src in NODES:
        for dst in NODES:
            if src != dst:
                link = w.links[(src, dst)] = Link(w.nodes[dst].port)
                await link.start()
                await w.nodes[src].peer(w.session, w.nodes[dst], via=link.url)
    for agent, home in AGENTS.items():
        w.agents[agent] = await w.nodes[home].agent(w.session, agent)
    for space, (owner, named, writers) in SPACES.items():
        owner_node = w.home(owner)
        made = await owner_node.call(w.session, "POST", "/v1/spaces", {"name": space}, headers=w.agents[owner])
        space_id = w.spaces[space] = str(made["space_id"])
        w.hosts[space] = {AGENTS[owner], *named}
        for n in named:
            body = {"node": w.nodes[n].node_id, "role": "host"}
            await owner_node.call(w.session, "POST", f"/v1/spaces/{space_id}/hosts", body, headers=w.agents[owner])
        for writer in writers:
            body = {"agent_id": w.agents[writer]["X-Agent"], "role": "writer"}
            await owner_node.call(w.session, "POST", f"/v1/spaces/{space_id}/members", body, headers=w.agents[owner])


async def wait_for(what: str, probe: Any, timeout: float = CONVERGE_S) -> None:
    start = time.monotonic()
    while not await probe():
        if time.monotonic() - start > timeout:
            raise ScenarioFailed(f"timed out after {timeout:.0f}s waiting for {what}")
        await asyncio.sleep(0.2)


async def may_write_at_home(w: World, agent: str, space: str) -> bool:
    """Whether `agent`'s home node holds the space with `agent` a member (so it takes the agent's posts)."""
    path = f"/v1/spaces/{w.spaces[space]}"
    async with w.session.get(w.home(agent).url + path, headers=w.agents[agent]) as resp:
        return resp.status == 200


async def post(w: World, agent: str, space: str | None, text: str) -> str:
    """`agent` posts `text` from its home node into `space` (None: public); its record hash."""
    fields = {} if space is None else {"space": w.spaces[space]}
    async with w.busy[AGENTS[agent]]:  # waits while a random kill has the node down
        made = await w.home(agent).post(w.session, w.agents[agent], f"{space or 'public'} {text}", **fields)
    if space is not None:
        w.posts.setdefault(space, []).append(made)
    else:
        w.public += 1
    return made


async def first_posts(w: World) -> None:
    """Every writer and owner posts twice into its spaces from its home node; one agent of each node in public."""
    for space, (owner, _named, writers) in SPACES.items():
        for agent in (owner, *writers):
            await wait_for(f"{agent}'s node to hold {space}", lambda a=agent, s=space: may_write_at_home(w, a, s))
            for i in range(2):
                await post(w, agent, space, f"{agent} note {i}")
    for node, agent in PUBLIC.items():
        await post(w, agent, None, f"news from {node}")


async def hosts_hold(w: World, space: str, nodes: list[str] | None = None) -> bool:
    """Whether the space's hosts (or `nodes`) all give the same per-space digest, holding every post of it."""
    names = nodes if nodes is not None else sorted(w.hosts[space])
    try:
        digests = {await space_digest(w, w.nodes[n], w.spaces[space]) for n in names}
    except (aiohttp.ClientError, ScenarioFailed):
        return False
    if len(digests) != 1:
        return False
    return all(set(w.posts[space]) <= {h for h, _v in log_of(w.nodes[n], space, w.spaces[space])} for n in names)


async def kill_restart(w: World, name: str, seconds: float) -> None:
    """SIGKILL `name` and restart it `seconds` later, unless the story has it down or is using it."""
    if name in w.down or w.busy[name].locked():
        w.chaos_log.append(f"SIGKILL {name}: skipped ({'stopped by the story' if name in w.down else 'in use'})")
        return
    async with w.busy[name]:
        await asyncio.to_thread(w.nodes[name].kill)
        w.chaos_log.append(f"SIGKILL {name}")
        await asyncio.sleep(seconds)
        if name not in w.down:
            await w.nodes[name].start(w.session)
            w.chaos_log.append(f"restarted {name}")


async def cut_for(w: World, a: str, b: str, seconds: float) -> None:
    """Cut the link between `a` and `b` for `seconds`."""
    w.cut(a, b)
    w.chaos_log.append(f"cut {a} - {b}")
    await asyncio.sleep(seconds)
    w.mend(a, b)
    w.chaos_log.append(f"mended {a} - {b}")


async def chaos(w: World) -> None:
    """Run the seeded schedule from now: each kill and cut in the background; return when all have ended."""
    start = time.monotonic()
    running: list[asyncio.Task[None]] = []
    for event in draw_schedule(w.seed):
        await asyncio.sleep(max(0.0, start + event.at - time.monotonic()))
        if event.kind == "kill":
            running.append(asyncio.create_task(kill_restart(w, event.nodes[0], event.seconds)))
        else:
            a, b = event.nodes
            running.append(asyncio.create_task(cut_for(w, a, b, event.seconds)))
    await asyncio.gather(*running)


async def stop_for_story(w: World, name: str) -> None:
    """The story's own SIGKILL of `name` (it stays down until the heal); waits out a random kill in progress."""
    async with w.busy[name]:
        w.down.add(name)
        await asyncio.to_thread(w.nodes[name].kill)


async def partition_and_changes(w: World) -> None:
    """c stops; posts go on; d is named a host of alpha, e's hosting of beta removed; bea posts after it. The random
    schedule runs meanwhile, and has ended (every link mended, every node it killed restarted) when this returns."""
    for space in SPACES:
        await wait_for(f"the hosts of {space} to agree", lambda s=space: hosts_hold(w, s))
    await stop_for_story(w, "c")
    random_chaos = asyncio.create_task(chaos(w))
    try:
        await story_changes(w)
    finally:
        await random_chaos


async def story_changes(w: World) -> None:
    """The story's posts and changes while c is down, paced over the random schedule's window: the nine posts before
    d is named over its first half, the two after e's removal over its second."""
    pause = CHAOS_WINDOW_S / 2 / 9
    for agent, space in (("bea", "beta"), ("eve", "beta"), ("ann", "gamma"), ("ann", "alpha"), ("bob", "alpha")):
        await asyncio.sleep(pause)
        await post(w, agent, space, f"{agent} while c is away")
    for node, agent in PUBLIC.items():
        if node != "c":
            await asyncio.sleep(pause)
            await post(w, agent, None, f"more news from {node}")
    await wait_for("e to hold beta's posts so far", lambda: hosts_hold(w, "beta", ["b", "e"]))
    # d, named a host of alpha after its backlog (all of it on a and b first)
    await wait_for("the hosts of alpha to agree", lambda: hosts_hold(w, "alpha"))
    w.before_late = [v for _h, v in log_of(w.nodes["a"], "alpha", w.spaces["alpha"])]
    alpha = w.spaces["alpha"]
    body = {"node": w.nodes["d"].node_id, "role": "host"}
    async with w.busy["a"]:
        await w.nodes["a"].call(w.session, "POST", f"/v1/spaces/{alpha}/hosts", body, headers=w.agents["ann"])
    w.hosts["alpha"].add("d")
    await asyncio.sleep(KILL_LATE_HOST_AFTER_S)  # d is killed while its backlog may be on the way, and comes back later
    await stop_for_story(w, "d")
    # e's hosting of beta removed on b (its owner's node), then a post after it
    beta = w.spaces["beta"]
    async with w.busy["b"]:
        removed = await w.nodes["b"].call(
            w.session, "DELETE", f"/v1/spaces/{beta}/hosts/{w.nodes['e'].node_id}", headers=w.agents["bea"]
        )
    w.removal = str(removed["address"])
    w.hosts["beta"].discard("e")
    for i in range(2):
        await asyncio.sleep(CHAOS_WINDOW_S / 4)
        w.after_removal.append(await post(w, "bea", "beta", f"bea after e's removal {i}"))


async def heal(w: World) -> None:
    """c comes back and catches up; cal posts into beta from c once c holds e's removal; every host agrees."""
    for link in w.links.values():  # the schedule has mended its cuts; this makes sure
        link.restore()
    w.cuts.clear()
    await w.nodes["c"].start(w.session)
    await w.nodes["d"].start(w.session)
    w.down.clear()
    await wait_for("c to catch up on beta", lambda: hosts_hold(w, "beta"))
    w.after_removal.append(await post(w, "cal", "beta", "cal after the heal"))
    for space in SPACES:
        await wait_for(f"the hosts of {space} to agree", lambda s=space: hosts_hold(w, s))

    async def public_equal() -> bool:
        try:
            return len({await space_digest(w, n, None) for n in w.nodes.values()}) == 1
        except (aiohttp.ClientError, ScenarioFailed):
            return False

    await wait_for("the public digest to agree", public_equal)
    await asyncio.sleep(6)  # one more reconciliation round: anything that would leak has had its chance


# ---- the checks --------------------------------------------------------------------------------------------------


@dataclass
class Served:
    """What a host serves one asking node of a space: its changes feed's items of the space or naming its id; the
    ids of the space its fetch answers other than `missing`; the versions of the space a reconciliation from an empty
    set finds needed (the responder's messages name every record it serves), or whose bytes, or the space id's,
    are in the responder's messages."""

    feed: int
    fetch: int
    reconcile: int


async def served_to(
    w: World, asker: ServedNode, host: ServedNode, space_id: str, held: list[tuple[str, str]]
) -> Served:
    """What `host` serves `asker` of the space whose records are `held` ((hash, version) pairs), asked with `asker`'s
    own node key."""
    key = key_files.load_key(asker.data / "node.key")
    client = PeerClient(w.session, key, host.node_id, host.url)
    leaked, since = 0, 0
    while True:
        page = await client.changes(since, None, 500, 0)
        if not isinstance(page, m.Changes):
            raise ScenarioFailed(f"{host.name} answered {asker.name}'s feed with {type(page).__name__}")
        leaked += sum(space_id in item.body().decode() or item.hash == space_id for item in page.items)
        if not page.more or page.next == since:
            break
        since = page.next
    ids = [h for h, _v in held][:256]
    fetched = await client.fetch(ids)
    versions = {v for _h, v in held}
    neg = Negentropy(VectorStorage([]))  # an empty set: the responder has to name every record it serves
    message: bytes | None = neg.initiate()
    have: list[bytes] = []
    need: list[bytes] = []
    replies = b""
    while message is not None:
        reply = await client.reconcile(message)
        if reply.message is None:
            break
        replies += bytes.fromhex(reply.message)
        message = neg.reconcile(bytes.fromhex(reply.message), have, need)
    named = {n.hex() for n in need} & versions
    named |= {v for v in versions if bytes.fromhex(v) in replies}
    named |= {space_id} if bytes.fromhex(space_id) in replies else set()
    return Served(leaked, len(set(ids) - set(fetched.missing)), len(named))


async def no_leak(w: World) -> None:
    for space, space_id in w.spaces.items():
        held = log_of(w.nodes[AGENTS[SPACES[space][0]]], space, space_id)
        for name in w.never_hosted(space):
            node = w.nodes[name]
            in_log = len(log_of(node, space, space_id))
            digest = await space_digest(w, node, space_id)
            try:
                served = [await served_to(w, node, w.nodes[host], space_id, held) for host in sorted(w.hosts[space])]
            except (SyncError, NegentropyError) as exc:
                w.check("no_leak", False, f"{name} could not ask the hosts of {space}: {exc}")
                continue
            feed, fetch, recon = (sum(getattr(s, f) for s in served) for f in ("feed", "fetch", "reconcile"))
            ok = in_log == 0 and digest[0] == 0 and feed == fetch == recon == 0 and len(held) > 0
            w.check("no_leak", ok, f"{space} on {name}: log {in_log}, feed {feed}, fetch {fetch}, reconcile {recon} "
                                   f"of {len(held)}, digest {digest[0]}")  # fmt: skip
        # the probes are not blind: asked by one host of another, they find the space
        one, other = sorted(w.hosts[space])[:2]
        s = await served_to(w, w.nodes[one], w.nodes[other], space_id, held)
        seen = s.feed > 0 and s.fetch == min(len(held), 256) and s.reconcile >= len(held)
        w.check("no_leak", seen, f"{space} as host {one} asks {other}: feed {s.feed}, fetch {s.fetch}, "
                                 f"reconcile {s.reconcile}")  # fmt: skip


async def hosts_agree(w: World) -> None:
    for space, space_id in w.spaces.items():
        names = sorted(w.hosts[space])
        digests = {n: await space_digest(w, w.nodes[n], space_id) for n in names}
        bodies = [bodies_of(w.nodes[n], space_id) for n in names]
        same = len(set(digests.values())) == 1 and all(b == bodies[0] for b in bodies)
        count = next(iter(digests.values()))[0]
        w.check("hosts_agree", same and count > 0, f"{space} on {','.join(names)}: {count} records, same {same}")


async def late_and_removed(w: World) -> None:
    d_alpha = {v for _h, v in log_of(w.nodes["d"], "alpha", w.spaces["alpha"])}
    missing = set(w.before_late) - d_alpha
    w.check("late_host_backlog", bool(w.before_late) and not missing,
            f"d holds {len(d_alpha)} records of alpha; of the {len(w.before_late)} before it was named, "
            f"missing {len(missing)}")  # fmt: skip
    e_beta = log_of(w.nodes["e"], "beta", w.spaces["beta"])
    e_hashes = {h for h, _v in e_beta}
    got_after = set(w.after_removal) & e_hashes
    had_before = set(w.posts["beta"]) - set(w.after_removal)
    kept = had_before <= e_hashes
    learned = w.removal in e_hashes
    w.check("removed_host_nothing_new", kept and learned and not got_after and len(w.after_removal) == 3,
            f"e holds {len(e_beta)} records of beta, all {len(had_before)} earlier posts {kept}, "
            f"its removal {learned}; of the {len(w.after_removal)} posts after it: {len(got_after)}")  # fmt: skip


async def public_digest(w: World) -> None:
    digests = {n: await space_digest(w, node, None) for n, node in w.nodes.items()}
    count = next(iter(digests.values()))[0]
    due = len(AGENTS) + w.public  # each agent's identity document and the public posts: the federation without spaces
    w.check("public_digest_equal", len(set(digests.values())) == 1 and count == due,
            f"{count} public versions (due {due}: {len(AGENTS)} agents, {w.public} posts) on all five; "
            f"distinct digests {len(set(digests.values()))}")  # fmt: skip


def schedule_text(seed: int) -> str:
    """The seed and the schedule it draws, as printed before a run."""
    lines = [f"seed {seed}: random schedule from c's stop (window {CHAOS_WINDOW_S:.0f}s)"]
    return "\n".join(lines + [f"  {e}" for e in draw_schedule(seed)])


async def run(root: Path, seed: int = DEFAULT_SEED) -> Report:
    """The whole drill in `root` with the random schedule of `seed`; every check's result (a step that could not run
    fails the checks it owns)."""
    started = time.monotonic()
    print(schedule_text(seed), flush=True)
    async with aiohttp.ClientSession(timeout=TIMEOUT) as session:
        w = World(root, session, seed=seed)
        try:
            for step in (build, first_posts, partition_and_changes, heal):
                await step(w)
                w.phases.append(f"{step.__name__} {time.monotonic() - started:.1f}s")
            await no_leak(w)
            await hosts_agree(w)
            await late_and_removed(w)
            await public_digest(w)
        except ScenarioFailed as exc:
            for name in CHECKS:
                w.results.setdefault(name, Check(False, f"the drill stopped: {exc}"))
            print(f"the drill stopped: {exc}", file=sys.stderr)
        finally:
            for node in w.nodes.values():
                await asyncio.to_thread(node.kill)
            for link in w.links.values():
                await link.close()
    wall = time.monotonic() - started
    results = w.outcomes()
    done = "\n".join(
        [
            schedule_text(seed),
            "what it did: " + "; ".join(w.chaos_log),
            "steps ended: " + ", ".join(w.phases),
            "",
            table(results),
        ]
    )
    return Report(results, wall, done + f"\n\nspace federation drill wall time: {wall:.1f}s (seed {seed})")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seed", type=int, default=DEFAULT_SEED, help=f"the random schedule's seed ({DEFAULT_SEED})")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bbs-space-fed-") as tmp:
        report = asyncio.run(run(Path(tmp), args.seed))
    return checks.verdict(report, "space federation drill")


if __name__ == "__main__":
    sys.exit(main())
