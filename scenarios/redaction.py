"""Drill: a leaked secret redacted across a federation of real `bbs serve` nodes (issue 39, "Done when"; docs/sync.md,
"Redaction"; docs/operations.md, "Redaction: what leaves the disk, and when"). About 25 s on a 2-core machine.

Three honest nodes a, b, c, each peered with the other two, all with `redaction_grace_s` 0 (`BBS_REDACTION_GRACE_S`),
and a fourth, h, that will play the hostile peer: it pulls from a, b and c; they list it as a peer (a node serves
only its peers) at a closed port, so they pull nothing from it yet.

1. An author on a posts an entry holding a generated secret (a random token, tagged `creds`); a subscriber on b
   (subscribed to `creds`) is notified; a reader on c finds it by search; another agent on b links its own entry to
   it. It spreads to all four nodes. `bbs backup` of a is taken (the pre-redaction backup).
2. c and h are stopped (SIGKILL): c is the partitioned node; h's peer addresses are pointed at a closed port while it
   is down (so it never hears of the redaction) and it is started again, serving the full body.
3. The author redacts the entry on a. For a and b, from the moment each answers the tombstone: within 10 s the
   secret's bytes are in no file of its data folder nor beside it (its log), its terms have a document frequency of
   0 in the node's search index (deleted documents included), reads answer the tombstone and searches find nothing;
   the subscriber's inbox never carried the content.
4. c starts again and syncs: the same checks hold there, timed from when it answers the tombstone.
5. a, b and c are given h's real address (their cursor on it is still 0: h's feed serves them the body, its
   reconciliation offers it): they refuse it, and the checks still hold on every honest node while h serves the body.
6. `bbs backup` of every honest node holds no trace of the secret; a byte search of the whole drill folder finds it
   only in the pre-redaction backup and h's data folder (both by design: operators rotate backups made before a
   redaction, docs/operations.md; a peer that ignores redactions keeps the content, docs/security.md).

With `--postgresql` (`make redaction-drill-postgresql`) node b keeps its database on PostgreSQL: a throwaway cluster
(scenarios/pg_cluster.py) set up as docs/operations.md asks of an operator (wal_recycle off; fsync and
full_page_writes on, as in production), and b's checks search every file of the cluster's folder too (its data
directory: base/ with TOAST and pg_statistic, pg_wal/; its server log), so "gone from disk" there means after the
node's VACUUM FULL, WAL switch and CHECKPOINT (docs/decisions.md record 78). `bbs backup` copies SQLite nodes only,
so b's later backup is replaced by that search.

Every check is named in CHECKS and printed in a table with what the nodes answered. Exit status 1 when any check
failed; the wall time is printed.

    python -m scenarios.redaction [--keep DIR] [--postgresql]
    tests/hardening/test_redaction_drill.py    # the CI form
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import secrets
import sqlite3
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

from node.search_index.analyzer import tokens
from node.search_index.index import FOLDER, SearchIndex
from scenarios import checks, pg_cluster
from scenarios.checks import Report, table
from scenarios.fednet import ScenarioFailed, ServedNode, bbs, free_port

HONEST = ("a", "b", "c")
HOSTILE = "h"
DRILL_ENV = {"BBS_SYNC_WAIT_MS": "2000", "BBS_RECONCILE_EVERY_S": "2", "BBS_REDACTION_GRACE_S": "0"}
WINDOW_S = 10.0  # the bound: every check holds within 10 s of the redaction being stored on a node
SETTLE_S = 30.0  # the bound on every wait for sync before the redaction
TIMEOUT = aiohttp.ClientTimeout(total=15)
ON_POSTGRESQL = "b"  # the node whose database is on PostgreSQL in the `--postgresql` form
# The cluster of the `--postgresql` form: as an operator runs one for a node (docs/operations.md, "PostgreSQL"),
# small, and without a TCP port (scenarios/pg_cluster.py)
OPERATOR_SETTINGS = "-c shared_buffers=32MB -c max_connections=40 -c wal_recycle=off"

CHECKS: dict[str, str] = {
    "spread_everywhere": "the secret's entry reaches all four nodes",
    "searched_linked_notified": "before the redaction: found by search, linked by another agent, a subscriber notified",
    "pre_backup_holds_secret": "the backup made before the redaction (and on PostgreSQL b's cluster) holds the secret",
    "gone_from_disk": "within 10 s of the redaction stored on a node: no file of its folder nor its log holds it",
    "index_terms_gone": "within 10 s: the secret's terms have a document frequency of 0 in the node's search index",
    "read_answers_tombstone": "within 10 s: a read of the entry answers its tombstone, never its content",
    "search_finds_nothing": "within 10 s: a search for the secret finds nothing",
    "inbox_has_no_content": "the subscriber's notifications never carried the secret",
    "partitioned_node_converges": "the stopped node, restarted, takes the redaction and drops the body",
    "hostile_peer_cannot_restore": "a peer serving the full body (feed, reconciliation) cannot bring it back",
    "later_backup_clean": "`bbs backup` of every honest node after the redaction holds no trace of the secret",
    "only_expected_copies": "the drill folder holds the secret only in the pre-redaction backup and the hostile node",
}


@dataclass
class World(checks.Drill):
    """The running drill: nodes, agents, the secret and its entry."""

    NAMES = CHECKS
    root: Path
    session: aiohttp.ClientSession
    nodes: dict[str, ServedNode] = field(default_factory=dict)
    agents: dict[str, dict[str, str]] = field(default_factory=dict)  # name -> headers (X-Agent: its id)
    secret: str = field(default_factory=lambda: "zq" + secrets.token_hex(16))
    dead: str = field(default_factory=lambda: f"http://127.0.0.1:{free_port()}")  # where no node listens
    target: str = ""  # the record hash of the secret's entry
    redaction: str = ""
    pre_backup: Path | None = None
    cluster: pg_cluster.Cluster | None = None  # the `--postgresql` form's server, holding ON_POSTGRESQL's database

    async def call(
        self,
        name: str,
        method: str,
        path: str,
        body: Any = None,
        headers: dict[str, str] | None = None,
        params: dict[str, str] | None = None,
    ) -> tuple[int, str]:
        """(status, text) of one request; (0, "") when no answer came."""
        return await self.nodes[name].attempt(self.session, method, path, body, headers, params, TIMEOUT)

    async def json(self, name: str, method: str, path: str, body: Any = None, **kw: Any) -> Any:
        """The JSON of a request that must succeed."""
        status, text = await self.call(name, method, path, body, **kw)
        if not 200 <= status < 300:
            raise ScenarioFailed(f"{name} {method} {path}: {status} {text[:200]}")
        return json.loads(text)


# ---- observations -------------------------------------------------------------------------------------------


def files_holding(paths: list[Path], needle: bytes) -> list[str]:
    """Every file under `paths` (folders searched recursively, files as they are) whose bytes contain `needle`."""
    found = []
    for path in paths:
        for p in [path] if path.is_file() else sorted(path.rglob("*")) if path.is_dir() else []:
            try:
                if p.is_file() and needle in p.read_bytes():
                    found.append(str(p))
            except OSError:  # a file the node removed while it was read (a merged index segment)
                continue
    return found


def beside(w: World, name: str) -> list[Path]:
    """A node's data folder and what lies beside it that is its own (its log)."""
    node = w.nodes[name]
    return [node.data, w.root / f"{name}.log"] + ([w.cluster.folder] if w.cluster and node.store else [])


def index_frequency(data: Path, secret: str) -> int:
    """The documents of `data`'s search index holding a term of `secret` (deleted documents still in a segment
    included), the index opened read-only beside the node that writes it."""
    index = SearchIndex(data / FOLDER, "", writable=False)
    return sum(index.doc_freq("content", term) for term in tokens(secret))


async def read_state(w: World, name: str) -> tuple[str, bool]:
    """What a read of the secret's entry answers on `name`: ('tombstone' | 'content' | 'other <status>', whether the
    secret is in the answer)."""
    status, text = await w.call(name, "GET", f"/v1/entries/{w.target}")
    if status != 200:
        return f"other {status}", w.secret in text
    data = json.loads(text)
    if data.get("entries"):
        return "content", w.secret in text
    stones = data.get("redacted") or []
    ok = len(stones) == 1 and stones[0].get("hash") == w.target and stones[0].get("redaction") == w.redaction
    return ("tombstone" if ok else "other 200"), w.secret in text


async def search_hits(w: World, name: str, **extra: str) -> int:
    status, text = await w.call(name, "GET", "/v1/search", params={"q": w.secret, **extra})  # as the node's admin
    if status != 200:
        return -1
    return len(json.loads(text)["entries"])


async def retry_until(attempt: Callable[[], Awaitable[tuple[bool, str]]], deadline: float) -> tuple[bool, str, float]:
    """Run `attempt` until it holds or the deadline passes (at least once); its last (ok, detail) and when."""
    while True:
        ok, detail = await attempt()
        if ok or time.monotonic() >= deadline:
            return ok, detail, time.monotonic()
        await asyncio.sleep(0.2)


async def wait_for(name: str, w: World, state: str, timeout: float) -> float:
    """Wait until `name` answers `state` for the entry; the monotonic time it did."""
    ok, detail, at = await retry_until(lambda: _state_is(w, name, state), time.monotonic() + timeout)
    if not ok:
        raise ScenarioFailed(f"{name} did not answer {state} within {timeout}s: {detail}")
    return at


async def _state_is(w: World, name: str, state: str) -> tuple[bool, str]:
    shown, _ = await read_state(w, name)
    return shown == state, shown


# ---- steps --------------------------------------------------------------------------------------------------


async def build(w: World) -> None:
    """Four nodes; a, b, c pull from each other, h pulls from all three; the agents."""
    for name in (*HONEST, HOSTILE):
        store = w.cluster.store_url(w.cluster.create_database()) if w.cluster and name == ON_POSTGRESQL else ""
        w.nodes[name] = ServedNode(name, w.root / name, env=dict(DRILL_ENV), store=store)
    await asyncio.gather(*(asyncio.to_thread(n.init) for n in w.nodes.values()))
    await asyncio.gather(*(n.start(w.session) for n in w.nodes.values()))
    for x in HONEST:
        for y in HONEST:
            if x != y:
                await w.nodes[x].peer(w.session, w.nodes[y])
        await w.nodes[HOSTILE].peer(w.session, w.nodes[x])
        # h is a's, b's and c's peer (a node serves only its peers) at a closed port: they pull nothing from it yet
        await w.nodes[x].peer(w.session, w.nodes[HOSTILE], via=w.dead)
    for agent, home in (("author", "a"), ("subscriber", "b"), ("linker", "b"), ("reader", "c")):
        w.agents[agent] = await w.nodes[home].agent(w.session, agent)


async def spread(w: World) -> None:
    """The secret posted on a, subscribed to on b, found on c, linked on b; backed up on a."""
    await w.json("b", "POST", "/v1/subscriptions", {"tags": ["creds"]}, headers=w.agents["subscriber"])
    for i in range(10):  # ordinary entries around the secret's, in the same index segments
        await w.nodes["a"].post(w.session, w.agents["author"], f"ordinary note {i} about the weather")
    w.target = await w.nodes["a"].post(
        w.session, w.agents["author"], f"the deploy password is {w.secret} keep it safe", tags=["creds"]
    )
    w.log(f"secret posted on a: {w.target[:12]}")

    async def everywhere() -> tuple[bool, str]:
        held = {n: await w.nodes[n].has(w.session, w.target) for n in w.nodes}
        return all(held.values()), ", ".join(f"{n} {'yes' if ok else 'NO'}" for n, ok in held.items())

    ok, detail, _ = await retry_until(everywhere, time.monotonic() + SETTLE_S)
    w.check("spread_everywhere", ok, detail)
    if not ok:
        raise ScenarioFailed("the secret did not spread")

    own = await w.nodes["b"].post(w.session, w.agents["linker"], "that password must be rotated")
    link = await w.json(
        "b", "POST", "/v1/links", {"source": own, "target": w.target, "link_type": "responds_to"},
        headers=w.agents["linker"],
    )  # fmt: skip
    found = await search_hits(w, "c", fresh="true")
    indexed = await asyncio.to_thread(index_frequency, w.nodes["c"].data, w.secret)

    async def notified() -> tuple[bool, str]:
        inbox = await w.json("b", "GET", "/v1/inbox", headers=w.agents["subscriber"])
        hashes = [n["record_hash"] for n in inbox["notifications"]]
        return w.target in hashes, f"subscriber's inbox on b: {len(hashes)} notification(s)"

    n_ok, n_detail, _ = await retry_until(notified, time.monotonic() + SETTLE_S)
    w.check(
        "searched_linked_notified",
        found == 1 and indexed >= 1 and link.get("target") == w.target and n_ok,
        f"search on c: {found} hit(s), index freq {indexed}; link {str(link.get('id'))[:8]} on b to it; {n_detail}",
    )
    w.pre_backup = w.root / "backups" / "a-before-redaction.tar"
    w.pre_backup.parent.mkdir()
    await asyncio.to_thread(bbs, "backup", "--data", str(w.nodes["a"].data), "--out", str(w.pre_backup))
    held = w.secret.encode() in w.pre_backup.read_bytes()
    detail = f"{w.pre_backup.name}: {'holds' if held else 'does NOT hold'} it"
    if w.cluster is not None:  # nor is the search of b's cluster: its WAL at least holds the body b stored
        in_cluster = await asyncio.to_thread(files_holding, [w.cluster.folder], w.secret.encode())
        held = held and bool(in_cluster)
        detail += f"; b's cluster folder: in {[str(Path(p).relative_to(w.cluster.folder)) for p in in_cluster]}"
    w.check("pre_backup_holds_secret", held, detail)


async def partition(w: World) -> None:
    """c and h stopped; h's peers pointed at a closed port; h serves again, never to hear of the redaction."""
    for name in ("c", HOSTILE):
        await asyncio.to_thread(w.nodes[name].kill)
    conn = sqlite3.connect(w.nodes[HOSTILE].data / "bbs.db")  # offline: no node serves the folder now
    try:
        with conn:
            conn.execute("UPDATE peers SET url = ?", (w.dead,))
    finally:
        conn.close()
    await w.nodes[HOSTILE].start(w.session)
    w.log("c stopped; h serves again, cut off from every peer")


async def redact(w: World) -> None:
    """The author redacts the entry on a."""
    data = await w.json("a", "POST", "/v1/redactions", {"target": w.target, "reason": "leaked"},
                        headers=w.agents["author"])  # fmt: skip
    w.redaction = str(data["redaction"])
    w.log(f"redacted by {w.redaction[:12]} on a")


async def after_redaction(w: World, name: str, stored: float, when: str) -> None:
    """The checks on `name`, from `stored` (when it answered the tombstone): gone from disk, tombstone, no hits."""
    deadline = stored + WINDOW_S
    needle = w.secret.encode()

    async def gone() -> tuple[bool, str]:
        held = await asyncio.to_thread(files_holding, beside(w, name), needle)
        return not held, f"{name}: " + (f"still in {held}" if held else "in no file of its folder nor its log")

    async def tombstone() -> tuple[bool, str]:
        shown, leaked = await read_state(w, name)
        return shown == "tombstone" and not leaked, f"{name}: {shown}" + (
            ", the secret in the answer" if leaked else ""
        )

    async def terms_gone() -> tuple[bool, str]:
        frequency = await asyncio.to_thread(index_frequency, w.nodes[name].data, w.secret)
        return frequency == 0, f"{name}: document frequency {frequency}"

    async def nothing_found() -> tuple[bool, str]:
        hits = await search_hits(w, name)
        return hits == 0, f"{name}: {hits} hit(s)"

    for check, attempt in (
        ("read_answers_tombstone", tombstone),
        ("search_finds_nothing", nothing_found),
        ("gone_from_disk", gone),
        ("index_terms_gone", terms_gone),
    ):
        ok, detail, at = await retry_until(attempt, deadline)
        w.check(check, ok and at - stored <= WINDOW_S, f"{detail} ({at - stored:.1f}s after {when})")


async def inbox_clean(w: World) -> None:
    status, text = await w.call("b", "GET", "/v1/inbox", headers=w.agents["subscriber"])
    w.check("inbox_has_no_content", status == 200 and w.secret not in text, f"b: {status}, {len(text)} bytes")


async def restart_partitioned(w: World) -> None:
    """c starts again; from when it answers the tombstone, the same checks."""
    await w.nodes["c"].start(w.session)
    try:
        stored = await wait_for("c", w, "tombstone", SETTLE_S)
    except ScenarioFailed as exc:
        w.check("partitioned_node_converges", False, str(exc))
        return
    w.check("partitioned_node_converges", True, "c answers the tombstone after its restart")
    await after_redaction(w, "c", stored, "c took the redaction")


async def hostile_peer(w: World) -> None:
    """a, b and c pull from h, which serves the body: they refuse it and nothing comes back."""
    shown, _ = await read_state(w, HOSTILE)
    before = {name: (await h_row(w, name))["reconciliations"] for name in HONEST}
    for name in HONEST:  # h's real address now: its feed from the start (the body in it), and its reconciliation
        await w.nodes[name].peer(w.session, w.nodes[HOSTILE])

    async def offered() -> tuple[bool, str]:  # each honest node read h's whole feed and reconciled with it
        seen = []
        for name in HONEST:
            row = await h_row(w, name)
            done = row["remote_head"] is not None and row["cursor_seq"] >= row["remote_head"]
            got = {k: v for k, v in row["counters"].items() if v and k != "invalid_reasons"}
            more = row["reconciliations"] > before[name]
            seen.append((name, done and more and not got.get("saved"), f"cursor {row['cursor_seq']}, {got}"))
        return all(ok for _, ok, _ in seen), "; ".join(f"{n} read h's feed to {c}" for n, _, c in seen)

    ok, detail, _ = await retry_until(offered, time.monotonic() + SETTLE_S)
    states = {n: await read_state(w, n) for n in HONEST}
    on_disk = {n: await asyncio.to_thread(files_holding, beside(w, n), w.secret.encode()) for n in HONEST}
    kept = all(s == ("tombstone", False) for s in states.values()) and not any(on_disk.values())
    hits = {n: await search_hits(w, n) for n in HONEST}
    w.check(
        "hostile_peer_cannot_restore",
        ok and shown == "content" and kept and not any(hits.values()),
        f"h serves {shown}; {detail}; reads {[s for s, _ in states.values()]}, hits {hits}, files {on_disk}",
    )


async def h_row(w: World, name: str) -> dict[str, Any]:
    """`name`'s status of its peer h (GET /v1/peers)."""
    peers = await w.json(name, "GET", "/v1/peers")
    rows = peers if isinstance(peers, list) else peers.get("peers", [])
    (row,) = [p for p in rows if p["node_id"] == w.nodes[HOSTILE].node_id]
    return dict(row)


async def later_backups(w: World) -> None:
    """`bbs backup` of every honest node, after the redaction: no trace."""
    for name in HONEST:
        if w.nodes[name].store:
            held = await asyncio.to_thread(files_holding, beside(w, name), w.secret.encode())
            found = f"HOLD it: {held}" if held else "are clean"
            w.check("later_backup_clean", not held, f"{name}: on PostgreSQL (`bbs backup` copies SQLite nodes only);"
                    f" its folder, log and cluster's folder {found}")  # fmt: skip
            continue
        out = w.root / "backups" / f"{name}-after-redaction.tar"
        await asyncio.to_thread(bbs, "backup", "--data", str(w.nodes[name].data), "--out", str(out))
        clean = w.secret.encode() not in out.read_bytes()
        w.check("later_backup_clean", clean, f"{out.name}: {'clean' if clean else 'HOLDS the secret'}")


def only_expected(w: World) -> None:
    """A byte search of the whole drill folder: the pre-redaction backup and h's folder, nothing else."""
    assert w.pre_backup is not None
    held = files_holding([w.root] + ([w.cluster.folder] if w.cluster else []), w.secret.encode())
    expected = [p for p in held if p == str(w.pre_backup) or Path(p).is_relative_to(w.nodes[HOSTILE].data)]
    others = sorted(set(held) - set(expected))
    names = [str(Path(p).relative_to(w.root)) if Path(p).is_relative_to(w.root) else p for p in held]
    w.check(
        "only_expected_copies",
        not others and str(w.pre_backup) in held,
        f"held by {names} (expected: the pre-redaction backup, rotated by operators; the hostile node h)",
    )


# ---- the drill ----------------------------------------------------------------------------------------------


async def run(root: Path, postgresql: bool = False) -> Report:
    """The whole drill in `root` (with `postgresql`, node b on a throwaway PostgreSQL cluster); every check's result
    (a step that could not run fails the checks it owns)."""
    started = time.monotonic()
    async with aiohttp.ClientSession(timeout=TIMEOUT) as session:
        w = World(root, session)
        try:
            if postgresql:
                w.cluster = await asyncio.to_thread(start_cluster)
            await build(w)
            w.log("four nodes up")
            await spread(w)
            await partition(w)
            await redact(w)
            stored = {"a": time.monotonic()}
            stored["b"] = await wait_for("b", w, "tombstone", SETTLE_S)
            await asyncio.gather(*(after_redaction(w, n, stored[n], "the redaction") for n in ("a", "b")))
            await inbox_clean(w)
            await restart_partitioned(w)
            await hostile_peer(w)
            await later_backups(w)
            only_expected(w)
        except ScenarioFailed as exc:
            w.log(f"the drill stopped: {exc}")
        finally:
            for node in w.nodes.values():
                node.kill()
            if w.cluster is not None:
                w.cluster.stop()
    wall = time.monotonic() - started
    results = w.outcomes()
    form = " (b on PostgreSQL)" if postgresql else ""
    text = table(results) + f"\n\nredaction drill{form} wall time: {wall:.1f}s"
    return Report(results, wall, text)


def start_cluster() -> pg_cluster.Cluster:
    """The `--postgresql` form's throwaway cluster (OPERATOR_SETTINGS); fails the drill where PostgreSQL is absent."""
    bindir = pg_cluster.find_bindir()
    if bindir is None:
        raise ScenarioFailed(
            "--postgresql: PostgreSQL's server programs are not installed (apt-get install postgresql)"
        )
    return pg_cluster.start(bindir, OPERATOR_SETTINGS)


def main() -> int:
    form = argparse.ArgumentParser(add_help=False)  # the drill's own flag; drill_main parses the rest (--keep)
    form.add_argument("--postgresql", action="store_true")
    known, rest = form.parse_known_args()
    sys.argv[1:] = rest
    return checks.drill_main(__doc__, "redaction drill", functools.partial(run, postgresql=known.postgresql))


if __name__ == "__main__":
    sys.exit(main())
