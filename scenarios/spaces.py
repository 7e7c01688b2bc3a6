"""Drill: one `bbs serve` node, three spaces with overlapping members, agents writing over REST, MCP and the CLI, and
nobody reading what it may not (issue 37; docs/spaces.md). About 30 s.

The household: mom, dad, two kids, a friend of the kids and an outsider, each an agent of the node.

- `family` (mom owns it; dad and kid1 write, kid2 reads), `finance` (dad owns it; mom writes), `kids` (kid1 owns it;
  kid2 and friend write). Every entry of a space carries its space's marker word; public entries carry `pubword`.
- Writes go through each interface an agent has: REST (`POST /v1/entries`, bus messages, tasks), the real MCP SDK
  client over streamable HTTP (`bbs serve --mcp-port`, the `post`, `message` and `task` tools) and the CLI (`bbs post
  --space`, `bbs task lease --space`). A task of one key, `chores`, is declared and leased inside each space by an
  agent of it (its title carries the space's marker), and a public one of that key besides: four tasks.
  Everyone subscribes to the drill's tag, and a family entry is directed to the outsider and responds to a public
  entry.
- `no_leak`: every agent asks through every path it has, and no answer holds a marker of a space it does not read,
  nor the hash of one of its entries (a link or an envelope naming it):
  REST reads by id, by hash and `?ids=`, search with words (each marker) and by filters with `hops`, the feed, the
  inbox and its push to each agent's endpoint (scenarios/bench/push_receiver.py), the bus, NLIP, the dashboard's
  provenance, graph and bus projects; the tasks (each by id, the ready list, the graph as JSON, DOT and Mermaid, the
  dashboard's task board and DAG); MCP `read`, `search`, `inbox`, `message` and `task`; `bbs search`, `bbs tail`
  and `bbs tasks` (ready and graph).
  `sees_own`: each agent finds every entry of the spaces it reads, and each interface (REST, MCP, the CLI) shows it
  every space it reads (so no probe is blind).
- `removal_within_1s`: kid2 (a reader) is removed from family, mom (a writer with posts) from finance; each reads
  nothing of the space within a second of the removal's answer, through reads, search and the feed. Dad then posts
  into both: neither is pushed it, and the second `no_leak` round covers every path again.
- `late_member_reads_all`: the friend is added to family afterwards and reads all of it (feed and search).

    python -m scenarios.spaces
    tests/hardening/test_spaces_drill.py    # the CI form
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from scenarios import checks
from scenarios.bench.harness import BenchFailure, stop_process
from scenarios.bench.push import start_receiver
from scenarios.checks import Check, Report, table
from scenarios.fednet import ScenarioFailed, ServedNode, free_port

AGENTS = ("mom", "dad", "kid1", "kid2", "friend", "outsider")
SPACES: dict[str, tuple[str, dict[str, str]]] = {  # name -> (owner, {member: role})
    "family": ("mom", {"dad": "writer", "kid1": "writer", "kid2": "reader"}),
    "finance": ("dad", {"mom": "writer"}),
    "kids": ("kid1", {"kid2": "writer", "friend": "writer"}),
}
MARKERS = {"family": "famword", "finance": "finword", "kids": "kidword", None: "pubword"}
TAG = "drill"
WINDOW_S = 1.0  # the bound: a removed member reads nothing within a second of the removal
TIMEOUT = aiohttp.ClientTimeout(total=30)

CHECKS: dict[str, str] = {
    "spaces_made": "three spaces with overlapping members, created and joined over REST and the CLI",
    "writes_every_interface": "entries posted into spaces over REST, MCP and the CLI",
    "tasks_in_spaces": "one key declared and leased in each space and in public: four tasks, each in its space",
    "no_leak": "no agent sees a marker of a space it does not read, through any path it has",
    "sees_own": "every agent finds every entry of the spaces it reads, and the public ones",
    "removal_within_1s": "a removed reader and a removed writer read nothing of the space within 1 s",
    "late_member_reads_all": "a member added later reads the whole space (feed and search)",
}


@dataclass
class Agent:
    name: str
    agent_id: str
    api_key: str

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.api_key}"}


@dataclass
class World(checks.Drill):
    NAMES = CHECKS
    root: Path
    session: aiohttp.ClientSession
    node: ServedNode = field(init=False)
    agents: dict[str, Agent] = field(default_factory=dict)
    spaces: dict[str, str] = field(default_factory=dict)  # name -> id
    entries: dict[str | None, list[dict[str, Any]]] = field(
        default_factory=dict
    )  # space name (None: public) -> entries
    tasks: dict[str | None, dict[str, Any]] = field(default_factory=dict)  # space name (None: public) -> its task
    receiver: subprocess.Popen[str] | None = None  # scenarios/bench/push_receiver.py: every agent's push endpoint
    receiver_url: str = ""
    # name -> (owner, {member: role}) as the drill changes it (a copy of SPACES)
    layout: dict[str, tuple[str, dict[str, str]]] = field(
        default_factory=lambda: {name: (owner, dict(members)) for name, (owner, members) in SPACES.items()}
    )

    def readers(self, space: str) -> set[str]:
        owner, members = self.layout[space]
        return {owner, *members}

    def reads(self, agent: str) -> set[str | None]:
        """The spaces (None: public) `agent` reads now."""
        return {None, *(name for name in SPACES if agent in self.readers(name))}

    async def rest(self, method: str, path: str, who: Agent | None, body: Any = None) -> tuple[int, str]:
        headers = who.headers if who is not None else self.node.admin
        async with self.session.request(method, self.node.url + path, json=body, headers=headers) as resp:
            return resp.status, await resp.text()

    async def ok(self, method: str, path: str, who: Agent | None, body: Any = None) -> Any:
        status, text = await self.rest(method, path, who, body)
        if status >= 300:
            raise ScenarioFailed(f"{method} {path}: {status} {text}")
        return json.loads(text)


def cli(w: World, who: Agent, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "BBS_API_KEY": who.api_key, "BBS_NODE": w.node.url}
    return subprocess.run(
        [sys.executable, "-m", "node.cli", *args], capture_output=True, text=True, env=env, timeout=60, check=False
    )


@asynccontextmanager
async def mcp(w: World, who: Agent) -> AsyncIterator[ClientSession]:
    assert w.node.mcp_port is not None
    async with (
        create_mcp_http_client(headers=who.headers) as http,
        streamable_http_client(f"http://127.0.0.1:{w.node.mcp_port}/mcp", http_client=http) as (read, write),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        yield session


async def tool(session: ClientSession, name: str, arguments: dict[str, Any]) -> str:
    result = await session.call_tool(name, arguments)
    text = "".join(getattr(block, "text", "") for block in result.content)
    if result.is_error:
        raise ScenarioFailed(f"MCP {name}: {text}")
    return text


# ---- the story ---------------------------------------------------------------------------------------------------


async def build(w: World) -> None:
    w.node = ServedNode("spaces", w.root / "node", mcp_port=free_port())
    w.node.init()
    await w.node.start(w.session)
    try:
        w.receiver, w.receiver_url = start_receiver(w.node.node_id)
    except BenchFailure as exc:
        raise ScenarioFailed(str(exc)) from exc
    for name in AGENTS:
        made = await w.ok("POST", "/v1/agents", None, {"name": name})
        w.agents[name] = Agent(name, made["agent_id"], made["api_key"])
        await w.ok("POST", "/v1/subscriptions", w.agents[name], {"tags": [TAG]})
        push = {"url": f"{w.receiver_url}/push/{name}", "tiers": [1, 2]}  # every notification, pushed
        await w.ok("POST", "/v1/push/endpoints", w.agents[name], push)
    for space, (owner, members) in SPACES.items():
        if space == "kids":  # one space over the CLI
            done = cli(w, w.agents[owner], "space", "create", space)
            if done.returncode != 0:
                raise ScenarioFailed(f"bbs space create: {done.stderr}")
            w.spaces[space] = done.stdout.strip()
        else:
            w.spaces[space] = (await w.ok("POST", "/v1/spaces", w.agents[owner], {"name": space}))["space_id"]
        for member, role in members.items():
            body = {"agent_id": w.agents[member].agent_id, "role": role}
            await w.ok("POST", f"/v1/spaces/{w.spaces[space]}/members", w.agents[owner], body)
    listed = await w.ok("GET", "/v1/spaces", w.agents["kid2"])
    names = sorted(s["name"] for s in listed["spaces"])
    w.check("spaces_made", names == ["family", "kids"], f"kid2 is in {names}")


def entry_body(w: World, space: str | None, i: int, via: str) -> dict[str, Any]:
    """An entry of `space` (None: public) carrying its marker and the drill's tag."""
    out: dict[str, Any] = {"entry_type": "finding", "performative": "inform", "tags": [TAG],
                           "content": f"{MARKERS[space]} note {i} written over {via}"}  # fmt: skip
    if space is not None:
        out["space"] = w.spaces[space]
    return out


async def post_rest(w: World, who: str, space: str | None, i: int, **extra: Any) -> dict[str, Any]:
    """`who` posts entry `i` of `space` over REST; the node's answer, also kept in `w.entries`."""
    made: dict[str, Any] = await w.ok(
        "POST", "/v1/entries", w.agents[who], {**entry_body(w, space, i, "REST"), **extra}
    )
    w.entries.setdefault(space, []).append(made)
    return made


async def writes(w: World) -> None:
    async def by_mcp(who: str, space: str, i: int) -> None:
        async with mcp(w, w.agents[who]) as session:
            text = await tool(session, "post", entry_body(w, space, i, "MCP"))
        w.entries.setdefault(space, []).append(json.loads(text))

    def by_cli(who: str, space: str, i: int) -> None:
        args = ["post", entry_body(w, space, i, "CLI")["content"], "--tag", TAG, "--space", w.spaces[space], "--json"]
        done = cli(w, w.agents[who], *args)
        if done.returncode != 0:
            raise ScenarioFailed(f"bbs post --space: {done.stderr}")
        w.entries.setdefault(space, []).append(json.loads(done.stdout))

    for who, space, via in (("mom", "family", "REST"), ("dad", "finance", "MCP"), ("friend", "kids", "REST")):
        message = {"message_type": "note", "body": f"{MARKERS[space]} message", "project": "drill",
                   "space": w.spaces[space]}  # fmt: skip
        if via == "MCP":
            async with mcp(w, w.agents[who]) as session:
                await tool(session, "message", {"action": "send", **message})
        else:
            await w.ok("POST", "/v1/agent-workflows/messages", w.agents[who], message)
    await post_rest(w, "mom", None, 0)
    await post_rest(w, "outsider", None, 1)
    # directed to a non-member, and linked to a public entry (so a walk from that entry with hops reaches it)
    await post_rest(w, "mom", "family", 0, directed_to=[w.agents["outsider"].agent_id],
                     links=[{"target": w.entries[None][0]["record_hash"], "link_type": "responds_to"}])  # fmt: skip
    by_cli("dad", "family", 1)
    await by_mcp("kid1", "family", 2)
    await post_rest(w, "dad", "finance", 0)
    await by_mcp("mom", "finance", 1)
    await post_rest(w, "kid1", "kids", 0)
    by_cli("friend", "kids", 1)
    await by_mcp("kid2", "kids", 2)
    spaced = all(e.get("space") == w.spaces[s] for s, es in w.entries.items() if s is not None for e in es)
    count = sum(len(es) for es in w.entries.values())
    w.check("writes_every_interface", spaced and count == 10, f"{count} entries, each in its space: {spaced}")


TASK_KEY = "chores"  # one key in every space and in public: four tasks (a task's identity is (space, key))


async def tasks(w: World) -> None:
    """An agent of each space declares and leases the space's `chores` (REST, MCP, the CLI); the outsider declares
    the public one."""
    wf = "/v1/agent-workflows/tasks"

    def body(space: str | None) -> dict[str, Any]:
        out: dict[str, Any] = {"key": TASK_KEY, "title": f"{MARKERS[space]} chores"}
        return out if space is None else {**out, "space": w.spaces[space]}

    w.tasks["family"] = await w.ok("POST", wf, w.agents["mom"], body("family"))
    done = cli(w, w.agents["dad"], "task", "lease", TASK_KEY, "--space", w.spaces["family"], "--json")
    if done.returncode != 0:
        raise ScenarioFailed(f"bbs task lease --space: {done.stderr}")
    family_lease = json.loads(done.stdout)
    async with mcp(w, w.agents["dad"]) as session:
        declared = {name: value for name, value in body("finance").items() if name != "key"}
        await tool(session, "task", {"action": "declare", "task": TASK_KEY, **declared})
        lease = {"action": "lease", "task": TASK_KEY, "space": w.spaces["finance"]}
        w.tasks["finance"] = json.loads(await tool(session, "task", lease))
    w.tasks["kids"] = await w.ok("POST", wf, w.agents["friend"], body("kids"))
    kids_lease = await w.ok("POST", f"{wf}/{w.tasks['kids']['id']}/lease", w.agents["friend"], {})
    w.tasks[None] = await w.ok("POST", wf, w.agents["outsider"], body(None))
    holders = {
        "family": (family_lease["lease"] or {}).get("holder") == w.agents["dad"].agent_id,
        "finance": (w.tasks["finance"]["lease"] or {}).get("holder") == w.agents["dad"].agent_id,
        "kids": (kids_lease["lease"] or {}).get("holder") == w.agents["friend"].agent_id,
    }
    spaced = {s: t["space"] == (None if s is None else w.spaces[s]) for s, t in w.tasks.items()}
    ids = {t["id"] for t in w.tasks.values()}
    ok = len(ids) == 4 and all(spaced.values()) and all(holders.values()) and family_lease["id"] in ids
    w.check("tasks_in_spaces", ok, f"{len(ids)} tasks of key {TASK_KEY}, in their spaces {spaced}, leased {holders}")


async def task_paths(w: World, who: Agent) -> list[str]:
    """Every task read path over REST: each task by id, the ready list, the graph in every format, the dashboard's
    task board and DAG."""
    out = [(await w.rest("GET", f"/v1/agent-workflows/tasks/{t['id']}", who))[1] for t in w.tasks.values()]
    out.append((await w.rest("GET", "/v1/agent-workflows/tasks/ready", who))[1])
    for fmt in ("json", "dot", "mermaid"):
        out.append((await w.rest("GET", f"/v1/agent-workflows/graph?format={fmt}", who))[1])
    out.append((await w.rest("GET", "/dashboard/api/tasks", who))[1])
    out.append((await w.rest("GET", "/dashboard/api/tasks/graph.svg", who))[1])
    return out


async def rest_paths(w: World, who: Agent) -> str:
    everything = [e for es in w.entries.values() for e in es]
    out = []
    for e in everything:
        out.append((await w.rest("GET", f"/v1/entries/{e['id']}", who))[1])
        out.append((await w.rest("GET", f"/v1/entries/{e['record_hash']}?hops=1", who))[1])
        out.append((await w.rest("GET", f"/dashboard/api/entries/{e['id']}/provenance", who))[1])
        out.append((await w.rest("GET", f"/dashboard/api/entries/{e['id']}/graph.svg?hops=2", who))[1])
    ids = "&".join(f"ids={e['id']}" for e in everything)
    out.append((await w.rest("GET", f"/v1/entries?{ids}", who))[1])
    for marker in MARKERS.values():
        out.append((await w.rest("GET", f"/v1/search?q={marker}&fresh=true&limit=50&hops=1", who))[1])
        nlip = {"format": "text", "subformat": "english", "content": marker}
        out.append((await w.rest("POST", "/nlip", who, nlip))[1])
    out.append((await w.rest("GET", f"/v1/search?tags={TAG}&limit=50&hops=2", who))[1])
    out.append((await w.rest("GET", "/v1/feed?after=0&limit=200", who))[1])
    out.append((await w.rest("GET", "/v1/inbox?limit=200", who))[1])
    out.append((await w.rest("GET", "/v1/agent-workflows/messages?limit=200", who))[1])
    out.append((await w.rest("GET", "/dashboard/api/bus/projects", who))[1])
    out += await task_paths(w, who)
    return "\n".join(_without_errors(out))


def _without_errors(texts: list[str]) -> list[str]:
    """The answers, but of a refusal only its code (its detail echoes the id the probe asked for)."""
    kept = []
    for text in texts:
        try:
            data = json.loads(text)
        except ValueError:
            kept.append(text)
            continue
        kept.append(str(data.get("code")) if isinstance(data, dict) and "status" in data and "code" in data else text)
    return kept


async def mcp_paths(w: World, who: Agent) -> str:
    everything = [e for es in w.entries.values() for e in es]
    out = []
    async with mcp(w, who) as session:
        out.append(await tool(session, "read", {"ids": [str(e["id"]) for e in everything], "hops": 1}))
        for marker in MARKERS.values():
            out.append(await tool(session, "search", {"q": marker, "fresh": True, "limit": 50}))
        out.append(await tool(session, "inbox", {"limit": 100}))
        out.append(await tool(session, "message", {"action": "read", "limit": 100}))
        out.append(await tool(session, "task", {"action": "graph"}))
        out.append(await tool(session, "task", {"action": "ready"}))
    return "\n".join(out)


async def cli_paths(w: World, who: Agent) -> str:
    out = []
    for args in [("search", marker, "--fresh", "--json") for marker in MARKERS.values()] + [
        ("tail", "--after", "0", "--no-follow", "--json"),
        ("tasks", "--graph", "--json"),
        ("tasks", "--json"),
    ]:
        done = cli(w, who, *args)
        if done.returncode != 0:  # a probe that failed would hide a leak
            raise ScenarioFailed(f"bbs {args[0]} as {who.name}: {done.returncode} {done.stderr}")
        out.append(done.stdout)
    return "\n".join(out)


async def no_leak(w: World) -> None:
    for name, who in w.agents.items():
        allowed = w.reads(name)
        texts = {"REST": await rest_paths(w, who), "MCP": await mcp_paths(w, who), "CLI": await cli_paths(w, who)}
        # a leak is a hidden space's marker (its words) or one of its entries' hashes (a link or envelope naming it)
        hidden = {MARKERS[s]: MARKERS[s] for s in MARKERS if s not in allowed} | {
            e["record_hash"]: f"{MARKERS[s]}#{e['id']}" for s in SPACES if s not in allowed for e in w.entries[s]
        }
        leaks = {via: [label for found, label in hidden.items() if found in text] for via, text in texts.items()}
        leaked = {via: found for via, found in leaks.items() if found}
        w.check("no_leak", not leaked, f"{name}: {leaked}" if leaked else f"{name} ok")
        # the probes are not blind: every interface shows the agent each space it reads
        blind = {via: [MARKERS[s] for s in allowed if MARKERS[s] not in text] for via, text in texts.items()}
        blind = {via: missing for via, missing in blind.items() if missing}
        w.check("sees_own", not blind, f"{name} misses {blind}" if blind else f"{name}: every interface")
        # the task paths are not blind either: they show the task of every space the agent reads, and the public one
        task_text = "\n".join(await task_paths(w, who))
        unseen = [MARKERS[s] for s in allowed if f"{MARKERS[s]} chores" not in task_text]
        w.check("sees_own", not unseen, f"{name}'s task paths miss {unseen}" if unseen else f"{name}: every task")
        # the walk from the public entry the family entry responds to reaches it exactly for family's readers
        start, reply = w.entries[None][0], w.entries["family"][0]
        walk = json.loads((await w.rest("GET", f"/v1/entries/{start['record_hash']}?hops=1", who))[1])
        walked = {e["id"] for e in walk["entries"]}
        want = {start["id"], reply["id"]} if "family" in allowed else {start["id"]}
        w.check("sees_own", walked == want, f"{name} walks to {len(walked)} of {len(want)}")
        search = json.loads((await w.rest("GET", f"/v1/search?tags={TAG}&limit=50", who))[1])
        seen = {e["id"] for e in search["entries"]}
        due = {e["id"] for s in allowed for e in w.entries.get(s, [])}
        w.check("sees_own", seen == due, f"{name} finds {len(seen)} of {len(due)}")


async def pushes(w: World, among: dict[str | None, list[dict[str, Any]]]) -> None:
    """Push (the inbox delivered to each agent's endpoint): of the entries `among`, every agent is pushed exactly
    those of what it reads now that others wrote (its subscription and directed_to), nothing of another space."""
    due = {
        name: {e["record_hash"] for s in w.reads(name) for e in among.get(s, []) if e["author_id"] != a.agent_id}
        for name, a in w.agents.items()
    }
    every = {e["record_hash"] for es in among.values() for e in es}
    got: dict[str, set[str]] = {}
    deadline = time.monotonic() + 10
    while True:
        async with w.session.get(w.receiver_url + "/received") as resp:
            received = await resp.json()
        got = {name: set() for name in w.agents}
        for push in received:
            name = push["path"].removeprefix("/push/")
            for note in push["payload"].get("notifications", []):
                got[name] |= {note["record_hash"]} & every
        if all(due[n] <= got[n] for n in w.agents) or time.monotonic() > deadline:
            break
        await asyncio.sleep(0.1)
    for name in w.agents:
        leaked = sorted(MARKERS[s] for s in SPACES if s not in w.reads(name) for e in among.get(s, [])
                        if e["record_hash"] in got[name])  # fmt: skip
        w.check("no_leak", not leaked, f"{name} pushed {leaked}" if leaked else f"{name} push ok")
        w.check("sees_own", got[name] == due[name], f"{name} pushed {len(got[name])} of {len(due[name])}")


async def posts_after_removals(w: World) -> None:
    """Dad posts into family and finance after the removals: kid2 and mom, who were subscribed and readers, are
    notified and pushed nothing of them (and the second `no_leak` round finds nothing of them either)."""
    among: dict[str | None, list[dict[str, Any]]] = {
        "family": [await post_rest(w, "dad", "family", 3)],
        "finance": [await post_rest(w, "dad", "finance", 2)],
    }
    await pushes(w, among)


async def visible_of(w: World, who: Agent, space: str) -> int:
    """How many of the space's entries `who` sees by id, by search and in the feed (0: nothing)."""
    found = 0
    for e in w.entries[space]:
        found += (await w.rest("GET", f"/v1/entries/{e['id']}", who))[0] == 200
    marker = MARKERS[space]
    found += len(json.loads((await w.rest("GET", f"/v1/search?q={marker}&fresh=true", who))[1])["entries"])
    feed = json.loads((await w.rest("GET", "/v1/feed?after=0&limit=200", who))[1])
    found += sum(e.get("space") == w.spaces[space] for e in feed["entries"])
    return found


async def removals(w: World) -> None:
    for space, member in (("family", "kid2"), ("finance", "mom")):
        owner = w.layout[space][0]
        before = await visible_of(w, w.agents[member], space)
        path = f"/v1/spaces/{w.spaces[space]}/members/{w.agents[member].agent_id}"
        await w.ok("DELETE", path, w.agents[owner])
        removed_at = time.monotonic()
        while (left := await visible_of(w, w.agents[member], space)) and time.monotonic() - removed_at < 5:
            await asyncio.sleep(0.05)
        took = time.monotonic() - removed_at
        w.layout[space][1].pop(member)
        w.check("removal_within_1s", before > 0 and left == 0 and took <= WINDOW_S,
                f"{member} from {space}: saw {before}, then {left} after {took:.2f}s")  # fmt: skip


async def late_member(w: World) -> None:
    owner, members = w.layout["family"]
    friend = w.agents["friend"]
    await w.ok("POST", f"/v1/spaces/{w.spaces['family']}/members", w.agents[owner],
               {"agent_id": friend.agent_id, "role": "reader"})  # fmt: skip
    members["friend"] = "reader"
    feed = json.loads((await w.rest("GET", f"/v1/feed?after=0&limit=200&space={w.spaces['family']}", friend))[1])
    search = json.loads((await w.rest("GET", f"/v1/search?q={MARKERS['family']}&fresh=true", friend))[1])
    due = {e["id"] for e in w.entries["family"]}
    got_feed, got_search = {e["id"] for e in feed["entries"]}, {e["id"] for e in search["entries"]}
    w.check("late_member_reads_all", got_feed == due == got_search,
            f"feed {len(got_feed)}, search {len(got_search)} of {len(due)}")  # fmt: skip


async def run(root: Path) -> Report:
    """The whole drill in `root`; every check's result (a step that could not run fails the checks it owns)."""
    started = time.monotonic()
    async with aiohttp.ClientSession(timeout=TIMEOUT) as session:
        w = World(root, session)
        try:
            await build(w)
            await writes(w)
            await tasks(w)
            await no_leak(w)
            await pushes(w, {s: list(es) for s, es in w.entries.items()})
            await removals(w)
            await posts_after_removals(w)
            await no_leak(w)  # again, with the removals
            await late_member(w)
        except ScenarioFailed as exc:
            w.results.setdefault("no_leak", Check(False, f"the drill stopped: {exc}"))
            print(f"the drill stopped: {exc}", file=sys.stderr)
        finally:
            if getattr(w, "node", None) is not None:
                w.node.kill()
            if w.receiver is not None:
                stop_process(w.receiver)  # type: ignore[arg-type]
    wall = time.monotonic() - started
    results = w.outcomes()
    return Report(results, wall, table(results) + f"\n\nspaces drill wall time: {wall:.1f}s")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bbs-spaces-") as tmp:
        report = asyncio.run(run(Path(tmp)))
    return checks.verdict(report, "spaces drill")


if __name__ == "__main__":
    sys.exit(main())
