"""The spaces projection is a function of the set of records held, never of their order (issue 37): the same
signed records appended to a real log (SQLite, PostgreSQL) in every order (each in its own transaction, as sync
would bring them) leave the same roles, equal to `identity.spaces.resolve` over the whole set and to a rebuild."""

from __future__ import annotations

import itertools
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from identity import canonical, records, spaces, vouching
from identity.keys import SigningKey
from node.features import LOG
from node.spaces import store
from node.store import db, projections
from tests.node.fresh_stores import ENGINES, FreshStore, fresh_stores

OWNER, CAROL, BOB, DAVE, EVE = (SigningKey.from_seed(bytes([0x70 + i]) * 32) for i in range(5))
WHEN = "2026-03-01T09:00:00Z"
NAMES = itertools.count()  # a new database per hypothesis example


def signed(body: dict[str, Any], key: SigningKey) -> dict[str, Any]:
    return records.sign({"schema_version": canonical.SCHEMA_VERSION, "created_at": WHEN, **body}, key)


def chain(kind: str, key: SigningKey, space: str, member: str, role: str, seq: int, prior: dict[str, Any] | None,
          lowers: bool = False) -> dict[str, Any]:  # fmt: skip
    body: dict[str, Any] = {"kind": kind, "author_id": key.did, "space": space, "member": member, "role": role,
                            "seq": seq}  # fmt: skip
    if prior is not None:
        body["prior"] = records.compute_hash(prior)
    if lowers:
        body["vouches"] = [vouching.vouch(member, []).as_json()]
    return signed(body, key)


def story() -> list[dict[str, Any]]:
    """A space with an admin, a fork the owner wins, an admin's additions and that admin's removal."""
    creation = signed({"kind": "space", "author_id": OWNER.did, "name": "family", "description": "",
                       "nonce": "A" * 43}, OWNER)  # fmt: skip
    space = records.compute_hash(creation)
    carol = chain("space_admin", OWNER, space, CAROL.did, "admin", 1, None)
    bob = chain("space_member", OWNER, space, BOB.did, "writer", 1, None)
    by_carol = chain("space_member", CAROL, space, BOB.did, "reader", 2, bob, lowers=True)
    by_owner = chain("space_member", OWNER, space, BOB.did, "none", 2, bob, lowers=True)
    dave = chain("space_member", CAROL, space, DAVE.did, "reader", 1, None)
    carol_out = chain("space_admin", OWNER, space, CAROL.did, "none", 2, carol, lowers=True)
    eve = chain("space_member", CAROL, space, EVE.did, "writer", 1, None)  # void: carol's removal vouches for nothing
    # the owner adds dave too: a fork of dave's chain with carol's addition
    dave_by_owner = chain("space_member", OWNER, space, DAVE.did, "writer", 1, None)
    return [creation, carol, bob, by_carol, by_owner, dave, carol_out, eve, dave_by_owner]


STORY = story()
SPACE_ID = records.compute_hash(STORY[0])
EXPECTED = (
    spaces.resolve([spaces.Held(records.compute_hash(r), records.compute_hash(r), r) for r in STORY])
    .spaces[SPACE_ID]
    .roles
)


@pytest.fixture(params=ENGINES)
def fresh(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[FreshStore]:
    """New migrated databases of this run's engine, carrying the node's log."""
    yield from fresh_stores(request, tmp_path, LOG)


def append_in(conn: Any, order: list[int]) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    """Append the story in `order` to the migrated database `conn` (either engine; closed here): the roles, then
    the roles after a rebuild."""
    try:
        for i in order:
            record = STORY[i]
            record_hash, decoded = records.check(record, v3=True)
            with db.transaction(conn, immediate=True):
                projections.append_many(conn, [projections.Incoming(record, record_hash, decoded, "local")],
                                        origin="local", now_ms=0)  # fmt: skip
        roles = store.roles(conn, SPACE_ID)
        with db.transaction(conn, immediate=True):
            projections.rebuild(conn)
        return roles, store.roles(conn, SPACE_ID)
    finally:
        conn.close()


@settings(max_examples=20, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.permutations(range(len(STORY))))
def test_the_same_records_in_any_order_give_the_same_roles(fresh: FreshStore, order: list[int]) -> None:
    roles, rebuilt = append_in(fresh(f"node-{next(NAMES)}"), order)
    assert dict(roles) == EXPECTED == dict(rebuilt)
    # the owner's removal of bob wins the fork; carol's additions are void (her removal vouches for none of them), so
    # dave is the owner's writer and eve nothing
    assert {OWNER.did: "owner", DAVE.did: "writer"} == EXPECTED


@pytest.mark.sqlite_only(reason="reads the SQLite file itself with sqlite3")
def test_the_story_is_read_from_a_real_sqlite_file(tmp_path: Path) -> None:
    conn = db.connect(tmp_path / "node.db", log=LOG)
    db.migrate(conn)
    roles, _ = append_in(conn, list(range(len(STORY))))
    with sqlite3.connect(tmp_path / "node.db") as conn:
        held = conn.execute("SELECT count(*) FROM space_records").fetchone()[0]
    assert held == len(STORY) and dict(roles) == EXPECTED
