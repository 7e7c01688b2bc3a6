"""What the chaos scenario (scenarios/chaos.py) saw, and the invariants it checks at the end.

The ledger holds what clients were told (acknowledged writes, lease grants, completions, 5xx answers) and what
the samplers read from the nodes while the schedule ran (live leases, /metrics). `evaluate` turns it into one
Result per named invariant; `table` prints them.
"""

from __future__ import annotations

import re
import sqlite3
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

import aiohttp

HELD, FAILED, SKIPPED = "HELD", "FAILED", "SKIPPED"

INVARIANTS: dict[str, str] = {
    "digests_converge_10s": "every node's /v1/sync/digest is identical within 10 s of the heal",
    "records_converge_10s_except_equivocated": "every node holds the same federated record hashes within 10 s of"
    " the heal, equivocated addresses set aside",
    "no_acknowledged_write_missing": "every acknowledged write is on every node after the heal (writes a node"
    " acknowledged after its backup that no peer pulled before the restore are counted, not failed)",
    "one_body_per_address": "every node serves the same body for an equivocated address",
    "equivocation_flagged": "every node flags the content-equivocated address as `equivocated`",
    "one_live_lease_per_task": "never two live leases with different holders on one task identity (sampled on all"
    " nodes during the run, and in the grants clients were given)",
    "acknowledged_leases_kept": "after the heal, every node shows each lease a client was granted and did not"
    " finish as live and held by that client",
    "holders_finish_their_work": "a holder's completion with its lease token is never refused with a 4xx (a 503"
    " while the home node is unreachable is allowed), and some leased work was completed",
    "replay_refused": "a captured signed peer request replayed to its target changes nothing",
    "replay_refused_after_restart": "the same replay after the target restarted changes nothing",
    "no_5xx_but_503": "no 5xx other than 503, in client answers and in every node's /metrics",
    "no_traceback": "no traceback in any node's log",
}

# Every invariant holds since issue 23's work landed (sync protocol v2 with one body per address, the lease fence
# and fencing tokens, the peer replay fence); the short run in tests/hardening/test_chaos.py asserts them all.
EXPECTED_TO_HOLD = frozenset(INVARIANTS)

_5XX = re.compile(r"^bbs_http_requests_total\{(?P<labels>.*)\}\s+(?P<value>\S+)$")  # route labels hold braces
_LABEL = re.compile(r'(\w+)="([^"]*)"')


@dataclass
class Result:
    """One invariant's outcome and what it is based on."""

    status: str
    detail: str


@dataclass
class Grant:
    """A lease a client was granted (2xx), and when its holder began to finish it."""

    task: str
    holder: str
    lease_id: str
    acked: float
    ended: float = float("inf")


@dataclass
class Ledger:
    """Everything the scenario observed; filled while it runs, read by `evaluate`."""

    acked: dict[str, tuple[str, float]] = field(default_factory=dict)  # record hash -> (node, time acknowledged)
    excused: set[str] = field(default_factory=set)  # acked after the backup, on no peer when the node was restored
    grants: list[Grant] = field(default_factory=list)
    completed: int = 0
    completions_refused: list[str] = field(default_factory=list)
    refused: Counter[str] = field(default_factory=Counter)  # non-2xx client answers by "status code"
    client_5xx: Counter[str] = field(default_factory=Counter)
    metrics_5xx: dict[tuple[str, int], Counter[str]] = field(default_factory=dict)  # (node, incarnation) -> counts
    lease_samples: int = 0
    lease_conflicts: list[str] = field(default_factory=list)
    equivocated: dict[str, str] = field(default_factory=dict)  # address -> "content" | "scope"
    bodies: dict[str, dict[str, Any]] = field(default_factory=dict)  # address -> node -> served body (or None)
    replays: dict[str, tuple[bool, str]] = field(default_factory=dict)  # invariant -> (changed nothing, detail)
    digest_after_heal_s: float | None = None
    records_after_heal_s: float | None = None
    digests_at_end: dict[str, Any] = field(default_factory=dict)
    events: list[str] = field(default_factory=list)
    ran: Counter[str] = field(default_factory=Counter)  # how often each adversary actually acted
    leases_lost: list[str] = field(default_factory=list)  # unfinished grants not live for their holder at the end

    def grant(self, task: str, holder: str, lease: dict[str, Any], now: float) -> Grant:
        g = Grant(task, holder, str(lease["lease_id"]), now)
        self.grants.append(g)
        return g

    def scrape(self, node: str, incarnation: int, text: str) -> None:
        """Keep the latest /metrics 5xx counts of one process (counters restart with the process)."""
        counts: Counter[str] = Counter()
        for line in text.splitlines():
            match = _5XX.match(line)
            if not match:
                continue
            labels = dict(_LABEL.findall(match.group("labels")))
            if labels.get("status", "").startswith("5"):
                counts[f"{labels['status']} {labels.get('method', '')} {labels.get('route', '')}"] += int(
                    float(match.group("value"))
                )
        self.metrics_5xx[(node, incarnation)] = counts

    def sample_leases(self, holders: dict[str, dict[str, str]], at: str) -> None:
        """One round of live leases seen on every node: node -> {task identity: holder}."""
        self.lease_samples += 1
        seen: dict[str, dict[str, str]] = defaultdict(dict)
        for node, tasks in holders.items():
            for task, holder in tasks.items():
                seen[task][node] = holder
        for task, by_node in seen.items():
            if len(set(by_node.values())) > 1:
                self.lease_conflicts.append(f"{task} at {at}: held by {_short(by_node)}")


async def ledger_call(
    session: aiohttp.ClientSession,
    ledger: Ledger,
    node: Any,
    method: str,
    path: str,
    body: Any = None,
    headers: dict[str, str] | None = None,
    *,
    timeout: aiohttp.ClientTimeout,
    where: str = "",
) -> tuple[int, Any]:
    """(status, JSON) of one request to `node` (a served node: its `url`, its `admin` headers unless `headers`); (0,
    None) when no answer came (the node is down or cut off). A refused write counts in `ledger.refused` (GETs poll for
    what sync has not brought yet), a 5xx in `ledger.client_5xx` by route, `where` naming who answered."""
    try:
        async with session.request(
            method, node.url + path, json=body, headers=headers or node.admin, timeout=timeout
        ) as resp:
            data = await resp.json(content_type=None)
    except (aiohttp.ClientError, TimeoutError, ValueError):
        return 0, None
    if resp.status >= 300:
        code = data.get("code", "") if isinstance(data, dict) else ""
        if method != "GET":
            ledger.refused[f"{resp.status} {code}"] += 1
        if resp.status >= 500:
            route = re.sub(r"/tasks/[^/?]+", "/tasks/{task_id}", path.split("?")[0])
            ledger.client_5xx[f"{resp.status} {code} {method} {route}{where}"] += 1
    return resp.status, data


def _short(by_node: dict[str, str]) -> str:
    return ", ".join(f"{n}:{h[-8:]}" for n, h in sorted(by_node.items()))


def hashes(db_path: Path, *, federation_only: bool = False) -> set[str]:
    """The record hashes a node's database holds (read-only; safe next to the running node)."""
    conn = sqlite3.connect(f"file:{db_path}?mode=ro", uri=True, timeout=30)
    try:
        sql = "SELECT hash FROM records" + (" WHERE scope = 'federation'" if federation_only else "")
        return {row[0] for row in conn.execute(sql)}
    finally:
        conn.close()


class Trace(NamedTuple):
    """One logged traceback: its exception (the last line of the last traceback of a chain) and the log line that
    logged it (the logger and its message: which site it came from), or "" when no record came before it."""

    exception: str
    logged: str

    @property
    def site(self) -> str:
        """The record that logged it less its time and its key=value pairs (a request id, a duration): the same for
        every occurrence at one site, so occurrences are counted by it."""
        return _EXTRAS.sub("", _TIME.sub("", self.logged))


_LOG_RECORD = re.compile(r"\d{4}-\d\d-\d\d[ T]\d\d:")  # a record's first line: the log format's asctime
_CHAINED = ("During handling of the above exception", "The above exception was the direct cause")
_TRACEBACK = "Traceback (most recent call last):"  # what Python prints first, alone on its line
_TIME = re.compile(r"^\d{4}-\d\d-\d\d[ T][\d:,.]+ ")  # asctime and the space after it
_EXTRAS = re.compile(r'(?: [A-Za-z_]\w*=(?:"(?:[^"\\]|\\.)*"|[^ "]+))+$')  # the text format's trailing key=value pairs


def tracebacks(log: Path) -> list[Trace]:
    """Every traceback in a log, a chain of them (`raise ... from`, an exception while handling another) once."""
    lines = log.read_text(errors="replace").splitlines() if log.exists() else []
    found: list[Trace] = []
    logged, i = "", 0
    while i < len(lines):
        if lines[i] != _TRACEBACK:
            logged = lines[i] if _LOG_RECORD.match(lines[i]) else logged
            i += 1
            continue
        chained = True
        while i < len(lines) and lines[i] == _TRACEBACK and chained:
            i += 1  # the frames, then the exception's first line, then what it prints after it
            while i < len(lines) and (lines[i].startswith(" ") or not lines[i].strip()):
                i += 1
            exception = lines[i] if i < len(lines) else "Traceback with no exception line"
            i += 1
            chained = False
            while i < len(lines) and lines[i] != _TRACEBACK and not _LOG_RECORD.match(lines[i]):
                chained = chained or lines[i].startswith(_CHAINED)
                i += 1
        found.append(Trace(exception, logged))
    return found


def overlaps(grants: list[Grant]) -> list[str]:
    """Grants to different holders of one task where the second was acknowledged before the first ended."""
    out = []
    by_task: dict[str, list[Grant]] = defaultdict(list)
    for g in grants:
        by_task[g.task].append(g)
    for task, gs in by_task.items():
        gs.sort(key=lambda g: g.acked)
        for i, first in enumerate(gs):
            for second in gs[i + 1 :]:
                if second.holder != first.holder and second.acked < first.ended:
                    out.append(f"{task}: granted to {first.holder[-8:]} and then to {second.holder[-8:]}")
    return out


def evaluate(
    ledger: Ledger, present: dict[str, set[str]], logs: list[Path], adversaries: set[str]
) -> dict[str, Result]:
    """Each invariant's Result, from the ledger and the record hashes each node holds after the heal."""
    r: dict[str, Result] = {}

    def within(seconds: float | None) -> Result:
        if seconds is not None and seconds <= 10:
            return Result(HELD, f"after {seconds:.1f}s")
        return Result(FAILED, f"not within 10 s; {ledger.digests_at_end}")

    r["digests_converge_10s"] = within(ledger.digest_after_heal_s)
    r["records_converge_10s_except_equivocated"] = within(ledger.records_after_heal_s)

    missing, excused = [], 0
    for record_hash, (node, _) in ledger.acked.items():
        lacking = [n for n, held in present.items() if record_hash not in held]
        if not lacking:
            continue
        if record_hash in ledger.excused:
            excused += 1
        else:
            missing.append(f"{record_hash[:12]} (acked by {node}, missing on {','.join(lacking)})")
    detail = (
        f"{len(ledger.acked)} acknowledged; {len(ledger.excused)} acknowledged after the backup and pulled by no"
        f" peer before the restore, {excused} of them lost with it"
    )
    r["no_acknowledged_write_missing"] = (
        Result(FAILED, f"{len(missing)} missing, e.g. {missing[:3]}; {detail}") if missing else Result(HELD, detail)
    )

    if "equivocate" in adversaries and ledger.equivocated:
        differ = []
        for address, kind in ledger.equivocated.items():
            served = ledger.bodies.get(address, {})
            versions = {repr(_signed_fields(body)) for body in served.values()}
            if len(versions) > 1:
                differ.append(f"{kind} {address[:12]}: {_versions(served)}")
        r["one_body_per_address"] = (
            Result(FAILED, "; ".join(differ))
            if differ
            else Result(HELD, f"{len(ledger.equivocated)} equivocated addresses, one body each")
        )
        unflagged = [
            node
            for address, kind in ledger.equivocated.items()
            if kind == "content"
            for node, body in ledger.bodies.get(address, {}).items()
            if not (body or {}).get("equivocated")
        ]
        r["equivocation_flagged"] = (
            Result(FAILED, f"not flagged on {','.join(sorted(unflagged))}")
            if unflagged
            else Result(HELD, "flagged on every node")
        )
    else:
        r["one_body_per_address"] = r["equivocation_flagged"] = Result(SKIPPED, "no equivocating author")

    conflicts = ledger.lease_conflicts + overlaps(ledger.grants)
    tasks = sorted({c.split(" ", 1)[0].rstrip(":") for c in conflicts})
    lease_detail = f"{len(ledger.grants)} grants, {ledger.completed} completions, {ledger.lease_samples} samples"
    r["one_live_lease_per_task"] = (
        Result(FAILED, f"tasks {tasks}: {len(conflicts)} conflicts, e.g. {conflicts[:2]}; {lease_detail}")
        if conflicts
        else Result(HELD, lease_detail)
    )
    unfinished = sum(1 for g in ledger.grants if g.ended == float("inf"))
    r["acknowledged_leases_kept"] = (
        Result(FAILED, f"{len(ledger.leases_lost)} not kept: {ledger.leases_lost[:3]}")
        if ledger.leases_lost
        else Result(HELD, f"{unfinished} unfinished grants live for their holder on every node")
    )

    if ledger.completions_refused:
        refused = ledger.completions_refused
        r["holders_finish_their_work"] = Result(FAILED, f"{len(refused)} refused, e.g. {refused[:3]}")
    elif ledger.grants and not ledger.completed:
        r["holders_finish_their_work"] = Result(FAILED, f"{len(ledger.grants)} grants, no completion")
    else:
        r["holders_finish_their_work"] = Result(HELD, f"{ledger.completed} completions, none refused")

    for name in ("replay_refused", "replay_refused_after_restart"):
        if name in ledger.replays:
            ok, why = ledger.replays[name]
            r[name] = Result(HELD if ok else FAILED, why)
        else:
            why = "no replaying peer" if "replay" not in adversaries else "not tested: no fresh captured request"
            r[name] = Result(SKIPPED, why)

    from_metrics: Counter[str] = Counter()
    for counts in ledger.metrics_5xx.values():
        from_metrics.update(counts)
    bad_client = {k: v for k, v in ledger.client_5xx.items() if not k.startswith("503")}
    bad_metrics = {k: v for k, v in from_metrics.items() if not k.startswith("503")}
    n503 = sum(v for k, v in ledger.client_5xx.items() if k.startswith("503"))
    m503 = sum(v for k, v in from_metrics.items() if k.startswith("503"))
    where = dict(Counter({k: v for k, v in ledger.client_5xx.items() if k.startswith("503")}).most_common(3))
    five = f"503s: {n503} answered to clients (most: {where}), {m503} in /metrics"
    r["no_5xx_but_503"] = (
        Result(FAILED, f"clients {dict(bad_client)}, metrics {dict(bad_metrics)}; {five}")
        if bad_client or bad_metrics
        else Result(HELD, five)
    )

    traces = {log.stem: found for log in logs if (found := tracebacks(log))}
    r["no_traceback"] = (
        Result(
            FAILED,
            "; ".join(
                f"{n}: {len(t)}, e.g. {t[0].exception[:100]} (after: {t[0].logged[:100]})" for n, t in traces.items()
            ),
        )
        if traces
        else Result(HELD, f"{len(logs)} logs clean")
    )
    return r


def _signed_fields(body: dict[str, Any] | None) -> dict[str, Any] | None:
    """A served body without the flag, which may differ by node (a `local` twin is flagged on its node only)."""
    return None if body is None else {k: v for k, v in body.items() if k != "equivocated"}


def _versions(served: dict[str, Any]) -> str:
    def brief(body: Any) -> str:
        if body is None:
            return "missing"
        return f"{body.get('scope')}/{','.join(body.get('tags', []))}"

    return ", ".join(f"{node}={brief(body)}" for node, body in sorted(served.items()))


def table(results: dict[str, Result]) -> str:
    """The results as a fixed-width table."""
    lines = [f"{'invariant':<42} {'result':<8} detail"]
    for name, res in results.items():
        lines.append(f"{name:<42} {res.status:<8} {res.detail}")
    failed = [n for n, res in results.items() if res.status == FAILED]
    lines.append(f"FAILED invariants: {', '.join(failed)}" if failed else "every invariant held")
    return "\n".join(lines)
