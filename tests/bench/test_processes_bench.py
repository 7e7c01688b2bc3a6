"""The several-processes benchmark's parts on a real cluster: a run through two real `bbs serve` processes of one
node stores every entry, deals the clients over both, and counts each process's CPU; the pg_locks sampler sees the
writer lock while a transaction holds it. Never asserts a time."""

from __future__ import annotations

import time
from pathlib import Path

import psycopg
import pytest

from node.store.db import WRITER_LOCK
from scenarios import pg_cluster as cluster_mod
from scenarios.bench import processes
from scenarios.bench.context import Context, Sizes

pytestmark = pytest.mark.postgresql


def test_the_sampler_sees_the_writer_lock_held_and_waited_for(pg_cluster: cluster_mod.Cluster) -> None:
    url = pg_cluster.url(pg_cluster.create_database())
    with psycopg.connect(url) as holder, psycopg.connect(url, autocommit=True) as waiter:
        holder.execute("SELECT pg_advisory_xact_lock(%s)", (WRITER_LOCK,))
        waiter.execute("SET lock_timeout = '300ms'")
        sampler = processes.LockSampler(url)
        with sampler.running():
            with pytest.raises(psycopg.errors.LockNotAvailable):
                waiter.execute("SELECT pg_advisory_xact_lock(%s)", (WRITER_LOCK,))
            time.sleep(0.05)
        holder.rollback()
    held, waited = sampler.shares()
    assert sampler.samples > 0
    assert held == 1.0 and 0 < waited <= 1.0


def test_a_run_through_two_processes_stores_every_entry(pg_cluster: cluster_mod.Cluster, tmp_path: Path) -> None:
    ctx = Context(sizes=Sizes.quick(), workdir=tmp_path, quick=True)
    run = processes.run_through(ctx, pg_cluster, "t", 2, batched=False, posts=16)  # raises unless all 16 are stored
    assert [p.entries for p in run.processes] == [8, 8]  # 8 clients of 2 posts, dealt over the processes
    assert run.result.count == 16 and run.entries == 16
    assert all(p.cpu > 0 and p.writer["busy_seconds"] > 0 for p in run.processes)
    assert (tmp_path / "mp-bench-t-2-2" / "node.key").read_bytes() == (
        tmp_path / "mp-bench-t-2-1" / "node.key"
    ).read_bytes()
    assert 0.0 <= run.waited <= 1.0 and 0.0 < run.held <= 1.0
