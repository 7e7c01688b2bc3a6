"""A peer's batch stored by `node.federation.store.ingest_txn` on both engines: one story of verified records (public
entries and a link, a key event with its vouch page and the posts it decides, a space this node hosts with a member's
post, a second version of one address) ingested into a SQLite file and into a PostgreSQL database gives the same
outcomes, the same digests and the same projections (docs/decisions.md records 50, 76 and 80)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from identity import canonical, keys, records
from node.features import LOG
from node.federation import store
from node.ops import store as ops_store
from node.spaces.service import nonce
from node.store import projections
from node.store.conn import Conn
from sync.store import Verified
from sync.verify import verify_record
from tests.node.api_helpers import entry_record, link_record
from tests.node.federation import v3_story
from tests.pg_fixtures import on_both_engines

NOW = 1_800_000_000_000
T0 = 1_767_323_045_000
SEED = iter(range(0x60, 0x70))
NODE, PEER = (keys.SigningKey.from_seed(bytes([next(SEED)]) * 32).did for _ in range(2))
AUTHOR, OWNER, WRITER = (keys.SigningKey.from_seed(bytes([next(SEED)]) * 32) for _ in range(3))
# read back after the batch: each table's rows in one order on both engines (the log's own columns, no timestamps)
READS = {
    "records": "SELECT seq, hash, version, kind, author_id, origin, space FROM records ORDER BY seq",
    "void": "SELECT hash, version, reason FROM void_records ORDER BY version",
    "waiting": "SELECT version FROM waiting ORDER BY version",
    "wanted": "SELECT hash FROM sync_wanted ORDER BY hash",
    "equivocations": "SELECT * FROM equivocations ORDER BY 1, 2",
    "spaces": "SELECT space_id, node_id FROM space_hosts ORDER BY 1, 2",
    "roles": "SELECT * FROM space_roles ORDER BY 1, 2",
    "counters": "SELECT saved, duplicate, pending_link, invalid, void FROM peers WHERE node_id = ?",
}


def signed(key: keys.SigningKey, **body: Any) -> dict[str, Any]:
    """A v2 record of `key`'s identity, signed by it."""
    head = {"schema_version": canonical.SCHEMA_VERSION, "author_id": key.did, "created_at": "2026-03-03T08:00:00Z"}
    return records.sign({**head, **body}, key)


def verified(record: dict[str, Any]) -> Verified:
    checked = verify_record(canonical.canonical_bytes(record), records.compute_hash(record))
    assert isinstance(checked, Verified), checked
    return checked


def batch() -> list[dict[str, Any]]:
    """The story, in the order a peer's feed serves it."""
    question = entry_record(AUTHOR, "the question", created_ms=T0)
    answer = entry_record(AUTHOR, "an answer", created_ms=T0 + 10, links=[
        {"target": records.compute_hash(question), "link_type": "supports", "annotation": ""}])  # fmt: skip
    absent = entry_record(AUTHOR, "never sent", created_ms=T0 + 20)
    link = link_record(AUTHOR, records.compute_hash(answer), records.compute_hash(absent), "contradicts", created_ms=T0)
    first, second = (entry_record(AUTHOR, "one address", created_ms=T0 + 30, tags=t) for t in (["a"], ["b"]))
    assert records.compute_hash(first) == records.compute_hash(second)  # two versions of one address
    story = v3_story.story().records
    made = signed(OWNER, kind="space", name="family", description="", nonce=nonce())
    space = records.compute_hash(made)
    hosting = signed(OWNER, kind="space_host", space=space, role="host", seq=1, node=NODE)
    member = signed(OWNER, kind="space_member", space=space, role="writer", seq=1, member=WRITER.did)
    note = entry_record(WRITER, "a family note", created_ms=T0 + 40, schema_version="v2", space=space)
    keyed = [story[name] for name in ("p0", "e1", "g1", "p1", "p0x")]
    return [question, answer, link, first, *keyed, made, hosting, member, note, second]


STORY = batch()  # once: a space's creation carries a random nonce
ABSENT = entry_record(AUTHOR, "never sent", created_ms=T0 + 20)  # the entry the link record names, never sent


def ingest(conn: Conn) -> dict[str, Any]:
    """The story stored as one peer's batch with its cursor, then everything the batch decided read back."""
    items = [verified(r) for r in STORY]
    conn.execute("BEGIN")
    ops_store.insert_node_identity_txn(conn, NODE, "store-epoch")
    store.add_peer_txn(conn, "http://127.0.0.1:9", PEER, NOW)
    conn.execute("COMMIT")
    conn.execute("BEGIN")
    outcomes = store.ingest_txn(conn, PEER, items, [], store.Cursor("peer-epoch", len(items)), NOW)
    conn.execute("COMMIT")
    out: dict[str, Any] = {"outcomes": sorted((o.hash, o.outcome, o.reason) for o in outcomes)}
    for name, sql in READS.items():
        out[name] = [tuple(r) for r in conn.execute(sql, (PEER,) if "?" in sql else ()).fetchall()]
    out["digest"] = store.digest(conn, NODE)
    space = next(r["space"] for r in STORY if r.get("kind") == "space_member")
    out["digest_space"] = store.digest(conn, NODE, space=space)
    out["cursor"] = store.cursor_version(conn, PEER)
    out["projections"] = projections.snapshot(conn)
    return out


def test_a_peers_batch_is_stored_alike_on_both_engines(tmp_path: Path, pg_migrated_url: str) -> None:
    """Every outcome, counter, void verdict, equivocation, space row, digest and projection row is the same on
    SQLite and on PostgreSQL; and what they agree on is the story's."""
    sqlite, postgres = on_both_engines(tmp_path, pg_migrated_url, LOG, ingest)
    for name in sqlite:
        assert postgres[name] == sqlite[name], name
    got = {h: (outcome, reason) for h, outcome, reason in sqlite["outcomes"]}
    story = STORY
    names = ["question", "answer", "link", "first", "p0", "e1", "g1", "p1", "p0x", "made", "hosting", "member", "note"]
    by_name = dict(zip(names, story, strict=False))
    assert got[records.compute_hash(by_name["link"])] == ("pending_link", None)
    for name in ("question", "answer", "p0", "e1", "g1", "p1", "made", "hosting", "member", "note"):
        assert got[records.compute_hash(by_name[name])] == ("saved", None), name
    assert got[records.compute_hash(by_name["p0x"])][0] == "void"  # signed by A0 after it was rotated out
    assert len(sqlite["records"]) == len(story) - 1  # every one but the void post; both versions of one address
    assert len(sqlite["equivocations"]) == 1 and sqlite["spaces"] == [(records.compute_hash(by_name["made"]), NODE)]
    assert sqlite["digest_space"].count == 4 and sqlite["wanted"] == [(records.compute_hash(ABSENT),)]
    assert sqlite["cursor"] is not None
