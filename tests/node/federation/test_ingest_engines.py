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


def later_batches() -> list[list[dict[str, Any]]]:
    """Batches after the first: records stored or waiting before the key events that decide them (void switches and
    releases), the question's redaction by its author, then the question's body served again."""
    story = v3_story.story().records
    redaction = signed(AUTHOR, kind="redaction", target=records.compute_hash(STORY[0]))
    return [
        [story["l1x"], story["p2b"], story["p4"]],  # stored; waiting for e2; waiting for e4
        [story["e2"], story["g2"]],  # l1x void now, p2b released
        [story["e3"], story["e4"], story["g4"], story["g4b"]],  # the recovery: p4 released, p2b vouched for again
        [redaction],
        [STORY[0]],  # a redacted body: never stored again
    ]


def ingest(conn: Conn) -> dict[str, Any]:
    """The story stored as one peer's batches with their cursors, then everything they decided read back."""
    conn.execute("BEGIN")
    ops_store.insert_node_identity_txn(conn, NODE, "store-epoch")
    store.add_peer_txn(conn, "http://127.0.0.1:9", PEER, NOW)
    conn.execute("COMMIT")
    out: dict[str, Any] = {"outcomes": []}
    for n, items in enumerate([STORY, *later_batches()]):
        conn.execute("BEGIN")
        outcomes = store.ingest_txn(conn, PEER, [verified(r) for r in items], [], store.Cursor("peer-epoch", n), NOW)
        conn.execute("COMMIT")
        out["outcomes"].append(sorted((o.hash, o.outcome, o.reason) for o in outcomes))
        if n == 0:
            out["first"] = read(conn)
    out["last"] = read(conn)
    return out


def read(conn: Conn) -> dict[str, Any]:
    """Every table the batches write that this test compares, the digests, the cursor and the projections."""
    out: dict[str, Any] = {}
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
    sqlite_run, postgres_run = on_both_engines(tmp_path, pg_migrated_url, LOG, ingest)
    assert postgres_run["outcomes"] == sqlite_run["outcomes"]
    for when in ("first", "last"):
        for name in sqlite_run[when]:
            assert postgres_run[when][name] == sqlite_run[when][name], (when, name)
    sqlite = sqlite_run["first"]
    got = {h: (outcome, reason) for h, outcome, reason in sqlite_run["outcomes"][0]}
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
    # the later batches: a void switch, releases, a refused event counted against the peer, a redaction's screen
    v3 = v3_story.story().records
    later = [{h: (o, r) for h, o, r in batch} for batch in sqlite_run["outcomes"][1:]]
    address = v3_story.address
    assert later[0] == {address(v3["l1x"]): ("saved", None), address(v3["p2b"]): ("waiting", None),
                        address(v3["p4"]): ("waiting", None)}  # fmt: skip
    last = sqlite_run["last"]
    assert [(h, reason) for h, _, reason in last["void"]] == [(address(v3["l1x"]), "unvouched")]  # switched void
    assert last["waiting"] == [] and {v3_story.version(v3[n]) for n in ("p2b", "p4")} <= {r[2] for r in last["records"]}
    assert later[2][address(v3["e3"])] == ("invalid", "losing_branch")  # on the branch the recovery replaced
    assert later[4] == {records.compute_hash(STORY[0]): ("void", "redacted")}
    # saved: 12 of the first batch, then l1x, e2 g2 and p2b released, e4 g4 g4b and p4 released, the redaction
    assert last["counters"] == [(12 + 1 + 3 + 4 + 1, 0, 1, 1, 2)] and last["digest"].count == 16
