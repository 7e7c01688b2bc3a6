"""Drill: a stolen agent key on a federation of three `bbs serve` nodes, revoked with the recovery key (issue 36).

Three nodes a, b, c, each peered with the other two through a TCP relay (scenarios/fednet.py `Link`) so c can be
cut off. The story, one step function each (so the pieces other branches build can be wired in one place):

1. `build`: the nodes; a planner agent on a; the owner's agent created on a, its identity exported and imported on
   b and c (like the chaos equivocator), so the owner has an API key on every node.
2. `first_rotation`: the owner rotates its first key K0 to K1 with a client-signed `rotate` (REST
   `POST /v1/agents/{id}/key-events`), setting its recovery key R (kept offline) and committing to its next key K2,
   vouching for every record K0 signed (with vouch pages); the identity file now holds K1.
3. `owner_works`: the owner posts with K1; the planner declares a task on a; the owner leases it.
4. `theft`: a thief copies the identity file (K1) and opens a session with it on every node (the path an identity
   file's client takes; where a node refused, it would use the agent's API key copied from the same machine): on b
   it posts, links to the owner's post, and posts records backdated to before the theft; it redacts the owner's post
   on b (issue 39); it tries to rotate the identity to a key of its own (a commitment holds: refused).
5. `revoke`: c is cut off and the thief posts there too (the window before c hears of the revocation); the owner
   revokes K1 with R on a, installing K2 and vouching for the owner's own K1 records, with their pages.
6. `after_revocation` (for each node, timed from the moment it stores the revocation; c after the heal): within
   10 s it refuses the thief's new records, voids the backdated ones and the redaction (the owner's post reads
   again: docs/decisions.md record 69), shows the same verdict on every earlier
   record as the other nodes, takes the owner's posts by K2 under the same id, refuses the thief's lease and
   completion, and honours the owner's lease.
7. `rotate_node_key`: `bbs node rotate-key` on b; sync keeps running both ways.
8. `heal`: c rejoins; the digests agree within 10 s.

Every check is named in CHECKS and printed in a table with what the nodes answered. Exit status 1 when any check
failed; the wall time is printed.

    python -m scenarios.theft [--keep DIR]
    tests/hardening/test_theft.py    # the short form in CI
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

from agent import identity_file
from identity import canonical, key_history, keys, records, vouching
from node.agents.sessions import challenge_message
from node.entries.links import unsigned_link
from scenarios import checks
from scenarios.checks import Report, table
from scenarios.fednet import Link, ScenarioFailed, ServedNode, bbs
from wire import unsigned
from wire.api import PostEntry, unsigned_entry
from wire.time import format_ms

NAMES = ("a", "b", "c")
EDGES = (("a", "b"), ("b", "c"), ("a", "c"))
WF = "/v1/agent-workflows"
DRILL_ENV = {"BBS_SYNC_WAIT_MS": "2000", "BBS_RECONCILE_EVERY_S": "2"}
WINDOW_S = 10.0  # the bound: every check holds within 10 s of the revocation being stored on a node
TIMEOUT = aiohttp.ClientTimeout(total=15)

CHECKS: dict[str, str] = {
    "first_rotation_stored": "the owner's first rotation (K0 -> K1, recovery key R set) is stored on every node",
    "owner_posts_with_rotated_key": "the owner's records signed by K1 are accepted under its id",
    "owner_holds_lease": "the owner holds the lease of a task homed on a",
    "thief_posts_in_window": "before the revocation the thief's records (posts, a link, backdated posts) are taken",
    "thief_cannot_rotate": "the thief's rotation to a key of its own is refused (the owner committed to its next key)",
    "thief_redacts_in_window": "before the revocation the thief's redaction of the owner's post hides it",
    "revocation_stored": "the revocation by R (installing K2) is stored on every node",
    "thief_new_records_refused": "within 10 s of the revocation: the thief's new posts and links are refused",
    "backdated_records_void": "within 10 s: the thief's records stored before the revocation are void (hidden)",
    "thief_redaction_undone": "within 10 s: the owner's post the thief redacted reads again (its redaction is void)",
    "same_verdicts_everywhere": "within 10 s: every earlier record has the same verdict on every node",
    "owner_posts_with_new_key": "within 10 s: the owner posts with K2 under the same id",
    "thief_lease_refused": "within 10 s: the thief's lease request for the owner's task is refused",
    "thief_completion_refused": "within 10 s: the thief's completion of the task is refused as signed by a revoked key",
    "owner_lease_honoured": "the owner's lease stays live and its own on every node",
    "owner_completes_with_new_key": "the owner completes its task with a task event signed by K2",
    "node_key_rotated": "`bbs node rotate-key` rotates b's node key",
    "sync_after_node_key_rotation": "after b's node key rotation, records still flow b -> a, c and a -> b",
    "digests_agree_after_heal": "c rejoins: every node's digest is the same within 10 s",
}


def refused_by_revocation(status: int, code: str | None) -> bool:
    """Whether a node's answer to the thief after the revocation refuses it: its session ended (401), or its record
    is by a key that may no longer sign (422 `not_current_key`)."""
    return status == 401 or (status == 422 and code == "not_current_key")


@dataclass
class Signed:
    """A record the drill signed, with its address and version."""

    record: dict[str, Any]
    address: str
    version: str


@dataclass
class World(checks.Drill):
    """The running drill: nodes, relays, keys, credentials and the records each side signed."""

    NAMES = CHECKS
    root: Path
    session: aiohttp.ClientSession
    nodes: dict[str, ServedNode] = field(default_factory=dict)
    links: dict[tuple[str, str], Link] = field(default_factory=dict)
    planner: dict[str, str] = field(default_factory=dict)  # headers of the planner on a
    owner_id: str = ""
    owner_auth: dict[str, dict[str, str]] = field(default_factory=dict)  # node -> the owner's API key headers
    k0: keys.SigningKey | None = None
    k1: keys.SigningKey = field(default_factory=keys.SigningKey.generate)
    k2: keys.SigningKey = field(default_factory=keys.SigningKey.generate)
    k3: keys.SigningKey = field(default_factory=keys.SigningKey.generate)
    recovery: keys.SigningKey = field(default_factory=keys.SigningKey.generate)
    rotation: Signed | None = None
    owner_k1: list[Signed] = field(default_factory=list)  # the owner's records signed by K1 (it vouches for them)
    owner_k2: list[Signed] = field(default_factory=list)
    thief_key: keys.SigningKey | None = None
    thief_auth: dict[str, dict[str, str]] = field(default_factory=dict)  # node -> the thief's credential there
    thief_window: list[Signed] = field(default_factory=list)  # taken before the revocation (b, then c alone)
    thief_backdated: list[Signed] = field(default_factory=list)
    task: str = "drill-task"
    lease_id: str = ""
    revoked_at: dict[str, float] = field(default_factory=dict)  # node -> monotonic time it showed the revocation

    async def call(
        self, name: str, method: str, path: str, body: Any = None, headers: dict[str, str] | None = None
    ) -> tuple[int, Any]:
        """(status, JSON) of one request; (0, None) when no answer came."""
        status, text = await self.nodes[name].attempt(self.session, method, path, body, headers, timeout=TIMEOUT)
        if not status or not text.strip():
            return status, None
        try:
            return status, json.loads(text)
        except ValueError:
            return 0, None


# ---- records ------------------------------------------------------------------------------------------------


def version_of(record: dict[str, Any]) -> str:
    """A record's version (docs/format-v3.md 6.2): an entry's is the hash of its signed bytes, else its address."""
    address = records.compute_hash(record)
    return canonical.sha256_hex(canonical.canonical_bytes(record)) if record["kind"] == "entry" else address


def sign_as(author: str, body: dict[str, Any], key: keys.SigningKey) -> Signed:
    """`body` for `author` signed by `key`, naming it in `signing_key` when it is not the author's first key."""
    body = {**body, "author_id": author}
    if key.did != author:
        body["signing_key"] = key.did
    record = records.sign(body, key)
    return Signed(record, records.compute_hash(record), version_of(record))


def entry(author: str, key: keys.SigningKey, content: str, created_ms: int | None = None) -> Signed:
    """A public finding of `author` signed by `key` (dated now, or `created_ms`: a thief's backdating)."""
    when = format_ms(created_ms) if created_ms is not None else canonical.now_created_at()
    body = unsigned_entry(PostEntry(entry_type="finding", performative="inform", content=content), author, when, [])
    return sign_as(author, body, key)


def link(author: str, key: keys.SigningKey, source: str, target: str) -> Signed:
    """A `responds_to` link of `author` signed by `key`."""
    return sign_as(author, unsigned_link(author, int(time.time() * 1000), source, target, "responds_to"), key)


def key_event(
    author: str,
    signer: keys.SigningKey,
    event: str,
    seq: int,
    *,
    prior: str | None,
    installs: keys.SigningKey | None,
    subject: keys.SigningKey | None,
    vouched: list[str],
    commits: keys.SigningKey | None = None,
    recovery: keys.SigningKey | None = None,
) -> tuple[Signed, list[dict[str, Any]]]:
    """A key event of `author` (docs/format-v3.md 3.2) signed by `signer`, vouching for `vouched` of `subject`
    (the key it takes authority from), and its vouch pages."""
    ordered = vouching.sorted_versions(vouched)
    body: dict[str, Any] = {
        "kind": "key_event",
        "schema_version": "v1",
        "author_id": author,
        "created_at": canonical.now_created_at(),
        "event": event,
        "seq": seq,
        "vouches": [vouching.vouch(subject.did, ordered).as_json()] if subject is not None else [],
    }
    if prior is not None:
        body["prior"] = prior
    if installs is not None:
        body["key"] = installs.did
    if commits is not None:
        body["next"] = key_history.commitment(commits.did)
    if recovery is not None:
        body["recovery"] = recovery.did
    signed = sign_as(author, body, signer)
    pages = []
    if subject is not None:
        for i in range(vouching.page_count(len(ordered))):
            members, proof = vouching.page(ordered, i)
            page = {
                "kind": "vouch_page",
                "schema_version": "v1",
                "author_id": author,
                "created_at": body["created_at"],
                "event": signed.address,
                "subject": subject.did,
                "page": i,
                "versions": members,
                "proof": proof,
            }
            pages.append(sign_as(author, page, signer).record)
    return signed, pages


def held_records_of(db_path: Path, author: str) -> list[dict[str, Any]]:
    """The records of `author` a node's log holds (read-only, beside the running node)."""
    conn = sqlite3.connect(f"file:{db_path}?mode=ro", uri=True, timeout=30)
    try:
        bodies = [json.loads(bytes(row[0])) for row in conn.execute("SELECT body FROM records")]
    finally:
        conn.close()
    return [r for r in bodies if r.get("author_id") == author]


def write_identity(path: Path, key: keys.SigningKey, display_name: str) -> None:
    """The owner's identity file with its current key. Format v1 has no key history yet (task 'recover' adds it):
    the file carries only the key, which is all the thief needs to sign."""
    identity_file.save(path, identity_file.Identity(key=key, display_name=display_name))


# ---- steps --------------------------------------------------------------------------------------------------


async def build(w: World) -> None:
    """Three nodes peered over relays; a planner on a; the owner created on a and imported on b and c."""
    for name in NAMES:
        w.nodes[name] = ServedNode(name, w.root / name, env=dict(DRILL_ENV))
    await asyncio.gather(*(asyncio.to_thread(n.init) for n in w.nodes.values()))
    await asyncio.gather(*(n.start(w.session) for n in w.nodes.values()))
    for x, y in EDGES:
        for src, dst in ((x, y), (y, x)):
            relay = Link(w.nodes[dst].port)
            await relay.start()
            w.links[(src, dst)] = relay
    for (src, dst), relay in w.links.items():
        await w.nodes[src].peer(w.session, w.nodes[dst], via=relay.url)
    a = w.nodes["a"]
    w.planner = await a.agent(w.session, "planner")
    w.owner_auth["a"] = await a.agent(w.session, "owner")
    w.owner_id = w.owner_auth["a"]["X-Agent"]
    exported = w.root / "owner-k0.identity"
    await asyncio.to_thread(bbs, "agent", "export", "owner", "--data", str(a.data), "--out", str(exported))
    w.k0 = identity_file.load(exported).key
    for name in ("b", "c"):
        out = await asyncio.to_thread(
            bbs, "agent", "import", str(exported), "--data", str(w.nodes[name].data), "--name", "owner", "--json"
        )
        created = json.loads(out)
        w.owner_auth[name] = {"Authorization": f"Bearer {created['api_key']}", "X-Agent": created["agent_id"]}
    await a.post(w.session, w.owner_auth["a"], "the owner's first post, signed by K0 (node-kept)")
    await until_converged(w, list(NAMES), 30, "the setup")


async def current_key(w: World, name: str) -> str | None:
    status, data = await w.call(name, "GET", f"/v1/agents/{w.owner_id}")
    if status != 200 or not isinstance(data, dict):
        return None
    history = data.get("key_history") or {}
    return history.get("current_key")


async def first_rotation(w: World) -> None:
    """K0 -> K1, recovery R, committing to K2, vouching for every record K0 signed on any node."""
    assert w.k0 is not None
    by_k0: set[str] = set()
    for node in w.nodes.values():
        for record in held_records_of(node.data / "bbs.db", w.owner_id):
            if record["kind"] not in ("key_event", "vouch_page") and "signing_key" not in record:
                by_k0.add(version_of(record))
    event, pages = key_event(
        w.owner_id, w.k0, "rotate", 1, prior=None, installs=w.k1, subject=w.k0, vouched=sorted(by_k0),
        commits=w.k2, recovery=w.recovery,
    )  # fmt: skip
    w.rotation = event
    status, data = await w.call(
        "a", "POST", f"/v1/agents/{w.owner_id}/key-events", {"record": event.record, "pages": pages}, w.owner_auth["a"]
    )
    if status != 201:
        w.check("first_rotation_stored", False, f"a answered {status} {data}")
        raise ScenarioFailed(f"the first rotation was refused: {status} {data}")
    write_identity(w.root / "owner.identity", w.k1, "owner")
    seen = await wait_all(w, lambda n: _key_is(w, n, w.k1.did), 15)
    w.check(
        "first_rotation_stored",
        all(seen.values()),
        f"{len(by_k0)} records of K0 vouched for; current key K1 on {_where(seen)}",
    )


async def _key_is(w: World, name: str, did: str) -> bool:
    return await current_key(w, name) == did


async def post_record(w: World, name: str, signed: Signed, auth: dict[str, str], path: str = "/v1/entries") -> Any:
    """Submit a signed record to a node; (status, answer)."""
    return await w.call(name, "POST", path, {"record": signed.record}, auth)


async def owner_works(w: World) -> None:
    """The owner posts with K1 on a and b; the planner declares a task on a; the owner leases it through a."""
    answers = []
    for name in ("a", "b"):
        post = entry(w.owner_id, w.k1, f"the owner on {name}, signed by K1")
        status, data = await post_record(w, name, post, w.owner_auth[name])
        answers.append(f"{name}: {status}" + ("" if status == 201 else f" {data}"))
        if status == 201:
            w.owner_k1.append(post)
    w.check("owner_posts_with_rotated_key", len(w.owner_k1) == 2, ", ".join(answers))
    status, data = await w.call("a", "POST", f"{WF}/tasks", {"key": w.task, "title": "the owner's task"}, w.planner)
    if status not in (200, 201):
        raise ScenarioFailed(f"the planner could not declare the task: {status} {data}")
    status, data = await w.call("a", "POST", f"{WF}/tasks/{w.task}/lease", {"seconds": 900}, w.owner_auth["a"])
    lease = data.get("lease") if isinstance(data, dict) else None
    if status in (200, 201) and lease and lease.get("holder") == w.owner_id:
        w.lease_id = str(lease["lease_id"])
    w.check("owner_holds_lease", bool(w.lease_id), f"a answered {status}" + ("" if w.lease_id else f" {data}"))


async def open_session(w: World, name: str, key: keys.SigningKey) -> tuple[int, str | None, Any]:
    """Prove `key` for the owner's id to a node (POST /v1/auth/challenge, /v1/auth/session, naming the key in
    `signing_key`): (status, the session's bearer headers or None, the answer)."""
    status, challenge = await w.call(name, "POST", "/v1/auth/challenge", {"agent_id": w.owner_id}, {})
    if status not in (200, 201) or not isinstance(challenge, dict):
        return status, None, challenge
    message = challenge_message(challenge["node_id"], w.owner_id, challenge["challenge"])
    body = {"agent_id": w.owner_id, "challenge": challenge["challenge"], "signature": key.sign(message)}
    if key.did != w.owner_id:
        body["signing_key"] = key.did
    status, data = await w.call(name, "POST", "/v1/auth/session", body, {})
    token = data.get("token") if status in (200, 201) and isinstance(data, dict) else None
    return status, token, data


async def thief_logs_in(w: World) -> None:
    """The thief holds only the identity file's key: it opens a session with it on every node (the path an identity
    file's client takes). Where a node refuses, the thief uses the agent's API key copied from the same machine."""
    assert w.thief_key is not None
    for name in NAMES:
        status, token, data = await open_session(w, name, w.thief_key)
        if token is not None:
            w.thief_auth[name] = {"Authorization": f"Bearer {token}"}
            w.log(f"the thief opens a session on {name} with the stolen key")
        else:
            w.thief_auth[name] = w.owner_auth[name]
            w.log(f"the thief's session on {name} refused ({status} {_code(data)}): it uses the copied API key")


async def theft(w: World) -> None:
    """The thief, holding a copy of the identity file and the agent's API keys, acts through b."""
    w.thief_key = identity_file.load(w.root / "owner.identity").key  # the copy
    await thief_logs_in(w)
    thief, auth = w.thief_key, w.thief_auth["b"]
    taken, answers = [], []
    post = entry(w.owner_id, thief, "the thief, posting as the owner")
    status, data = await post_record(w, "b", post, auth)
    answers.append(f"post {status}")
    if status == 201:
        taken.append(post)
    target = w.owner_k1[0].address if w.owner_k1 else post.address
    linked = link(w.owner_id, thief, post.address, target)
    status, data = await post_record(w, "b", linked, auth, "/v1/links")
    answers.append(f"link {status}" + ("" if status in (200, 201) else f" {data}"))
    if status in (200, 201):
        taken.append(linked)
    before_theft = int(time.time() * 1000) - 3_600_000  # an hour ago: before the first rotation, before the theft
    for i in range(2):
        old = entry(w.owner_id, thief, f"backdated by the thief ({i})", created_ms=before_theft + i)
        status, data = await post_record(w, "b", old, auth)
        answers.append(f"backdated {status}")
        if status == 201:
            w.thief_backdated.append(old)
    w.thief_window += taken
    w.check("thief_posts_in_window", len(taken) == 2 and len(w.thief_backdated) == 2, ", ".join(answers))
    await thief_redacts(w)
    # The thief tries to take the identity over: a rotation to its own key, signed by K1 (rank `current`).
    assert w.rotation is not None
    grab, pages = key_event(
        w.owner_id, thief, "rotate", 2, prior=w.rotation.address, installs=keys.SigningKey.generate(),
        subject=thief, vouched=[s.version for s in taken + w.thief_backdated],
    )  # fmt: skip
    status, data = await w.call(
        "b", "POST", f"/v1/agents/{w.owner_id}/key-events", {"record": grab.record, "pages": pages}, auth
    )
    code = data.get("code") if isinstance(data, dict) else None
    w.check("thief_cannot_rotate", status == 422 and code == "unauthorized_key_event", f"b answered {status} {code}")


async def thief_redacts(w: World) -> None:
    """The thief redacts the owner's post made on b, signed by K1 (issue 39: the revocation makes it void)."""
    assert w.thief_key is not None
    if len(w.owner_k1) < 2:
        w.check("thief_redacts_in_window", False, "the owner's post on b is missing")
        return
    target = w.owner_k1[1]
    body = {
        "kind": "redaction",
        "schema_version": canonical.SCHEMA_VERSION,
        "created_at": canonical.now_created_at(),
        "target": target.address,
        "reason": "the thief destroys",
    }
    redaction = sign_as(w.owner_id, body, w.thief_key)
    status, data = await post_record(w, "b", redaction, w.thief_auth["b"], "/v1/redactions")
    hidden = not await visible(w, "b", target)
    if status == 201:
        w.thief_window.append(redaction)  # then served as its target's tombstone: void (hidden) after the revocation
    w.check("thief_redacts_in_window", status == 201 and hidden, f"b answered {status} {_code(data)}, hidden: {hidden}")


async def revoke(w: World) -> None:
    """c is cut off (the thief posts there in the window); the owner revokes K1 with R on a, installing K2."""
    cut(w, "c")
    assert w.thief_key is not None and w.rotation is not None
    lone = entry(w.owner_id, w.thief_key, "the thief on c, cut off from the revocation")
    status, data = await post_record(w, "c", lone, w.thief_auth["c"])
    w.log(f"the thief posts on c while c is cut off: {status}")
    if status == 201:
        w.thief_window.append(lone)
    event, pages = key_event(
        w.owner_id, w.recovery, "revoke", 2, prior=w.rotation.address, installs=w.k2, subject=w.k1,
        vouched=[s.version for s in w.owner_k1], commits=w.k3,
    )  # fmt: skip
    status, data = await w.call(
        "a", "POST", f"/v1/agents/{w.owner_id}/key-events", {"record": event.record, "pages": pages}, w.owner_auth["a"]
    )
    if status != 201:
        w.check("revocation_stored", False, f"a answered {status} {data}")
        raise ScenarioFailed(f"the revocation was refused: {status} {data}")
    write_identity(w.root / "owner.identity", w.k2, "owner")
    w.log("the owner revoked K1 with the recovery key on a (K2 installed)")


async def watch_revocation(w: World, names: list[str], timeout: float) -> None:
    """Note when each node first shows K2 as the owner's current key."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and any(n not in w.revoked_at for n in names):
        for name in names:
            if name not in w.revoked_at and await _key_is(w, name, w.k2.did):
                w.revoked_at[name] = time.monotonic()
                w.log(f"{name} stores the revocation")
        await asyncio.sleep(0.05)


async def visible(w: World, name: str, signed: Signed) -> bool:
    """Whether a node serves a record to a reader: an entry by its address (among the entries read, not as a
    tombstone), a link among its target's links, a redaction as its target's tombstone."""
    if signed.record["kind"] == "entry":
        status, data = await w.call(name, "GET", f"/v1/entries/{signed.address}")
        entries = data.get("entries", []) if status == 200 and isinstance(data, dict) else []
        return any(isinstance(e, dict) and e.get("record_hash") == signed.address for e in entries)
    status, data = await w.call(name, "GET", f"/v1/entries/{signed.record['target']}")
    return status == 200 and signed.address in json.dumps(data)


async def verdicts(w: World, name: str) -> dict[str, bool]:
    """The verdict a node shows on every earlier record of the owner's id (served or not), by address."""
    earlier = w.owner_k1 + w.thief_window + w.thief_backdated
    return {s.address: await visible(w, name, s) for s in earlier}


async def after_revocation(w: World, name: str) -> None:
    """The checks on one node, each retried until it holds or 10 s after the node stored the revocation."""
    stored = w.revoked_at.get(name)
    if stored is None:
        w.check("revocation_stored", False, f"{name} never showed K2 as the current key")
        return
    w.check("revocation_stored", True, f"{name}")
    deadline = stored + WINDOW_S
    assert w.thief_key is not None
    thief, auth = w.thief_key, w.thief_auth[name]

    async def thief_refused() -> tuple[bool, str]:
        post = entry(w.owner_id, thief, f"the thief on {name} after the revocation")
        p_status, p_data = await post_record(w, name, post, auth)
        source, target = (s.address for s in w.owner_k1[:2])  # two entries of the owner's id that every node holds
        l_status, l_data = await post_record(w, name, link(w.owner_id, thief, source, target), auth, "/v1/links")
        codes = (_code(p_data), _code(l_data))
        # refused either way: its session ended with the revocation (401, migration 0025), or, with a credential
        # still valid, the record by a revoked key (422 not_current_key); nothing stored
        ok = all(refused_by_revocation(s, c) for s, c in ((p_status, codes[0]), (l_status, codes[1])))
        return ok, f"{name}: post {p_status} {codes[0]}, link {l_status} {codes[1]}"

    async def backdated_void() -> tuple[bool, str]:
        shown = [s.address[:12] for s in w.thief_window + w.thief_backdated if await visible(w, name, s)]
        return not shown, f"{name}: " + (f"still serves {shown}" if shown else "serves none of them")

    async def redaction_undone() -> tuple[bool, str]:
        shown = len(w.owner_k1) > 1 and await visible(w, name, w.owner_k1[1])
        return shown, f"{name}: " + ("the redacted post reads again" if shown else "the post is still hidden")

    async def owner_posts() -> tuple[bool, str]:
        post = entry(w.owner_id, w.k2, f"the owner on {name}, signed by K2")
        status, data = await post_record(w, name, post, w.owner_auth[name])
        if status == 201:
            w.owner_k2.append(post)
        return status == 201, f"{name}: {status}" + ("" if status == 201 else f" {_code(data)}")

    async def thief_lease() -> tuple[bool, str]:
        login, _, l_data = await open_session(w, name, thief)  # a new session with the revoked key
        status, data = await w.call(name, "POST", f"{WF}/tasks/{w.task}/lease", {"seconds": 900}, auth)
        ok = login in (401, 403, 422) and status in (401, 403, 422)
        return (
            ok,
            f"{name}: new session {login} {_code(l_data)}, lease with the thief's credential {status} {_code(data)}",
        )

    async def thief_completion() -> tuple[bool, str]:
        draft = unsigned.unsigned_task_event(
            w.task, w.owner_id, canonical.now_created_at(), "complete", **unsigned.finish_fields({}, w.lease_id)
        )
        signed = sign_as(w.owner_id, draft, thief)
        status, data = await w.call(name, "POST", f"{WF}/tasks/{w.task}/complete", {"record": signed.record}, auth)
        return refused_by_revocation(status, _code(data)), f"{name}: {status} {_code(data)}"

    # Actions once each, in order, right after the node shows the revocation (a node decides a client's record
    # against what it holds, at once); the one observation (what the node serves) is retried until the deadline.
    for check, attempt in (
        ("thief_new_records_refused", thief_refused),
        ("owner_posts_with_new_key", owner_posts),
        ("thief_lease_refused", thief_lease),
        ("thief_completion_refused", thief_completion),
        ("backdated_records_void", backdated_void),
        ("thief_redaction_undone", redaction_undone),
    ):
        if check in ("backdated_records_void", "thief_redaction_undone"):
            ok, detail, at = await retry_until(attempt, deadline)
        else:
            (ok, detail), at = await attempt(), time.monotonic()
        w.check(check, ok and at - stored <= WINDOW_S, f"{detail} ({at - stored:.1f}s after the revocation)")
    await owner_lease_kept(w, name)


async def retry_until(attempt: Callable[[], Awaitable[tuple[bool, str]]], deadline: float) -> tuple[bool, str, float]:
    """Run `attempt` until it holds or the deadline passes (at least once); its last (ok, detail) and when."""
    while True:
        ok, detail = await attempt()
        if ok or time.monotonic() >= deadline:
            return ok, detail, time.monotonic()
        await asyncio.sleep(0.25)


async def owner_lease_kept(w: World, name: str) -> None:
    """The task is not done and its live lease is the owner's, with the lease id the owner was granted last (a
    re-lease by the holder is a new grant: a new id); then the owner extends it through a."""

    async def shown() -> tuple[bool, str]:  # the owner's last grant (made through a) may still be on its way here
        status, data = await w.call(name, "GET", f"{WF}/tasks/{w.task}")
        lease = data.get("lease") if status == 200 and isinstance(data, dict) else None
        ok = lease is not None and lease.get("holder") == w.owner_id and lease.get("lease_id") == w.lease_id
        state = data.get("status") if isinstance(data, dict) else None
        return ok, f"{name}: {status}, status {state}, lease {_lease(lease)} (the owner's: {w.lease_id[:8]})"

    held, detail, _ = await retry_until(shown, time.monotonic() + WINDOW_S)
    e_status, e_data = await w.call("a", "POST", f"{WF}/tasks/{w.task}/lease", {"seconds": 900}, w.owner_auth["a"])
    extended = e_data.get("lease") if isinstance(e_data, dict) else None
    if e_status in (200, 201) and extended and extended.get("holder") == w.owner_id:
        w.lease_id = str(extended["lease_id"])
    else:
        held = False
    w.check("owner_lease_honoured", held, f"{detail}; the owner extends it: {e_status}")


async def owner_completes(w: World) -> None:
    """The owner completes its task on a with a task event signed by K2 (its fencing token: its lease)."""
    draft = unsigned.unsigned_task_event(
        w.task, w.owner_id, canonical.now_created_at(), "complete", **unsigned.finish_fields({}, w.lease_id)
    )
    signed = sign_as(w.owner_id, draft, w.k2)
    status, data = await w.call("a", "POST", f"{WF}/tasks/{w.task}/complete", {"record": signed.record},
                                w.owner_auth["a"])  # fmt: skip
    w.check("owner_completes_with_new_key", status in (200, 201), f"a: {status} {_code(data)} {_message(data)}")


async def rotate_node_key(w: World) -> None:
    """`bbs node rotate-key` on b (stopped for it, as the agent key's CLI rotation needs), then records still flow
    both ways."""
    b = w.nodes["b"]
    await asyncio.to_thread(b.kill)
    try:
        out = await asyncio.to_thread(bbs, "node", "rotate-key", "--data", str(b.data))
        w.check("node_key_rotated", True, out.strip()[:120])
    except ScenarioFailed as exc:
        w.check("node_key_rotated", False, str(exc)[:200])
    await b.start(w.session)
    from_b = await b.post(w.session, await b.agent(w.session, "after-rotation"), "posted on b after its key rotation")
    from_a = await w.nodes["a"].post(w.session, w.planner, "posted on a after b's key rotation")

    async def flowed() -> tuple[bool, str]:
        on = {n: await w.nodes[n].has(w.session, from_b) for n in ("a",)}
        back = await b.has(w.session, from_a)
        return all(on.values()) and back, f"b -> a {on['a']}, a -> b {back}"

    ok, detail, _ = await retry_until(flowed, time.monotonic() + WINDOW_S)
    rotated = w.results["node_key_rotated"].ok
    w.check("sync_after_node_key_rotation", ok and rotated, detail + ("" if rotated else "; but no rotation ran"))


async def heal(w: World) -> None:
    """c rejoins; the revocation reaches it; its checks; then the digests must agree within 10 s."""
    mend(w, "c")
    await watch_revocation(w, ["c"], 30)
    await after_revocation(w, "c")
    start = time.monotonic()
    agreed = await until_converged(w, list(NAMES), WINDOW_S, "digests after the heal", fail=False)
    digests = {n: await w.nodes[n].digest(w.session) for n in NAMES}
    shown = ", ".join(f"{n}: {c} {h[:10]}" for n, (c, h) in digests.items())
    took = f"after {time.monotonic() - start:.1f}s" if agreed else "not within 10 s"
    w.check("digests_agree_after_heal", agreed, f"{took}: {shown}")


async def same_verdicts(w: World) -> None:
    """Every node shows the same verdict on every earlier record (after the heal: c too)."""
    seen = {n: await verdicts(w, n) for n in NAMES}
    differ = sorted(a[:12] for a in seen["a"] if len({seen[n][a] for n in NAMES}) > 1)
    w.check("same_verdicts_everywhere", not differ, f"differ on {differ}" if differ else "one verdict per record")


# ---- plumbing -----------------------------------------------------------------------------------------------


def cut(w: World, name: str) -> None:
    for (src, dst), relay in w.links.items():
        if name in (src, dst):
            relay.cut()


def mend(w: World, name: str) -> None:
    for (src, dst), relay in w.links.items():
        if name in (src, dst):
            relay.restore()


async def wait_all(w: World, check: Callable[[str], Awaitable[bool]], timeout: float) -> dict[str, bool]:
    """Poll `check(node)` on every node until all hold or `timeout`; which held."""
    held = dict.fromkeys(NAMES, False)
    deadline = time.monotonic() + timeout
    while not all(held.values()) and time.monotonic() < deadline:
        for name in NAMES:
            held[name] = held[name] or await check(name)
        await asyncio.sleep(0.1)
    return held


async def until_converged(w: World, names: list[str], timeout: float, what: str, *, fail: bool = True) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if len({await w.nodes[n].digest(w.session) for n in names}) == 1:
                return True
        except (aiohttp.ClientError, ScenarioFailed):
            pass
        await asyncio.sleep(0.2)
    if fail:
        raise ScenarioFailed(f"the nodes did not converge within {timeout}s ({what})")
    return False


def _where(seen: dict[str, bool]) -> str:
    return ", ".join(f"{n} {'yes' if ok else 'NO'}" for n, ok in seen.items())


def _code(data: Any) -> str | None:
    return data.get("code") if isinstance(data, dict) else None


def _message(data: Any) -> str:
    return str(data.get("detail", ""))[:120] if isinstance(data, dict) and "code" in data else ""


def _lease(lease: Any) -> str:
    if not isinstance(lease, dict):
        return "none"
    return f"{str(lease.get('lease_id'))[:8]} held by {str(lease.get('holder'))[-8:]}"


# ---- the drill ----------------------------------------------------------------------------------------------


async def run(root: Path) -> Report:
    """The whole drill in `root`; every check's result (a step that could not run fails the checks it owns)."""
    started = time.monotonic()
    async with aiohttp.ClientSession(timeout=TIMEOUT) as session:
        w = World(root, session)
        try:
            await build(w)
            w.log(f"three nodes up, owner {w.owner_id[-8:]}")
            await first_rotation(w)
            await owner_works(w)
            await theft(w)
            await revoke(w)
            await watch_revocation(w, ["a", "b"], 30)
            await asyncio.gather(*(after_revocation(w, name) for name in ("a", "b")))  # each from its own moment
            await rotate_node_key(w)
            await heal(w)
            await same_verdicts(w)
            await owner_completes(w)
        except ScenarioFailed as exc:
            w.log(f"the drill stopped: {exc}")
        finally:
            for node in w.nodes.values():
                node.kill()
            for relay in w.links.values():
                await relay.close()
    wall = time.monotonic() - started
    results = w.outcomes()
    text = table(results) + f"\n\ntheft drill wall time: {wall:.1f}s"
    return Report(results, wall, text)


def main() -> int:
    return checks.drill_main(__doc__, "theft drill", run)


if __name__ == "__main__":
    sys.exit(main())
