"""The redaction switch's writes on both engines (issue 40): a redaction appended to the log drops its target
(tombstone, refused versions, the set-aside copy, a notice for the agent it reached), a later key event's switch
makes it void (undone, the target appended again by `restore_txn`), valid again (applied again), and the spaces'
moderators decided again (`redecide_txn`). The same story on a SQLite file and on a PostgreSQL database, every
answer compared."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from identity import canonical, keys, records
from node.agents import store as agents_store
from node.features import LOG
from node.redaction import effects, store
from node.store import projections
from node.store.authority import Authority
from node.store.conn import Conn
from tests.node.api_helpers import entry_record, hash_of
from tests.node.redaction.test_moderator_demotion import OWNER, _story
from tests.node.spaces.test_vouched_set import signed
from tests.pg_fixtures import on_both_engines
from wire.time import format_ms

T0 = 1_767_323_045_000


def _state(conn: Conn, target: str, redaction: str) -> dict[str, Any]:
    """What the redaction changed: the projections, the target's versions, its tombstone, the refused and set-aside
    versions, the notifications (agent, reason, redaction), the scrubs."""
    return {
        "snapshot": projections.snapshot(conn),
        "held": [h.version for h in store.held_versions(conn, target)],
        "tombstones": store.tombstones(conn, [target]),
        "refused": [r[0] for r in conn.execute("SELECT hash FROM refused_versions ORDER BY version").fetchall()],
        "aside": store.set_aside_count(conn),
        "notifications": [
            tuple(r)
            for r in conn.execute(
                "SELECT agent_id, reason, redaction, status FROM notifications ORDER BY agent_id, reason"
            ).fetchall()
        ],
        "redaction": store.redaction(conn, redaction),
        "scrubs": store.due_scrubs(conn, T0 + 100),
    }


def _switch_story(conn: Conn, alice: keys.SigningKey, bob: keys.SigningKey) -> list[Any]:
    """Alice's request directed to Bob (delivered to him), her redaction of it appended, switched void and valid
    again in key events' transactions, and the moderators of a space decided again. Every state, in order."""
    entry = entry_record(alice, "a secret", created_ms=T0, entry_type="question", performative="request",
                         directed_to=[bob.did])  # fmt: skip
    target = hash_of(entry)
    body = {"kind": "redaction", "schema_version": canonical.SCHEMA_VERSION, "author_id": alice.did,
            "created_at": format_ms(T0 + 1), "target": target, "reason": "leaked"}  # fmt: skip
    redaction = records.sign(body, alice)
    address = hash_of(redaction)
    conn.execute("BEGIN")
    agents_store.insert_local_agent_txn(conn, "bob", bob.did, b"seed", T0)
    projections.append_many(conn, [projections.Incoming(entry, *records.check(entry))], origin="local", now_ms=T0)
    conn.execute("UPDATE notifications SET status = 'delivered'")  # it reached Bob: a redaction tells him
    conn.execute("COMMIT")
    states = [_state(conn, target, address)]
    conn.execute("BEGIN")
    projections.append_many(conn, [projections.Incoming(redaction, *records.check(redaction, v3=True))], origin="local",
                            now_ms=T0 + 2)  # fmt: skip
    conn.execute("COMMIT")
    states.append(_state(conn, target, address))
    seq = int(conn.execute("SELECT seq FROM records WHERE hash = ?", (address,)).fetchone()[0])
    conn.execute("BEGIN")  # a key event made it void: undone, the target appended again
    effects.switch_redaction(conn, seq, address, redaction, False, T0 + 3)
    restored = effects.restore_txn(conn, Authority(), T0 + 3)
    conn.execute("COMMIT")
    states.append({**_state(conn, target, address), "restored": restored})
    conn.execute("BEGIN")  # valid again: applied again
    effects.switch_redaction(conn, seq, address, redaction, True, T0 + 4)
    conn.execute("COMMIT")
    states.append(_state(conn, target, address))
    conn.execute("BEGIN")  # a space's moderators changed: its redactions decided again (none there)
    effects.redecide_txn(conn, [{"kind": "space_admin", "space": "s" * 64}], T0 + 5)
    conn.execute("COMMIT")
    states.append(_state(conn, target, address))
    return states


def test_a_redaction_applied_undone_and_applied_again_alike_on_both_engines(
    tmp_path: Path, pg_migrated_url: str
) -> None:
    alice, bob = keys.SigningKey.generate(), keys.SigningKey.generate()
    expected, got = on_both_engines(tmp_path, pg_migrated_url, LOG, lambda conn: _switch_story(conn, alice, bob))
    for before, after in zip(expected, got, strict=True):
        for name in before:
            assert after[name] == before[name], name
    posted, applied, undone, again, redecided = expected
    assert len(posted["held"]) == 1 and posted["tombstones"] == [] and posted["redaction"] is None
    assert posted["notifications"] == [(bob.did, "directed_request", None, "delivered")]
    assert applied["held"] == [] and len(applied["tombstones"]) == 1 and applied["aside"] == 1
    assert applied["refused"] == [applied["tombstones"][0].hash] and applied["redaction"] is not None
    assert [(n[0], n[1], n[2] == applied["redaction"].hash) for n in applied["notifications"]] == [
        (bob.did, "redacted", True)
    ]
    assert applied["snapshot"]["entries"] == [] and len(applied["snapshot"]["redactions"]) == 1
    assert undone["restored"] == 1 and undone["held"] == posted["held"] and undone["tombstones"] == []
    assert undone["refused"] == [] and undone["aside"] == 0 and undone["redaction"] is None
    assert len(undone["snapshot"]["entries"]) == 1 and undone["snapshot"]["redactions"] == []
    assert again["held"] == [] and len(again["tombstones"]) == 1 and again["redaction"] is not None
    assert redecided == again


def _demotion_story(conn: Conn) -> list[Any]:
    """tests/node/redaction/test_moderator_demotion.py's story appended in order: an admin's redaction drops Bob's
    post in the space, the owner's demotion vouching for nothing makes it void, and `redecide_txn` undoes it and
    appends the post again. The states before and after."""
    creation = signed(OWNER, kind="space", name="street", description="", nonce="B" * 42 + "A")
    story = _story(records.compute_hash(creation), False)
    target, address = records.compute_hash(story["post"]), records.compute_hash(story["redaction"])
    states = []
    for batch in ([creation, story["promotion"], story["writer"], story["post"]], [story["redaction"]]):
        conn.execute("BEGIN")
        for record in batch:
            item = projections.Incoming(record, *records.check(record, v3=True))
            projections.append_many(conn, [item], origin="local", now_ms=T0)
        conn.execute("COMMIT")
        states.append(_state(conn, target, address))
    conn.execute("BEGIN")
    demotion = story["demotion"]
    projections.append_many(conn, [projections.Incoming(demotion, *records.check(demotion, v3=True))], origin="local",
                            now_ms=T0 + 1)  # fmt: skip
    effects.redecide_txn(conn, [demotion], T0 + 1)
    conn.execute("COMMIT")
    states.append(_state(conn, target, address))
    return states


def test_a_moderators_redaction_redecided_after_the_demotion_alike_on_both_engines(
    tmp_path: Path, pg_migrated_url: str
) -> None:
    expected, got = on_both_engines(tmp_path, pg_migrated_url, LOG, _demotion_story)
    for before, after in zip(expected, got, strict=True):
        for name in before:
            assert after[name] == before[name], name
    posted, redacted, redecided = expected
    assert len(posted["held"]) == 1 and posted["tombstones"] == []
    assert redacted["held"] == [] and len(redacted["tombstones"]) == 1 and redacted["redaction"] is not None
    assert redecided["held"] == posted["held"] and redecided["tombstones"] == [] and redecided["aside"] == 0
