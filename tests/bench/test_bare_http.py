"""The bare floor server of the ingest benchmark: one process or several on one SQLite file, every acknowledged post
stored once, whichever process took it."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from node.store import db
from scenarios.bench import harness
from scenarios.bench.bare_http import BareServer
from scenarios.bench.ingest import node_signed_lanes


@pytest.mark.parametrize(("processes", "flock"), [(1, False), (2, False), (2, True)])
def test_every_acknowledged_post_is_stored_once_by_one_process_or_several(
    tmp_path: Path, processes: int, flock: bool
) -> None:
    database = tmp_path / "floor.db"
    lanes = node_signed_lanes([f"floor-{i}" for i in range(8)], 10, offset=1_000_000)
    with BareServer(database, processes=processes, flock=flock) as bare:
        assert len(bare.procs) == processes
        assert all(harness.listens(proc.pid, bare.port) for proc in bare.procs)
        result = asyncio.run(harness.run_load(bare.url, lanes, expect=lambda status: status == 201))
        assert result.count == 80
        assert bare.stored() == 80
    conn = db.connect(database, readonly=True)
    try:
        (ids, hashes) = conn.execute("SELECT count(DISTINCT id), count(DISTINCT record_hash) FROM entries").fetchone()
    finally:
        conn.close()
    assert (ids, hashes) == (80, 80)
    assert (tmp_path / "floor.db.lock").exists()  # made by every writer, to migrate the new file once
    assert all(proc.poll() is not None for proc in bare.procs)
