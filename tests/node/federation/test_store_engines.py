"""node/federation/store.py on both engines: one story appended to a SQLite file and to a PostgreSQL database gives
the same changes feed pages, digests, reconciliation snapshots, fetches, prefix answers, peer rows and cursors
(docs/decisions.md records 50 and 76)."""

from __future__ import annotations

import hashlib
import json
import sqlite3
from pathlib import Path
from typing import Any

from identity import keys, records
from node.features import LOG
from node.federation import store
from node.ops import store as ops_store
from node.store import db, pg_conn, projections
from node.store.conn import Conn
from sync.messages import PROTOCOL_VERSION, PeerHealth
from sync.store import Cursor, Page, Verified
from sync.verify import verify_record
from tests.node.api_helpers import entry_record
from tests.pg_fixtures import OpenStore
from tests.sync.conftest import body_of, hash_of

T0 = 1_767_323_045_000
NOW = 1_800_000_000_000
NODE = keys.SigningKey.generate().did  # this node
PEER = keys.SigningKey.generate().did  # the peer whose records are in the log and who asks


def story() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Records written here (one of them `scope: local`) and records that came from PEER."""
    alice, bob = keys.SigningKey.generate(), keys.SigningKey.generate()
    here = [entry_record(alice, f"alice {i}", created_ms=T0 + 10 * (5 - i)) for i in range(5)]
    here.append(entry_record(alice, "kept here", created_ms=T0, scope="local"))
    absent = entry_record(bob, "never sent", created_ms=T0)
    link = {"target": records.compute_hash(absent), "link_type": "supports", "annotation": ""}
    theirs = [entry_record(bob, f"bob {i}", created_ms=T0 + 7 * i, links=[link] if i == 0 else []) for i in range(3)]
    return here, theirs


def page(p: Page) -> tuple[int, int, bool, list[tuple[int, str, str, bytes]]]:
    """A page without its epoch (each database has its own)."""
    return p.head, p.next, p.more, p.items


def answers(conn: Conn, here: list[dict[str, Any]], theirs: list[dict[str, Any]]) -> dict[str, Any]:
    """Append the story, flag one record void, and read everything the sync store reads."""
    conn.execute("BEGIN")
    ops_store.insert_node_identity_txn(conn, NODE, "store-epoch")
    for batch, origin in ((here, "local"), (theirs, PEER)):
        items = [projections.Incoming(r, *records.check(r), scope=str(r["scope"])) for r in batch]
        projections.append_many(conn, items, origin=origin, now_ms=T0)
    flagged = records.compute_hash(here[1])
    seq, version = conn.execute("SELECT seq, version FROM records WHERE hash = ?", (flagged,)).fetchone()
    conn.execute(
        "INSERT INTO void_records (seq, version, hash, kind, author_id, reason, flagged_ms)"
        " VALUES (?, ?, ?, 'entry', ?, 'unvouched', ?)",
        (seq, version, flagged, here[1]["author_id"], NOW),
    )
    store.add_peer_txn(conn, "http://127.0.0.1:9", PEER, NOW)
    verified = verify_record(body_of(theirs[0]), hash_of(theirs[0]))
    assert isinstance(verified, Verified)
    first = conn.execute("SELECT seq FROM records WHERE hash = ?", (hash_of(theirs[0]),)).fetchone()[0]
    _, missing = store._want_missing_targets(conn, PEER, [(verified, (first, True))], NOW)
    conn.execute("COMMIT")
    versions = [r[0] for r in conn.execute("SELECT version FROM records ORDER BY seq").fetchall()]
    out: dict[str, Any] = {"missing": missing}
    out["feed"] = page(store.changes_page(conn, NODE, 0, 100, None, PROTOCOL_VERSION))
    out["feed_to_peer"] = page(store.changes_page(conn, NODE, 0, 100, PEER, PROTOCOL_VERSION))
    pages, since, more = [], 0, True
    while more:
        p = store.changes_page(conn, NODE, since, 2, None, PROTOCOL_VERSION)
        pages.append(page(p))
        since, more = p.next, p.more
    out["pages"] = pages
    out["v2_feed"] = page(store.changes_page(conn, NODE, 0, 100, None, 2))
    out["digest"] = store.digest(conn, NODE)
    out["digest_v2"] = store.digest(conn, NODE, 2)
    out["digest_space"] = store.digest(conn, NODE, space="no such space")
    out["reconcile"] = store.reconcile_snapshot(conn, NODE, PROTOCOL_VERSION, PEER)[1:]
    out["reconcile_v2"] = store.reconcile_snapshot(conn, NODE, 2, None)[1:]
    out["set"] = store.set_snapshot(conn, PROTOCOL_VERSION, None)[1:]
    out["set_space"] = store.set_snapshot(conn, PROTOCOL_VERSION, "no such space")[1:]
    out["hosting"] = store.hosting_snapshot(conn, PROTOCOL_VERSION, "no such space", PEER)
    asked = [hash_of(here[0]), versions[2], flagged, hash_of(here[5]), "0" * 64]
    out["fetch"] = store.fetch_items(conn, NODE, asked, PROTOCOL_VERSION, PEER)
    out["held"] = store.held_versions(conn, [versions[0], versions[3], "f" * 64])
    prefixes = sorted({versions[0][:4], versions[4][:6], version[:5], "0000", "ffff", version})
    out["prefixed"] = store.prefixed_versions(conn, prefixes)
    out["servable_v2"] = store.servable_versions(conn, 2, versions)
    out["wanted"] = store.wanted_hashes(conn, PEER, NOW, 10)
    conn.execute("BEGIN")
    store.want_failed_txn(conn, PEER, sorted(missing), NOW)
    conn.execute("COMMIT")
    out["wanted_after_failure"] = (
        store.wanted_hashes(conn, PEER, NOW + 1999, 10),
        store.wanted_hashes(conn, PEER, NOW + 2000, 10),
    )
    out["cursors"] = cursors(conn)
    return out


def cursors(conn: Conn) -> list[Any]:
    """Cursors written, kept, replaced and upgraded; the puller's notes; the peer's status after each."""
    seen: list[Any] = [store.cursor_version(conn, PEER)]
    steps: list[tuple[Cursor, int | None]] = [
        (Cursor("epoch-1", 5), 9),
        (Cursor("epoch-1", 8), None),  # the kept too_new_from stays
        (Cursor("epoch-1", 9), 7),  # the lower one wins
        (Cursor("epoch-2", 3), None),  # another epoch: replaced, too_new_from with it
        (Cursor("epoch-2", 12), 4),
    ]
    for cursor, too_new_from in steps:
        conn.execute("BEGIN")
        store.write_cursor_txn(conn, PEER, cursor, too_new_from)
        conn.execute("COMMIT")
        seen.append(store.cursor_version(conn, PEER))
    conn.execute("BEGIN")
    store.upgrade_cursor_txn(conn, PEER)  # back to just before too_new_from (3)
    store.note_peer_txn(conn, PEER, NOW, "epoch-2", 3, None, True, PeerHealth(), 3)  # caught up
    conn.execute("COMMIT")
    seen.append((store.cursor_version(conn, PEER), store.peer_statuses(conn, NOW + 5000)))
    conn.execute("BEGIN")
    store.note_peer_txn(conn, PEER, NOW + 1000, None, 20, None, False, None, None)  # behind again
    store.note_peer_txn(conn, PEER, NOW + 2000, None, None, "connection refused", False, None, None)
    conn.execute("COMMIT")
    seen.append(store.peer_statuses(conn, NOW + 5000))
    return seen


def test_the_sync_store_answers_alike_on_both_engines(tmp_path: Path, pg_migrated_url: str) -> None:
    """The same records give the same feed pages, digests (bytewise `ORDER BY version` on both), snapshots,
    fetches, prefixes, wanted records, cursors and peer statuses on SQLite and on PostgreSQL."""
    here, theirs = story()
    got = []
    # PostgreSQL first: sync.compat remembers each version's v2 verdict, so the second engine reads no bodies for it
    for conn in (pg_conn.connect(pg_migrated_url, log=LOG), db.connect(tmp_path / "sync.db", log=LOG)):
        try:
            if isinstance(conn, sqlite3.Connection):
                db.migrate(conn)
            got.append(answers(conn, here, theirs))
        finally:
            conn.close()
    postgres, sqlite = got
    for name in sqlite:
        assert postgres[name] == sqlite[name], name
    # and what they agree on is the story's
    federated = [records.compute_hash(r) for r in here[:5] + theirs]
    fed_versions = [i[2] for i in sqlite["feed"][3]]
    assert [i[1] for i in sqlite["feed"][3]] == [h for h in federated if h != records.compute_hash(here[1])]
    assert [i[1] for i in sqlite["feed_to_peer"][3]] == [records.compute_hash(r) for r in (here[0], *here[2:5])]
    assert [i for p in sqlite["pages"] for i in p[3]] == sqlite["feed"][3] and len(sqlite["pages"]) == 4
    assert sqlite["digest"].count == 7 and sqlite["digest_space"].count == 0
    assert sorted(sqlite["set"][1]) == sqlite["set"][1]  # time order first, then version
    assert sorted(bytes.hex(v) for _, v in sqlite["set"][1]) == sorted(fed_versions)
    assert sqlite["reconcile"] == sqlite["set"] and sqlite["hosting"] == []
    assert [f[0] for f in sqlite["fetch"]] == [records.compute_hash(here[0]), federated[2]]
    assert sqlite["missing"] == {theirs[0]["links"][0]["target"]}
    assert sqlite["wanted"] == sorted(sqlite["missing"])
    assert sqlite["wanted_after_failure"] == ([], sorted(sqlite["missing"]))
    cursor_versions = sqlite["cursors"][:6]
    assert [c.too_new_from if c else None for c in cursor_versions] == [None, 9, 9, 7, None, 4]
    (upgraded, statuses), behind = sqlite["cursors"][6:]
    assert upgraded.too_new_from is None and statuses[0].cursor_seq == 3 and statuses[0].lag_records == 0
    assert statuses[0].reconciliations == 1 and statuses[0].sync_version == 3
    assert behind[0].lag_records == 17 and behind[0].last_error == "connection refused"


def test_hosting_records_are_served_by_the_node_they_name_on_both_engines(open_store: OpenStore) -> None:
    """A hosting record of a space is served to the node it names (its body's `node`, read as JSON on each engine),
    within that peer's filter of spaces, and every record of a space both nodes host; the space's records count in
    its own digest and set, not the public one. Each body also holds a `\u0000`, which PostgreSQL's JSON refuses
    to read out unless rewritten first (docs/decisions.md record 84)."""
    conn = open_store(LOG)
    space, other = "5" * 64, keys.SigningKey.generate().did
    conn.execute("BEGIN")
    ops_store.insert_node_identity_txn(conn, NODE, "store-epoch")
    store.add_peer_txn(conn, "http://127.0.0.1:9", PEER, NOW)
    store.add_peer_txn(conn, "http://127.0.0.1:10", other, NOW, spaces=["6" * 64])  # not `space`
    stored = []
    for n, (in_space, node) in enumerate([(space, PEER), (space, other), (None, None)]):
        body = json.dumps({"kind": "space_host", "node": node, "space": in_space, "n": n, "note": "\x00\x01"}).encode()
        version = hashlib.sha256(body).hexdigest()
        conn.execute(
            "INSERT INTO records (hash, version, kind, author_id, created_at, created_ms, origin, received_ms, body,"
            " space) VALUES (?, ?, ?, 'did:key:a', '2026-01-01T00:00:00Z', ?, 'local', 0, ?, ?)",
            (f"{n:064x}", version, "space_host" if in_space else "entry", T0 + n, body, in_space),
        )
        stored.append((f"{n:064x}", version, T0 + n))
    conn.execute("COMMIT")
    (named, _, public) = stored

    def hashes(items: list[Any]) -> list[str]:
        return [item[1] if len(item) == 4 else item[0] for item in items]

    assert hashes(store.changes_page(conn, NODE, 0, 10, PEER, PROTOCOL_VERSION).items) == [named[0], public[0]]
    assert hashes(store.changes_page(conn, NODE, 0, 10, other, PROTOCOL_VERSION).items) == [public[0]]
    assert store.hosting_snapshot(conn, PROTOCOL_VERSION, space, PEER) == [(named[2], bytes.fromhex(named[1]))]
    assert store.hosting_snapshot(conn, PROTOCOL_VERSION, space, other) == []
    served = store.reconcile_snapshot(conn, NODE, PROTOCOL_VERSION, PEER)[2]
    assert served == [(named[2], bytes.fromhex(named[1])), (public[2], bytes.fromhex(public[1]))]
    asked = [named[0], stored[1][0], public[1]]
    assert hashes(store.fetch_items(conn, NODE, asked, PROTOCOL_VERSION, PEER)) == [named[0], public[0]]
    assert hashes(store.fetch_items(conn, NODE, asked, PROTOCOL_VERSION, other)) == [public[0]]
    assert (store.digest(conn, NODE, space=space).count, store.digest(conn, NODE).count) == (2, 1)
    assert len(store.set_snapshot(conn, PROTOCOL_VERSION, space)[2]) == 2
    conn.execute("BEGIN")  # now this node and PEER host the space: every record of it is served to PEER
    conn.executemany("INSERT INTO space_hosts (space_id, node_id) VALUES (?, ?)", [(space, NODE), (space, PEER)])
    conn.execute("COMMIT")
    every = [named[0], stored[1][0], public[0]]
    assert hashes(store.changes_page(conn, NODE, 0, 10, PEER, PROTOCOL_VERSION).items) == every
    assert hashes(store.fetch_items(conn, NODE, asked, PROTOCOL_VERSION, PEER)) == every
    assert len(store.reconcile_snapshot(conn, NODE, PROTOCOL_VERSION, PEER)[2]) == 3
    assert hashes(store.changes_page(conn, NODE, 0, 10, other, PROTOCOL_VERSION).items) == [public[0]]
