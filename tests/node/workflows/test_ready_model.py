"""Random operation sequences against a plain model: the ready set and every lease decision match it exactly."""

from __future__ import annotations

import random
from dataclasses import dataclass, field

import pytest

from identity.schema import TaskStatus
from node.errors import Conflict
from node.service import Node
from node.spaces.sight import OPERATOR
from node.workflows.service import Workflows
from tests.conftest import FakeClock
from wire.workflows import DeclareTask, FinishIn, LeaseIn

KEYS = [f"k{i}" for i in range(14)]
STATUSES: list[TaskStatus] = ["pending", "processing", "done", "completed", "failed", "cancelled"]


@dataclass
class Model:
    """What the task graph should be, computed the obvious way."""

    deps: dict[str, list[str]] = field(default_factory=dict)
    status: dict[str, str] = field(default_factory=dict)
    lease: dict[str, tuple[str, float]] = field(default_factory=dict)  # key -> (holder, expires at)

    def live(self, key: str, now: float) -> str | None:
        holder, until = self.lease.get(key, ("", 0.0))
        return holder if holder and until > now else None

    def done(self, key: str) -> bool:
        return self.status.get(key) in ("done", "completed")

    def ready(self, now: float) -> set[str]:
        return {
            k
            for k in self.deps
            if self.status[k] in ("pending", "processing")
            and all(self.done(d) for d in self.deps[k])
            and self.live(k, now) is None
        }


async def own_token(wf: Workflows, key: str, who: str) -> str | None:
    """The fencing token of `who`'s live lease on the task, as the lease answer gave it (None without one)."""
    task = await wf.task(key, OPERATOR)
    return task.lease.lease_id if task.lease is not None and task.lease.holder == who else None


@pytest.mark.parametrize("seed", range(4))
async def test_ready_and_leases_match_the_model(node: Node, clock: FakeClock, seed: int) -> None:
    rng = random.Random(seed)
    wf = node.workflows
    agents = [(await node.agents.create(f"w{i}", None)).agent_id for i in range(3)]
    model = Model()
    for _ in range(150):
        op = rng.choice(["declare", "declare", "lease", "lease", "release", "complete", "wait"])
        key = rng.choice(KEYS)
        who = rng.choice(agents)
        now = clock()
        if op == "declare":
            index = KEYS.index(key)
            # dependencies only on lower keys (declared or not yet): never a cycle
            deps = sorted(rng.sample(KEYS[:index], rng.randint(0, min(3, index)))) if rng.random() < 0.6 else None
            status = rng.choice(STATUSES) if rng.random() < 0.4 else None
            # only the live lease holder may change a leased task's status
            changes_status = key in model.status and status is not None and status != model.status[key]
            expected_ok = not changes_status or model.live(key, now) in (None, who)
            token = await own_token(wf, key, who) if key in model.deps else None
            try:
                await wf.declare(
                    who, DeclareTask(key=key, title=key.upper(), depends_on=deps, status=status, lease=token)
                )
                ok = True
            except Conflict:
                ok = False
            assert ok == expected_ok, (op, key, model)
            if ok:
                model.deps[key] = deps if deps is not None else model.deps.get(key, [])
                model.status[key] = status or model.status.get(key, "pending")
        elif op == "lease" and key in model.deps:
            seconds = rng.choice([30, 60, 300])
            holder = model.live(key, now)
            expected_ok = (
                model.status[key] in ("pending", "processing")
                and all(model.done(d) for d in model.deps[key])
                and holder in (None, who)
            )
            try:
                await wf.lease(who, key, LeaseIn(seconds=seconds))
                ok = True
            except Conflict:
                ok = False
            assert ok == expected_ok, (op, key, model)
            if ok:
                model.lease[key] = (who, now + seconds)
        elif op in ("release", "complete") and key in model.deps:
            holder = model.live(key, now)
            if op == "release":
                expected_ok = holder == who
            else:  # without a lease of its own, an agent completes only what it could lease, or a done task
                could_lease = model.status[key] in ("pending", "processing") and all(
                    model.done(d) for d in model.deps[key]
                )
                expected_ok = holder == who or (holder is None and (could_lease or model.done(key)))
            try:
                token = await own_token(wf, key, who)
                await (wf.release if op == "release" else wf.complete)(who, key, FinishIn(lease=token))
                ok = True
            except Conflict:
                ok = False
            assert ok == expected_ok, (op, key, model)
            if ok:
                if holder == who:
                    del model.lease[key]
                if op == "complete":
                    model.status[key] = "done"
        elif op == "wait":
            clock.advance(rng.choice([1, 29, 31, 61, 301]))
        page = await wf.ready(OPERATOR, limit=1000)
        assert {t.key for t in page.tasks} == model.ready(clock()), (op, key)
