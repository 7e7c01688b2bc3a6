"""Drill: spaces across a federation of five real `bbs serve` nodes (issue 38, "Done when"; docs/spaces.md, "Which
nodes host a space"), with the adversaries of scenarios/chaos.py turned on spaces: amnesia (a host restored from an
old backup), a replaying peer and an equivocating member. About 35 to 55 s on a 2-core machine (each wait bounded by
45 s).

Five nodes a to e, each peered with every other (so a node that does not host a space still pulls from its hosts),
each peer link through its own TCP relay (scenarios/fednet.py `Link`, as in scenarios/chaos.py) so it can be cut.

- `alpha`: created on a by ann (a); bob (b) and eq (a; it holds its own key, imported on b and d) write; hosted by a
  and b, and by d, named late.
- `beta`: created on b by bea (b); cal (c), cid (c) and eve (e) write; hosted by b, c and e, until e's hosting is
  removed.
- `gamma`: created on c by cy (c); ann (a) writes; hosted by c and a.

Agents post into their spaces from their home nodes, and one agent of each node posts in public. The adversaries:

- replay: e (a host of beta) asks b for its changes feed from the start, signed with e's node key over e's relay to
  b, whose tap keeps the request's bytes (fednet `Capture`, as chaos.py captures a forwarded lease); the answer holds
  beta's records. The bytes are replayed at once over d's relay (d never hosts beta) and again after the heal over
  e's relay (e's hosting of beta removed by then).
- amnesia: c is backed up (`bbs backup`); after it cid is removed from beta (on b) and bea and ann post into beta and
  gamma; c takes all three records by sync. When the story stops c (below), it is restored from the old backup
  (`bbs restore --force`, a new store epoch) while down, and rejoins at the heal.
- equivocation: eq signs two versions of one address in alpha (tags differ) and, with the link between a and b cut,
  posts one to a and one to b; both are stored. A third version is kept for the checks.

Then c (a host of
beta and gamma) is stopped (SIGKILL); while it is down, posts go on in beta, gamma and public, d is named a host of
alpha and killed half a second later (its backlog may be on the way), and e's hosting of beta is removed; bea posts
into beta after the removal. c and d come back, catch up, and cal posts into beta from c. Once every host agrees,
each check, named. While the posts and changes go on (a window of CHAOS_WINDOW_S seconds from c's stop), a
schedule drawn from `--seed` (printed with the seed) SIGKILLs and restarts random running nodes (never c nor d once
the story has stopped it; a post or call to a node waits while it is down) and cuts random links between two of
a, b, d and e for a few seconds; the story's posts are paced over the window; every link is mended before the heal.

- `no_leak`: a node that never hosted a space holds no record of it, nor its id, in its log (`records`, read-only
  from its database, either engine); each host's changes feed, fetch and reconciliation, asked with that node's own key
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
- `amnesia_restored`: the restored c lacked the three records made after its backup (read before it started again),
  holds them again, its digests of beta and gamma equal another host's, and it holds nothing of alpha (log, digest).
- `removed_member_refused`: cid read beta through c before its removal (space and entry 200); after the restore and
  the heal, c holds the removal again (by sync) and cid gets 404 for the space (`unknown_space`), for a beta entry
  (`entry_not_found`) and for a post into beta (`unknown_space`), as for a space never held; no other record of beta
  is named in those answers.
- `replay_refused`: each replay is answered 401 with a code of a replay refused (`replayed_request`: the nonce was
  seen; `stale_boot`: b restarted since; `stale_request`: older than 60 s) and names no record of beta nor its id.
  The signature binds the requester (e's key, the relay address, the path and query, b's boot id), so whoever sends
  the bytes, b judges them as e's, and refuses them as already used.
- `equivocation_agreed`: every host of alpha (a, b, d) shows the same version of the address (the lower SHA-256 of
  the signed bytes) flagged `equivocated` with 2 versions, and refuses the third version 409 `equivocation` with its
  digest unchanged.

With `--postgresql NODE` (a, b, d or e; not c, whose story is a SQLite backup's restore) that node keeps its
database on a throwaway PostgreSQL cluster (`bbs serve --store postgresql://...`), a host among SQLite hosts: the same
story, the same checks (b: a host of alpha and beta, beta's creator, the node whose feed request is replayed).

    python -m scenarios.space_fed [--seed N] [--postgresql NODE]
    tests/hardening/test_space_fed_drill.py    # the CI forms (all on SQLite; b on PostgreSQL)
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import random
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

from agent import identity_file
from identity import canonical, key_files, records
from scenarios import checks
from scenarios.checks import Check, Report, table
from scenarios.fednet import Capture, Link, ScenarioFailed, ServedNode, bbs, postgresql_databases, send_raw
from sync import messages as m
from sync.client import PeerClient, SyncError
from sync.negentropy import Negentropy, NegentropyError, VectorStorage
from wire.api import PostEntry, unsigned_entry

NODES = ("a", "b", "c", "d", "e")
# name -> home node; eq holds its own key (imported on b and d too) and equivocates in alpha
AGENTS = {"ann": "a", "bob": "b", "bea": "b", "cal": "c", "cid": "c", "cy": "c", "dan": "d", "eq": "a", "eve": "e"}
# name -> (owner, creation node's hosts named besides it, {writer: role})
SPACES: dict[str, tuple[str, tuple[str, ...], tuple[str, ...]]] = {
    "alpha": ("ann", ("b",), ("bob", "eq")),
    "beta": ("bea", ("c", "e"), ("cal", "cid", "eve")),  # cid: removed after c's backup
    "gamma": ("cy", ("a",), ("ann",)),
}
PUBLIC = {"a": "ann", "b": "bea", "c": "cy", "d": "dan", "e": "eve"}  # node -> the agent posting public there
KILL_LATE_HOST_AFTER_S = 0.5  # d's SIGKILL after it is named a host: mid-backlog or just after, either must hold
CONVERGE_S = 45.0  # the bound on every wait for sync (a late host's wake is at most 10 s; a reconciliation 5 s)
TIMEOUT = aiohttp.ClientTimeout(total=30)
DEFAULT_SEED = 38  # fixed, so CI is reproducible; `--seed N` draws another schedule
CHAOS_WINDOW_S = 10.0  # the random kills and cuts start within this many seconds of c's stop
KILLS, CUTS = 3, 4  # random SIGKILL-and-restarts, random link cuts per run
POSTGRESQL_ABLE = ("a", "b", "d", "e")  # the nodes `--postgresql` may put there: c's story is a SQLite restore
KILLABLE = ("a", "b", "d", "e")  # c is down for the whole window (no kill nor cut draws it); d: no kill after the
# story has killed it
REPLAY_LIMIT = 499  # the page size of the captured feed request, so the tap tells it from the pullers' requests
REPLAY_CODES = ("replayed_request", "stale_boot", "stale_request")  # sync/auth.py's 401 refusals of a replay


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
    "amnesia_restored": "the host restored from an old backup holds its spaces whole again, nothing of another",
    "removed_member_refused": "a member removed after that backup cannot read nor post through the restored host",
    "replay_refused": "a host's captured signed feed request, replayed, is refused 401 and answers nothing of it",
    "equivocation_agreed": "a member's two versions of one address, posted to two hosts: one version shown everywhere",
}


@dataclass(frozen=True)
class Replayed:
    """One replay of the captured request: when and over which link, the status and problem code answered, and
    whether the answer named any record of the space or its id."""

    what: str
    status: int
    code: str | None
    leaked: bool


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
    capture: Capture = field(default_factory=lambda: Capture(f"/v1/sync/changes?since=0&limit={REPLAY_LIMIT}&"))
    replays: list[Replayed] = field(default_factory=list)  # each replay of the captured request and its answer
    replay_control: int = -1  # items of beta in the captured request's own answer
    lost: list[str] = field(default_factory=list)  # records c held when killed that its old backup lacks
    amnesia_missing: int = -1  # how many of `lost` the restored c's log lacked before it started again
    restoring: asyncio.Task[None] | None = None  # c's restore from its backup, while it is down
    member_removal: str = ""  # the address of the record removing cid from beta (after c's backup)
    member_before: tuple[int, int] = (0, 0)  # cid's reads through c before its removal: the space, an entry
    eq: dict[str, dict[str, str]] = field(default_factory=dict)  # node -> eq's headers there (a, b and d)
    equivocated: list[dict[str, Any]] = field(default_factory=list)  # eq's three signed versions of one address
    stores: dict[str, str] = field(default_factory=dict)  # node -> its PostgreSQL database's URL (others: bbs.db)

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
    named = space_id.encode()  # the id in the signed body (ASCII hex), read alike from either engine's bytes
    rows = node.read("SELECT hash, version, space, body FROM records")
    return [(str(h), str(v)) for h, v, space, body in rows if space_id in (space, h) or named in bytes(body)]


def bodies_of(node: ServedNode, space_id: str) -> dict[str, bytes]:
    """version -> canonical body of every record of the space in `node`'s log (read-only)."""
    return {str(v): bytes(b) for v, b in node.read("SELECT version, body FROM records WHERE space = ?", (space_id,))}


async def space_digest(w: World, node: ServedNode, space_id: str | None) -> tuple[int, str]:
    path = "/v1/sync/digest" + ("" if space_id is None else f"?space={space_id}")
    d = await node.call(w.session, "GET", path)
    return int(d["count"]), str(d["sha256"])


# ---- the story ---------------------------------------------------------------------------------------------------


async def build(w: World) -> None:
    """Five nodes, each peered with every other through a relay; the agents; three spaces, their hosts and writers."""
    for name in NODES:
        w.nodes[name] = ServedNode(name, w.root / name, store=w.stores.get(name, ""))
        w.busy[name] = asyncio.Lock()
    await asyncio.gather(*(asyncio.to_thread(n.init) for n in w.nodes.values()))
    await asyncio.gather(*(n.start(w.session) for n in w.nodes.values()))
    for src in NODES:
        for dst in NODES:
            if src != dst:
                link = w.links[(src, dst)] = Link(w.nodes[dst].port, tap=w.capture.tap((src, dst)))
                await link.start()
                await w.nodes[src].peer(w.session, w.nodes[dst], via=link.url)
    for agent, home in AGENTS.items():
        w.agents[agent] = await w.nodes[home].agent(w.session, agent)
    await import_equivocator(w)
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


async def import_equivocator(w: World) -> None:
    """eq's identity (made on a) exported and imported on b and d, the hosts its versions go to (it signs them)."""
    identity = w.root / "eq.identity"
    await asyncio.to_thread(bbs, "agent", "export", "eq", "--data", str(w.nodes["a"].data), "--out", str(identity))
    w.eq["a"] = w.agents["eq"]

    async def imported(name: str) -> None:
        data = str(w.nodes[name].data)
        out = await asyncio.to_thread(bbs, "agent", "import", str(identity), "--data", data, "--name", "eq", "--json")
        created = json.loads(out)
        w.eq[name] = {"Authorization": f"Bearer {created['api_key']}", "X-Agent": created["agent_id"]}

    await asyncio.gather(imported("b"), imported("d"))


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


async def capture_feed_request(w: World) -> None:
    """e, a host of beta, asks b for its changes feed from the start, signed with e's node key, over e's relay to b,
    whose tap keeps the request's bytes; its own answer counts beta's items (the control). Replayed at once over d's
    relay (d never hosts beta): the same bytes, so the same signer (e) and the same address signed for."""
    await wait_for("the hosts of beta to agree", lambda: hosts_hold(w, "beta"))
    e, b = w.nodes["e"], w.nodes["b"]
    client = PeerClient(w.session, key_files.load_key(e.data / "node.key"), b.node_id, w.links[("e", "b")].url)
    w.capture.arm(("e", "b"))
    try:
        page = await client.changes(0, None, REPLAY_LIMIT, 0)
    finally:
        w.capture.arm(None)
    if not isinstance(page, m.Changes) or w.capture.raw is None:
        raise ScenarioFailed(f"no feed request of e to b captured ({type(page).__name__})")
    beta = w.spaces["beta"]
    w.replay_control = sum(beta in item.body().decode() or item.hash == beta for item in page.items)
    w.log(f"replay: captured e's signed feed request to b ({len(w.capture.raw)} bytes); its answer held "
          f"{w.replay_control} items of beta")  # fmt: skip
    await replay(w, "d", "at once, over d's relay (d never hosts beta)")


async def replay(w: World, via: str, what: str) -> None:
    """Send the captured bytes to b over `via`'s relay; note the status, the problem code and whether the answer
    names any record of beta (by hash or version) or beta's id."""
    assert w.capture.raw is not None
    status, body = await send_raw(w.links[(via, "b")].port, w.capture.raw)
    text = body.decode(errors="replace")
    beta = w.spaces["beta"]
    named = {beta} | {x for pair in log_of(w.nodes["b"], "beta", beta) for x in pair}
    try:
        code = json.loads(body).get("code") if body else None
    except (ValueError, AttributeError):
        code = None
    w.replays.append(Replayed(what, status, code, any(x in text for x in named)))
    w.log(f"replay {what}: answered {status} {code}")


async def back_up_c(w: World) -> None:
    """c (a host of beta and gamma) is backed up (`bbs backup`); after it, cid is removed from beta (on b, by beta's
    owner) and bea and ann post into beta and gamma from their nodes. c takes all of it by sync before the story
    kills it, so its restore from the backup loses it: `lost`."""
    beta = w.spaces["beta"]
    c = w.nodes["c"]
    cid = w.agents["cid"]
    w.member_before = (
        (await c.attempt(w.session, "GET", f"/v1/spaces/{beta}", headers=cid))[0],
        (await c.attempt(w.session, "GET", f"/v1/entries/{w.posts['beta'][0]}", headers=cid))[0],
    )
    archive = w.root / "c-backup.tar"
    await asyncio.to_thread(bbs, "backup", "--data", str(c.data), "--out", str(archive))
    w.log(f"amnesia: c backed up; cid reads beta through c: {w.member_before}")
    async with w.busy["b"]:
        removed = await w.nodes["b"].call(
            w.session, "DELETE", f"/v1/spaces/{beta}/members/{cid['X-Agent']}", headers=w.agents["bea"]
        )
    w.member_removal = str(removed["address"])
    w.lost = [
        w.member_removal,
        await post(w, "bea", "beta", "after c's backup"),
        await post(w, "ann", "gamma", "after c's backup"),
    ]

    async def c_holds_lost() -> bool:
        held = {h for s in ("beta", "gamma") for h, _v in log_of(c, s, w.spaces[s])}
        return set(w.lost) <= held

    await wait_for("c to hold what its backup lacks", c_holds_lost)


async def equivocate(w: World) -> None:
    """eq signs three versions of one address in alpha (tags differ); with the link between a and b cut (no other
    node holds alpha yet), the first is posted to a and the second to b, both stored; the third is kept for the
    check. The random kills and cuts, and d's late hosting, come after."""
    identity = identity_file.load(w.root / "eq.identity")
    created_at = canonical.now_created_at()
    for tag in ("v1", "v2", "v3"):
        entry = PostEntry("finding", "inform", "one address, two bodies", tags=[tag], space=w.spaces["alpha"])
        w.equivocated.append(records.sign(unsigned_entry(entry, identity.key.did, created_at, []), identity.key))
    address = records.compute_hash(w.equivocated[0])
    assert all(records.compute_hash(r) == address for r in w.equivocated), "the versions must share one address"
    w.cut("a", "b")
    try:
        answers = [await w.nodes[n].attempt(w.session, "POST", "/v1/entries", {"record": r}, headers=w.eq[n])
                   for n, r in zip("ab", w.equivocated, strict=False)]  # fmt: skip
    finally:
        w.mend("a", "b")
    w.log(f"equivocation in alpha: {address[:12]} posted to a and b: {[status for status, _t in answers]}")
    if any(status != 201 for status, _t in answers):
        raise ScenarioFailed(f"an equivocating version was not stored: {answers}")


async def restore_c(w: World) -> None:
    """While c is down: `bbs restore --force` from its early backup; count what of `lost` its log lacks now."""
    c = w.nodes["c"]
    await asyncio.to_thread(bbs, "restore", "--data", str(c.data), "--from", str(w.root / "c-backup.tar"), "--force")
    held = {h for s in ("beta", "gamma") for h, _v in log_of(c, s, w.spaces[s])}
    w.amnesia_missing = len(set(w.lost) - held)
    w.chaos_log.append(f"c restored from its backup (lacks {w.amnesia_missing} of {len(w.lost)})")


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
    w.restoring = asyncio.create_task(restore_c(w))
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
    if w.restoring is not None:
        await w.restoring
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
    await replay(w, "e", "after the heal, over e's relay (e's hosting of beta removed)")


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
        asked = len({h for h, _v in held[:256]})  # an equivocated address is one id with two versions
        seen = s.feed > 0 and s.fetch == asked and s.reconcile >= len(held)
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


async def amnesia(w: World) -> None:
    c = w.nodes["c"]
    held = {h for s in ("beta", "gamma") for h, _v in log_of(c, s, w.spaces[s])}
    back = len(set(w.lost) & held)
    same = {}
    for space in ("beta", "gamma"):
        other = sorted(w.hosts[space] - {"c"})[0]
        same[space] = await space_digest(w, c, w.spaces[space]) == await space_digest(
            w, w.nodes[other], w.spaces[space]
        )
    alpha = len(log_of(c, "alpha", w.spaces["alpha"])), (await space_digest(w, c, w.spaces["alpha"]))[0]
    ok = w.amnesia_missing == len(w.lost) > 0 and back == len(w.lost) and all(same.values()) and alpha == (0, 0)
    w.check("amnesia_restored", ok, f"c restored lacked {w.amnesia_missing} of the {len(w.lost)} records after its "
            f"backup, holds {back} again; digest equal to another host's: {same}; "
            f"alpha in its log and digest: {alpha}")  # fmt: skip


async def removed_member(w: World) -> None:
    c, beta, cid = w.nodes["c"], w.spaces["beta"], w.agents["cid"]
    learned = w.member_removal in {h for h, _v in log_of(c, "beta", beta)}
    show = await c.attempt(w.session, "GET", f"/v1/spaces/{beta}", headers=cid)
    read = await c.attempt(w.session, "GET", f"/v1/entries/{w.posts['beta'][0]}", headers=cid)
    body = {"entry_type": "finding", "performative": "inform", "content": "cid after its removal", "space": beta}
    wrote = await c.attempt(w.session, "POST", "/v1/entries", body, headers=cid)
    # what the requests themselves named (the space id, the entry's hash) aside: no other record of beta is named
    named = {x for pair in log_of(c, "beta", beta) for x in pair} - {w.posts["beta"][0]}
    seen = any(x in text for _status, text in (show, read, wrote) for x in named)
    refused = all(status == 404 for status, _t in (show, read, wrote))  # as for a space or entry never held
    ok = w.member_before == (200, 200) and learned and refused and not seen
    answers = ", ".join(f"{what} {status} {_code(text)}" for what, (status, text) in
                        (("space", show), ("entry", read), ("post", wrote)))  # fmt: skip
    w.check("removed_member_refused", ok, f"cid through c before its removal: space, entry {w.member_before}; after "
            f"the restore and heal: its removal back {learned}; {answers}; "
            f"another record of beta named {seen}")  # fmt: skip


def _code(text: str) -> str | None:
    try:
        problem = json.loads(text)
    except ValueError:
        return None
    return problem.get("code") if isinstance(problem, dict) else None


async def replays_refused(w: World) -> None:
    answers = [f"{r.what}: {r.status} {r.code}, beta named {r.leaked}" for r in w.replays]
    refused = all(r.status == 401 and r.code in REPLAY_CODES and not r.leaked for r in w.replays)
    ok = w.replay_control > 0 and len(w.replays) == 2 and refused
    w.check("replay_refused", ok, f"e's feed request to b answered {w.replay_control} items of beta when sent; "
            f"replayed {'; '.join(answers)}")  # fmt: skip


async def equivocation_agreed(w: World) -> None:
    address = records.compute_hash(w.equivocated[0])
    winner = min(w.equivocated[:2], key=lambda r: canonical.sha256_hex(canonical.canonical_bytes(r)))
    shown, refused = {}, {}
    for name in sorted(w.hosts["alpha"]):
        node = w.nodes[name]
        found = await node.call(w.session, "GET", f"/v1/entries/{address}")
        first = found["entries"][0]
        shown[name] = (tuple(first["tags"]), first["equivocated"], first.get("versions"))
        before = await space_digest(w, node, w.spaces["alpha"])
        status, text = await node.attempt(
            w.session, "POST", "/v1/entries", {"record": w.equivocated[2]}, headers=w.eq[name]
        )
        refused[name] = (status, _code(text), await space_digest(w, node, w.spaces["alpha"]) == before)
    one = set(shown.values()) == {(tuple(winner["tags"]), True, 2)}
    ok = one and set(refused.values()) == {(409, "equivocation", True)}
    w.check("equivocation_agreed", ok, f"shown (tags, equivocated, versions) by {shown}; the winner {winner['tags']};"
            f" a third version refused (status, code, digest unchanged): {refused}")  # fmt: skip


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


async def run(root: Path, seed: int = DEFAULT_SEED, stores: dict[str, str] | None = None) -> Report:
    """The whole drill in `root` with the random schedule of `seed`; every check's result (a step that could not run
    fails the checks it owns). `stores`: node name -> the PostgreSQL URL (an empty database) it keeps its database
    at, for nodes of POSTGRESQL_ABLE; the others' are SQLite files."""
    stores = dict(stores or {})
    if not set(stores) <= set(POSTGRESQL_ABLE):
        raise ValueError(f"only {', '.join(POSTGRESQL_ABLE)} may be on PostgreSQL, not {sorted(stores)}")
    started = time.monotonic()
    print(schedule_text(seed), flush=True)
    async with aiohttp.ClientSession(timeout=TIMEOUT) as session:
        w = World(root, session, seed=seed, stores=stores)
        try:
            steps = (build, first_posts, capture_feed_request, back_up_c, equivocate, partition_and_changes, heal)
            for step in steps:
                await step(w)
                w.phases.append(f"{step.__name__} {time.monotonic() - started:.1f}s")
            await no_leak(w)
            await hosts_agree(w)
            await late_and_removed(w)
            await public_digest(w)
            await amnesia(w)
            await removed_member(w)
            await replays_refused(w)
            await equivocation_agreed(w)
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
    on_pg = "".join(f"{name} on PostgreSQL; " for name in sorted(stores))
    done = "\n".join(
        [
            on_pg + schedule_text(seed),
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
    parser.add_argument(
        "--postgresql", choices=POSTGRESQL_ABLE, help="this node's database on a throwaway PostgreSQL cluster"
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bbs-space-fed-") as tmp, contextlib.ExitStack() as stack:
        stores = {args.postgresql: stack.enter_context(postgresql_databases())()} if args.postgresql else {}
        report = asyncio.run(run(Path(tmp), args.seed, stores))
    return checks.verdict(report, "space federation drill")


if __name__ == "__main__":
    sys.exit(main())
