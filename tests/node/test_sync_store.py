"""Storing a peer's batch: one set-based append, record by record only when the projections refuse one."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import msgspec

from identity import keys
from node import db
from node.sync_store import add_peer, ingest
from sync.store import Verified
from sync.verify import verify_record
from tests.sync.conftest import body_of, hash_of, signed_entry

NOW = 1_800_000_000_000


def verified(record: dict[str, Any]) -> Verified:
    checked = verify_record(body_of(record), hash_of(record))
    assert isinstance(checked, Verified), checked
    return checked


def fresh_db(tmp_path: Path) -> tuple[sqlite3.Connection, str]:
    conn = db.connect(tmp_path / "node.db")
    db.migrate(conn)
    peer = keys.SigningKey.generate().did
    add_peer(conn, "http://127.0.0.1:9", peer, NOW)
    return conn, peer


def store(conn: sqlite3.Connection, peer: str, batch: list[Verified]) -> list[tuple[str | None, str]]:
    conn.execute("BEGIN IMMEDIATE")
    outcomes = ingest(conn, peer, batch, [], None, NOW)
    conn.execute("COMMIT")
    return [(o.hash, o.outcome) for o in outcomes]


def test_links_inside_one_batch_resolve_and_absent_targets_are_wanted(tmp_path: Path) -> None:
    conn, peer = fresh_db(tmp_path)
    author = keys.SigningKey.generate()
    absent = hash_of(signed_entry(author, "never sent"))
    question = signed_entry(author, "the question")
    answer = signed_entry(author, "an answer", links=(hash_of(question),))
    dangling = signed_entry(author, "points nowhere here", links=(absent,))
    batch = [verified(r) for r in (answer, question, dangling)]
    assert store(conn, peer, batch) == [
        (hash_of(answer), "saved"),  # its target came later in the same batch
        (hash_of(question), "saved"),
        (hash_of(dangling), "pending_link"),
    ]
    assert [r[0] for r in conn.execute("SELECT hash FROM sync_wanted")] == [absent]
    assert store(conn, peer, batch[:1]) == [(hash_of(answer), "duplicate")]
    counters = conn.execute("SELECT saved, duplicate, pending_link FROM peers WHERE node_id = ?", (peer,)).fetchone()
    assert tuple(counters) == (2, 1, 1)


def test_a_record_the_projections_refuse_is_counted_and_the_rest_stored(tmp_path: Path) -> None:
    conn, peer = fresh_db(tmp_path)
    author = keys.SigningKey.generate()
    good = [verified(signed_entry(author, f"fine {i}")) for i in range(3)]
    bad = verified(signed_entry(author, "refused"))
    # a decoded form the entries table's CHECK refuses stands for any projection failure
    bad = bad._replace(decoded=msgspec.structs.replace(bad.decoded, entry_type="not a type"))
    outcomes = store(conn, peer, [good[0], bad, good[1], good[2]])
    assert outcomes == [(v.hash, "saved") for v in good] + [(bad.hash, "invalid")]
    stored = {r[0] for r in conn.execute("SELECT hash FROM records")}
    assert stored == {v.hash for v in good}
    assert conn.execute("SELECT count(*) FROM entries").fetchone()[0] == 3
    reason = conn.execute("SELECT reason, last_hash FROM peer_invalid WHERE node_id = ?", (peer,)).fetchone()
    assert tuple(reason) == ("store_refused", bad.hash)
