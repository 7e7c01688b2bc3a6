"""node.store.equivocation: one body per address whatever the arrival order, on a real SQLite file.

Versions of one entry address differ in what the address does not cover (tags, confidence, links, scope); the
log keeps the two with the smallest (scope != federation, version) and the projections show the smallest.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from identity import canonical, keys, records, vouching
from node.features import LOG
from node.service import Node
from node.store import db, equivocation, projections
from node.store.conn import Conn
from tests.node.api_helpers import count, entry_record, get_json, hash_of, problem, self_signer
from tests.node.store.conftest import NewStore
from tests.pg_fixtures import OpenStore
from wire.time import format_ms

AUTHOR = keys.SigningKey.generate()
T0 = 1_767_323_045_000


def version(tags: list[str], scope: str = "federation", **fields: Any) -> projections.Incoming:
    record = entry_record(AUTHOR, "one address", created_ms=T0, tags=tags, scope=scope, **fields)
    record_hash, decoded = records.check(record)
    return projections.Incoming(record, record_hash, decoded, scope)


def version_hex(item: projections.Incoming) -> str:
    return hashlib.sha256(canonical.canonical_bytes(item.record)).hexdigest()


def append(conn: Conn, items: list[projections.Incoming]) -> list[tuple[int, bool]]:
    if isinstance(conn, sqlite3.Connection):
        with db.transaction(conn, immediate=True):
            return append_to(conn, items)
    conn.execute("BEGIN")  # PostgreSQL (tests on both engines: `open_store`)
    try:
        result = append_to(conn, items)
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")
    return result


def append_to(conn: Conn, items: list[projections.Incoming]) -> list[tuple[int, bool]]:
    """Append versions inside the caller's transaction."""
    return projections.append_many(conn, items, origin="local", now_ms=T0)


def state(conn: Conn) -> tuple[set[str], list[str], int, bool]:
    """(versions in the log, tags the projection shows, entries rows, equivocated)."""
    held = {r[0] for r in conn.execute("SELECT version FROM records").fetchall()}
    shown = conn.execute("SELECT tags FROM entries").fetchall()
    flagged = conn.execute("SELECT count(*) FROM equivocations").fetchone()[0] > 0
    return held, json.loads(shown[0][0]) if shown else [], len(shown), flagged


VERSIONS = [version([f"t{i}"], "local" if i % 3 == 0 else "federation") for i in range(6)]


def test_the_rule() -> None:
    assert equivocation.precedence("ff", "federation") < equivocation.precedence("00", "local")
    assert equivocation.kept([("b", "federation"), ("a", "local"), ("c", "federation")]) == [
        ("b", "federation"),
        ("c", "federation"),
    ]
    assert equivocation.kept([("b", "local"), ("a", "local")]) == [("a", "local"), ("b", "local")]
    assert equivocation.kept([("a", "federation")] * 2) == [("a", "federation")]


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    chosen=st.lists(st.integers(0, len(VERSIONS) - 1), min_size=1, max_size=8),
    data=st.data(),
)
def test_any_arrival_order_ends_in_the_same_kept_pair_and_winner(
    new_store: NewStore, chosen: list[int], data: st.DataObject
) -> None:
    """Whatever the order and batching of arrivals (repeats included), the log keeps the two best versions and
    the projection shows the best, as a rebuild from the log shows it."""
    order = data.draw(st.permutations(chosen))
    cut = data.draw(st.integers(0, len(order)))
    items = [VERSIONS[i] for i in order]
    conn = new_store(LOG)
    try:
        append(conn, items[:cut])
        append(conn, items[cut:])
        everything = {(version_hex(VERSIONS[i]), VERSIONS[i].scope) for i in chosen}
        keep = equivocation.kept(everything)
        winner = next(v for v in VERSIONS if version_hex(v) == keep[0][0])
        held, tags, rows, flagged = state(conn)
        assert held == {v for v, _ in keep}
        assert (tags, rows, flagged) == (winner.decoded.tags, 1, len(keep) == 2)
        with db.transaction(conn, immediate=True):  # type: ignore[arg-type]  # either engine (its engine_of)
            before = projections.snapshot(conn)
            projections.rebuild(conn)
            assert projections.snapshot(conn) == before
    finally:
        conn.close()  # type: ignore[attr-defined]  # either engine's closes (the Conn protocol does not say)


def test_a_refused_version_is_remembered_and_an_evicted_one_too(open_store: OpenStore) -> None:
    conn = open_store(LOG)
    fed = sorted((v for v in VERSIONS if v.scope == "federation"), key=version_hex)
    best, second, worst = fed[0], fed[1], fed[2]
    assert [new for _, new in append(conn, [second, worst])] == [True, True]
    seqs = append(conn, [best])
    assert seqs[0][1]  # kept: it beats both; the worst is evicted
    assert equivocation.refused(conn, [version_hex(worst)]) == {version_hex(worst)}
    assert append(conn, [worst]) == [(projections.REFUSED_SEQ, False)]
    held, tags, _, flagged = state(conn)
    assert held == {version_hex(best), version_hex(second)} and tags == best.decoded.tags and flagged


def test_the_projection_switches_with_its_links_and_tags(new_store: NewStore) -> None:
    """A better version arriving later replaces the shown one: entries row, tags, links it asserts."""
    conn = new_store(LOG)
    target = entry_record(AUTHOR, "a target", created_ms=T0 - 1)
    target_hash, target_decoded = records.check(target)
    append(conn, [projections.Incoming(target, target_hash, target_decoded)])
    linked = version(["linked"], links=[{"link_type": "supports", "target": target_hash, "annotation": ""}])
    plain = version(["plain"])
    first, second = sorted([linked, plain], key=version_hex, reverse=True)  # the worse one arrives first
    append(conn, [first])
    append(conn, [second])
    rows = conn.execute("SELECT id, tags FROM entries WHERE record_hash = ?", (plain.hash,)).fetchall()
    assert [json.loads(r[1]) for r in rows] == [second.decoded.tags]
    tags = {r[0] for r in conn.execute("SELECT tag FROM entry_tags").fetchall()}
    assert tags == set(second.decoded.tags)
    links = conn.execute("SELECT count(*) FROM links WHERE origin_hash = ?", (plain.hash,)).fetchone()[0]
    assert links == len(second.decoded.links)
    assert conn.execute("SELECT author_id FROM equivocations").fetchall()[0][0] == AUTHOR.did
    assert equivocation.by_author(conn) == {AUTHOR.did: 1}
    with db.transaction(conn, immediate=True):  # type: ignore[arg-type]  # either engine (its engine_of)
        before = projections.snapshot(conn)
        projections.rebuild(conn)
        assert projections.snapshot(conn) == before
    conn.close()  # type: ignore[attr-defined]  # either engine's closes (the Conn protocol does not say)


def test_a_federation_version_beats_a_local_one_and_is_shared(open_store: OpenStore) -> None:
    """No black hole: a node holding the `local` version keeps and shows the federation one."""
    conn = open_store(LOG)
    local, shared = version(["mine"], "local"), version(["ours"], "federation")
    append(conn, [local])
    append(conn, [shared])
    held, tags, _, flagged = state(conn)
    assert held == {version_hex(local), version_hex(shared)} and tags == ["ours"] and flagged
    scope = conn.execute("SELECT scope FROM entries").fetchone()[0]
    assert scope == "federation"


@pytest.mark.sqlite_only(reason="SQLite's migration 0014, which PostgreSQL's baseline never runs")
def test_the_migration_gives_existing_records_their_versions(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """0014 rebuilds the log: an entry's version is the SHA-256 of its body, another kind's is its hash."""
    path = tmp_path / "node.sqlite"
    conn = db.connect(path, log=LOG)
    every = db.migrations()
    monkeypatch.setattr(db, "migrations", lambda: [m for m in every if m[0] < 14])
    assert db.migrate(conn) == 13
    monkeypatch.setattr(db, "migrations", lambda: every)
    item = version(["old"])
    body = canonical.canonical_bytes(item.record)
    with db.transaction(conn, immediate=True):
        conn.execute(
            "INSERT INTO records (hash, kind, author_id, created_at, created_ms, scope, origin, received_ms, body)"
            " VALUES (?, 'entry', ?, ?, ?, 'federation', 'local', 0, ?)",
            (item.hash, AUTHOR.did, item.record["created_at"], T0, body),
        )
        conn.execute(
            "INSERT INTO records (hash, kind, author_id, created_at, created_ms, scope, origin, received_ms, body)"
            " VALUES ('ab', 'agent', ?, ?, ?, 'federation', 'local', 0, x'7b7d')",
            (AUTHOR.did, item.record["created_at"], T0),
        )
    assert db.migrate(conn) >= 14
    rows = conn.execute("SELECT seq, hash, version FROM records ORDER BY seq").fetchall()
    assert [tuple(r) for r in rows] == [(1, item.hash, version_hex(item)), (2, "ab", "ab")]
    conn.close()


async def test_posting_a_second_version_says_so_and_stores_nothing(client: TestClient, node: Node) -> None:
    """REST: another body under a stored address is 409 `equivocation` (field `$`); the same bytes again are
    the idempotent 200; reads show the one stored version, not equivocated."""
    bob = await self_signer(node, "bob")
    first = entry_record(bob.key, "said once", created_ms=node.now_ms(), tags=["a"])
    other = entry_record(bob.key, "said once", created_ms=node.now_ms(), tags=["b"])
    assert hash_of(first) == hash_of(other)
    resp = await client.post("/v1/entries", json={"record": first}, headers=bob.headers)
    assert resp.status == 201
    stored = await count(node)
    resp = await client.post("/v1/entries", json={"record": other}, headers=bob.headers)
    problem(await resp.json(), 409, "equivocation", "$")
    assert resp.content_type == "application/problem+json" and await count(node) == stored
    resp = await client.post("/v1/entries", json={"record": first}, headers=bob.headers)
    entry = await resp.json()
    assert resp.status == 200 and entry["tags"] == ["a"] and entry["equivocated"] is False and entry["versions"] == 1


async def test_reads_and_search_flag_an_equivocated_address(
    client: TestClient, node: Node, admin_headers: dict[str, str]
) -> None:
    """GET entry and search show the winner with `equivocated` and its number of versions; the author's count is
    in GET /v1/peers."""
    bob = await self_signer(node, "bob")
    one = entry_record(bob.key, "two bodies one address", created_ms=node.now_ms(), tags=["x"])
    two = entry_record(bob.key, "two bodies one address", created_ms=node.now_ms(), tags=["y"])
    items = []
    for record in (one, two):
        record_hash, decoded = records.check(record)
        items.append(projections.Incoming(record, record_hash, decoded))
    now = node.now_ms()
    await node.db.write(lambda c: projections.append_many(c, items, origin="did:key:zpeer", now_ms=now))
    winner = min(items, key=version_hex)
    (entry,) = (await get_json(client, f"/v1/entries/{hash_of(one)}", bob))["entries"]
    assert (entry["equivocated"], entry["versions"], entry["tags"]) == (True, 2, winner.decoded.tags)
    found = await get_json(client, "/v1/search", bob, params={"q": "bodies"})
    assert [(e["equivocated"], e["tags"]) for e in found["entries"]] == [(True, winner.decoded.tags)]
    peers = await (await client.get("/v1/peers", headers=admin_headers)).json()
    assert peers["equivocating_authors"] == [{"author_id": bob.key.did, "equivocations": 1}]


async def test_resubmitting_either_held_version_of_an_equivocated_address_answers_it(
    client: TestClient, node: Node
) -> None:
    """Both versions of an equivocated address are in the log (from a peer): the author posting either again is
    the idempotent 200 with the address's entry as shown (the winner), never a 5xx, and stores nothing."""
    bob = await self_signer(node, "bob")
    one = entry_record(bob.key, "again two bodies", created_ms=node.now_ms(), tags=["x"])
    two = entry_record(bob.key, "again two bodies", created_ms=node.now_ms(), tags=["y"])
    items = [projections.Incoming(r, *records.check(r)) for r in (one, two)]
    now = node.now_ms()
    await node.db.write(lambda c: projections.append_many(c, items, origin="did:key:zpeer", now_ms=now))
    winner = min(items, key=version_hex)
    stored = await count(node)
    for item in items:
        resp = await client.post("/v1/entries", json={"record": item.record}, headers=bob.headers)
        body = await resp.json()
        assert resp.status == 200, body
        assert (body["equivocated"], body["tags"]) == (True, winner.decoded.tags)
    assert await count(node) == stored


# ---- re-signed versions (docs/format-v3.md 3.6) -------------------------------------------------------------------

ROTATED = keys.SigningKey.generate()  # AUTHOR's key after a rotation, at place 1 of its chain


def resigned(item: projections.Incoming, signer: keys.SigningKey) -> projections.Incoming:
    """`item` signed again by `signer`, naming it in `signing_key`: the same address, another version."""
    body = {k: v for k, v in item.record.items() if k != "signature"} | {"signing_key": signer.did}
    record = records.sign(body, signer)
    record_hash, decoded = records.check(record, v3=True)
    return projections.Incoming(record, record_hash, decoded, item.scope)


def member(item: projections.Incoming) -> equivocation.Member:
    return equivocation.member_of(version_hex(item), item.scope, item.record)


ORDER = {AUTHOR.did: 0, ROTATED.did: 1}


def test_a_re_signed_version_is_one_statement_shown_by_its_later_key() -> None:
    first = version(["same"])
    again = resigned(first, ROTATED)
    assert again.hash == first.hash and version_hex(again) != version_hex(first)
    assert equivocation.statement_of(first.record) == equivocation.statement_of(again.record)
    pair = [member(first), member(again)]
    for arrival in (pair, pair[::-1]):
        kept = equivocation.kept_members(arrival, ORDER)
        assert kept == [member(again), member(first)]  # both kept, the later key's shown
        assert equivocation.statement_count(kept) == 1  # not the author's equivocation
    # the one whose verdict is valid wins, whatever its key's place
    assert equivocation.kept_members(pair, ORDER, {version_hex(again): "void"})[0] == member(first)
    # a key outside the chain (a replaced branch's, vouched for) ranks before every key of it
    assert equivocation.kept_members(pair, {AUTHOR.did: 0})[0] == member(first)


def test_a_re_signed_statement_counts_once_against_the_cap() -> None:
    """Two statements, one of them re-signed: three versions, all kept, no overflow; a third statement competes
    with the two by their best versions."""
    a, b, c = (version([f"s{i}"]) for i in range(3))
    a2 = resigned(a, ROTATED)
    every = [member(x) for x in (a, a2, b)]
    kept = equivocation.kept_members(every, ORDER)
    assert {m.version for m in kept} == {version_hex(x) for x in (a, a2, b)}
    assert equivocation.statement_count(kept) == 2
    with_c = equivocation.kept_members([*every, member(c)], ORDER)
    best_of = {
        "a": min(version_hex(a), version_hex(a2)),
        "b": version_hex(b),
        "c": version_hex(c),
    }
    two = sorted(best_of, key=lambda s: best_of[s])[:2]
    groups = {"a": {version_hex(a), version_hex(a2)}, "b": {version_hex(b)}, "c": {version_hex(c)}}
    assert {m.version for m in with_c} == set().union(*(groups[s] for s in two))


def test_a_re_signed_version_in_the_log_is_kept_shown_and_not_equivocated(new_store: NewStore) -> None:
    """On a real SQLite log: the re-signed version is kept beside the first, whatever the order, the projection
    shows the later key's, nothing is refused or flagged, and a rebuild shows the same."""
    first = version(["same"])
    again = resigned(first, ROTATED)
    for order in ([first, again], [again, first]):
        conn = new_store(LOG)
        try:
            outcomes = [append(conn, [item])[0] for item in order]
            assert all(new for _, new in outcomes)
            held, _, rows, flagged = state(conn)
            assert held == {version_hex(first), version_hex(again)} and rows == 1 and not flagged
            shown = conn.execute("SELECT signature FROM entries").fetchone()[0]
            assert shown == first.record["signature"]  # no key event in this log: ROTATED is outside the chain
            assert equivocation.refused(conn, [version_hex(first), version_hex(again)]) == set()
            with db.transaction(conn, immediate=True):  # type: ignore[arg-type]  # either engine (its engine_of)
                before = projections.snapshot(conn)
                projections.rebuild(conn)
                assert projections.snapshot(conn) == before
        finally:
            conn.close()  # type: ignore[attr-defined]  # either engine's closes (the Conn protocol does not say)


def test_a_different_body_beside_a_re_signed_pair_is_still_an_equivocation(new_store: NewStore) -> None:
    conn = new_store(LOG)
    first = version(["same"])
    append(conn, [first, resigned(first, ROTATED)])
    other = version(["other"])
    append(conn, [other])
    assert equivocation.by_author(conn) == {AUTHOR.did: 1}
    conn.close()  # type: ignore[attr-defined]  # either engine's closes (the Conn protocol does not say)


def rotation_record() -> projections.Incoming:
    """AUTHOR's key event installing ROTATED (vouching for nothing of the first key: these tests judge no record by
    it), so the log's key order is AUTHOR 0, ROTATED 1."""
    body = {
        "kind": "key_event",
        "schema_version": "v1",
        "author_id": AUTHOR.did,
        "created_at": format_ms(T0 - 10),
        "event": "rotate",
        "seq": 1,
        "key": ROTATED.did,
        "vouches": [vouching.vouch(AUTHOR.did, []).as_json()],
    }
    record = records.sign(body, AUTHOR)
    record_hash, decoded = records.check(record, v3=True)
    return projections.Incoming(record, record_hash, decoded)


STATEMENTS = [version([f"st{i}"]) for i in range(4)]
RESIGNED = [v for s in STATEMENTS for v in (s, resigned(s, ROTATED))]


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(chosen=st.sets(st.integers(0, len(RESIGNED) - 1), min_size=1), data=st.data())
def test_re_signed_versions_end_in_the_kept_set_of_the_rule_whatever_the_order(
    new_store: NewStore, chosen: set[int], data: st.DataObject
) -> None:
    """Versions of up to four statements, each signed by the first key and re-signed by the rotated one, arrive in
    any order; then every version the node neither holds nor remembers as refused is offered again (what
    reconciliation does) until nothing changes. The log holds exactly `kept_members` of the whole set, shows its
    first, is flagged equivocated iff two statements are kept, and a rebuild reproduces the projection."""
    order = data.draw(st.permutations(sorted(chosen)))
    conn = new_store(LOG)
    try:
        append(conn, [rotation_record()])
        for i in order:
            append(conn, [RESIGNED[i]])
        for _ in range(len(RESIGNED)):
            held = {r[0] for r in conn.execute("SELECT version FROM records WHERE kind = 'entry'").fetchall()}
            offered = [
                RESIGNED[i]
                for i in sorted(chosen)
                if version_hex(RESIGNED[i]) not in held and not equivocation.refused(conn, [version_hex(RESIGNED[i])])
            ]
            if not offered:
                break
            for item in offered:
                append(conn, [item])
        expected = equivocation.kept_members([member(RESIGNED[i]) for i in chosen], ORDER)
        held = {r[0] for r in conn.execute("SELECT version FROM records WHERE kind = 'entry'").fetchall()}
        assert held == {m.version for m in expected}
        shown = conn.execute("SELECT signature FROM entries").fetchall()
        best = next(RESIGNED[i] for i in chosen if version_hex(RESIGNED[i]) == expected[0].version)
        assert [r[0] for r in shown] == [best.record["signature"]]
        flagged = conn.execute("SELECT count(*) FROM equivocations").fetchone()[0] > 0
        assert flagged == (equivocation.statement_count(expected) > 1)
        with db.transaction(conn, immediate=True):  # type: ignore[arg-type]  # either engine (its engine_of)
            before = projections.snapshot(conn)
            projections.rebuild(conn)
            assert projections.snapshot(conn) == before
    finally:
        conn.close()  # type: ignore[attr-defined]  # either engine's closes (the Conn protocol does not say)


def key_event(signer: keys.SigningKey, seq: int, prior: str | None, event: str, **members: Any) -> projections.Incoming:
    """A key event of AUTHOR signed by `signer`, vouching for nothing of the keys it names in `vouched`."""
    vouched = members.pop("vouched")
    body: dict[str, Any] = {
        "kind": "key_event",
        "schema_version": "v1",
        "author_id": AUTHOR.did,
        "created_at": format_ms(T0 - 100 + seq),
        "event": event,
        "seq": seq,
        "vouches": [vouching.vouch(k, []).as_json() for k in sorted(vouched)],
        **members,
    }
    if prior is not None:
        body["prior"] = prior
    if signer.did != AUTHOR.did:
        body["signing_key"] = signer.did
    record = records.sign(body, signer)
    record_hash, decoded = records.check(record, v3=True)
    return projections.Incoming(record, record_hash, decoded)


def test_a_recovery_that_replaces_the_later_key_shows_the_version_of_the_key_left_in_the_chain(
    new_store: NewStore,
) -> None:
    """Versions by K1 and by K2 (K2 later: shown); a recovery replaces the event that installed K2, so K2 leaves
    the chain and the K1 version is shown, as a rebuild shows it."""
    k1, k2, k3, recovery = (keys.SigningKey.generate() for _ in range(4))
    first = key_event(AUTHOR, 1, None, "rotate", key=k1.did, recovery=recovery.did, vouched=[AUTHOR.did])
    second = key_event(k1, 2, first.hash, "rotate", key=k2.did, vouched=[k1.did])
    entry = version(["same"])
    by_k1, by_k2 = resigned(entry, k1), resigned(entry, k2)
    conn = new_store(LOG)
    try:
        append(conn, [first, second])
        append(conn, [by_k1])
        append(conn, [by_k2])
        assert conn.execute("SELECT signature FROM entries").fetchone()[0] == by_k2.record["signature"]
        recover = key_event(recovery, 2, first.hash, "recover", key=k3.did, vouched=[k1.did, k2.did])
        append(conn, [recover])
        assert conn.execute("SELECT signature FROM entries").fetchone()[0] == by_k1.record["signature"]
        assert conn.execute("SELECT count(*) FROM equivocations").fetchone()[0] == 0
        with db.transaction(conn, immediate=True):  # type: ignore[arg-type]  # either engine (its engine_of)
            before = projections.snapshot(conn)
            projections.rebuild(conn)
            assert projections.snapshot(conn) == before
    finally:
        conn.close()  # type: ignore[attr-defined]  # either engine's closes (the Conn protocol does not say)
