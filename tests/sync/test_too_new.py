"""Records too new for this release (docs/format-v3.md, 8.4): `too_new` is told from `invalid`, never remembered,
counted per peer, and the cursor keeps where the first one was (`too_new_from`) with the protocol version it was
taken under; a newer release reconciles and reads the feed again from there."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from identity import canonical, keys, records, schema
from node.federation.cli import cmd_peers
from sync import messages as m
from sync.store import CursorVersion
from sync.verify import Verified, verify_record
from tests.sync.conftest import PeerNode, body_of, hash_of, signed_entry
from tests.sync.next_release import EntryRecordNext
from tests.sync.test_compat import store, with_language

AUTHOR = keys.SigningKey.generate()


def reason(record: dict[str, Any]) -> str | None:
    result = verify_record(body_of(record), hash_of(record) if record.get("kind") in records.RECORD_KINDS else None)
    return getattr(result, "reason", None)


def resigned(record: dict[str, Any], **changes: Any) -> dict[str, Any]:
    return records.sign({**records.unsigned(record), **changes}, AUTHOR)


def test_forms_a_later_release_may_define_are_too_new_and_wrong_ones_invalid() -> None:
    plain = signed_entry(AUTHOR, "a v1 entry")
    rotated = keys.SigningKey.generate()
    by_rotated = {**records.unsigned(plain), "signing_key": rotated.did}
    by_rotated["signature"] = rotated.sign(canonical.canonical_bytes(by_rotated))
    in_space = resigned(plain, schema_version="v2", space="ab" * 32)
    key_event = records.sign(
        {"kind": "key_event", "schema_version": "v1", "author_id": AUTHOR.did, "created_at": plain["created_at"],
         "event": "rotate", "seq": 1, "key": rotated.did, "vouches": []},
        AUTHOR,
    )  # fmt: skip
    nested = resigned(plain, links=[{"target": "ab" * 32, "link_type": "supports", "annotation": "", "weight": 1}])
    nested_wrong = resigned(plain, links=[{"target": "ab" * 32, "link_type": "supports", "annotation": "", "W": 1}])
    assert reason(plain) is None
    # the v3 forms this release takes from peers (record 51) are known: whether their key may sign is the writer's
    assert isinstance(verify_record(body_of(by_rotated), None), Verified)
    assert isinstance(verify_record(body_of(key_event), None), Verified)
    agent = {"kind": "agent", "schema_version": "v1", "author_id": AUTHOR.did, "created_at": plain["created_at"],
             "display_name": "a", "description": "", "home_node": rotated.did}  # fmt: skip
    agent_by_rotated = {**agent, "signing_key": rotated.did}
    agent_by_rotated["signature"] = rotated.sign(canonical.canonical_bytes(agent_by_rotated))
    # an agent document (and a task event) names its signing_key since issue 36's record 58: known too
    assert isinstance(verify_record(body_of(agent_by_rotated), None), Verified)
    # an entry in a space (v2, its address the v2 preimage) is known since issue 38: a host takes it
    assert isinstance(verify_record(body_of(in_space), None), Verified)
    # a member or a value a later release adds
    for newer in (resigned(plain, language="en"), nested):
        result = verify_record(body_of(newer), None)
        assert getattr(result, "reason", None) == "too_new", (newer, result)
    assert reason(resigned(plain, entry_type="observation")) == "too_new"
    # wrong in every release: still invalid, with their reasons
    assert reason(resigned(plain, confidence=2)) == "schema"
    assert reason({**resigned(plain), "kind": 5}) == "malformed"
    assert reason(resigned(plain, Language="en")) == "schema"  # not a member name any release could define
    assert reason(nested_wrong) == "schema"
    assert reason({**resigned(plain, language="en"), "content": "forged"}) == "too_new"  # unverifiable here


@pytest.fixture
def next_release() -> Iterator[None]:
    """Entries may carry `language` (the later release of tests/sync/next_release.py) while this fixture holds."""
    schema.register_record_type("entry", EntryRecordNext)
    try:
        yield
    finally:
        schema.register_record_type("entry", schema.EntryRecord)


async def sender_with_newer_records(make_peer: Any) -> tuple[PeerNode, PeerNode, list[str]]:
    """Node a (of a later release) holds a plain entry, two entries carrying `language` and another plain one, in
    that feed order; b (this release) peers it. Returns a, b and the versions of a's four records."""
    a, b = await make_peer("a"), await make_peer("b")
    await a.add_peer(b)
    await b.add_peer(a)
    schema.register_record_type("entry", EntryRecordNext)
    try:
        versions = [
            await store(a, signed_entry(AUTHOR, "first")),
            await store(a, with_language(AUTHOR, "second, too new for b")),
            await store(a, with_language(AUTHOR, "third, too new for b")),
            await store(a, signed_entry(AUTHOR, "fourth")),
        ]
    finally:
        schema.register_record_type("entry", schema.EntryRecord)
    return a, b, versions


async def held(peer: PeerNode) -> set[str]:
    rows = await peer.node.db.read(lambda c: c.execute("SELECT version FROM records").fetchall())
    return {r[0] for r in rows}


async def test_too_new_records_are_counted_kept_in_the_cursor_and_never_remembered(make_peer: Any) -> None:
    a, b, versions = await sender_with_newer_records(make_peer)
    report = await b.puller().pull_once(a.config)
    assert [o.outcome for o in report.outcomes].count("too_new") == 2
    assert "invalid" not in [o.outcome for o in report.outcomes]
    assert await b.sync.store.cursor(a.node_id) == await a.sync.store.position()  # past them
    assert await b.sync.store.cursor_version(a.node_id) == CursorVersion(m.PROTOCOL_VERSION, 2)
    (status,) = await b.sync.store.statuses()
    assert (status.counters.too_new, status.counters.invalid, status.too_new_from) == (2, 0, 2)
    # never remembered: reconciliation offers them again (the two held are not fetched again: held, not refused)
    assert await b.sync.store.refused(versions) == {versions[0], versions[3]}
    again = await b.puller().reconcile(a.config)
    assert (again.need, [o.outcome for o in again.outcomes]) == (2, ["too_new", "too_new"])
    assert await held(b) >= {versions[0], versions[3]} and not await held(b) & {versions[1], versions[2]}


async def test_a_newer_release_reads_the_feed_again_from_too_new_from(make_peer: Any) -> None:
    a, b, versions = await sender_with_newer_records(make_peer)
    await b.puller().pull_once(a.config)
    head = (await a.sync.store.position())[1]
    schema.register_record_type("entry", EntryRecordNext)  # b is now of the later release
    try:
        await b.sync.store.upgrade_cursor(a.node_id)
        assert (await b.sync.store.cursor(a.node_id)).seq == 1  # type: ignore[union-attr]
        assert await b.sync.store.cursor_version(a.node_id) == CursorVersion(m.PROTOCOL_VERSION, None)
        report = await b.puller().pull_once(a.config)
    finally:
        schema.register_record_type("entry", schema.EntryRecord)
    # read ids first (decision 70): the two refused as too new are fetched again; the one held is not fetched at all
    assert [o.outcome for o in report.outcomes] == ["saved", "saved"]
    assert await held(b) >= set(versions)
    assert (await b.sync.store.cursor(a.node_id)).seq == head  # type: ignore[union-attr]
    assert await b.sync.store.cursor_version(a.node_id) == CursorVersion(m.PROTOCOL_VERSION, None)


async def test_a_cursor_of_an_older_release_is_reconciled_before_the_first_pull(make_peer: Any) -> None:
    """The state migration 0023 gives a cursor of the v2 release (version 2): the puller reconciles first, which
    finds what the peer withheld from that release, keeps the cursor, and marks it as this release's."""
    a, b, versions = await sender_with_newer_records(make_peer)
    await b.puller().pull_once(a.config)
    cursor = await b.sync.store.cursor(a.node_id)
    await b.node.db.write(
        lambda c: c.execute("UPDATE peers SET cursor_version = 2, too_new_from = NULL WHERE node_id = ?", (a.node_id,))
    )
    schema.register_record_type("entry", EntryRecordNext)
    try:
        puller = b.puller()
        assert await puller.versions.upgrade(a.config, puller.reconcile) is True
        assert await puller.versions.upgrade(a.config, puller.reconcile) is False  # once
    finally:
        schema.register_record_type("entry", schema.EntryRecord)
    assert await held(b) >= set(versions)
    assert await b.sync.store.cursor(a.node_id) == cursor  # kept, not reset
    assert await b.sync.store.cursor_version(a.node_id) == CursorVersion(m.PROTOCOL_VERSION, None)
    (status,) = await b.sync.store.statuses()
    assert status.reconciliations == 1


async def test_the_peers_listing_shows_the_version_and_the_too_new_records(
    make_peer: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    a, b, _ = await sender_with_newer_records(make_peer)
    await b.puller().pull_once(a.config)
    (status,) = await b.sync.store.statuses()
    assert status.sync_version == m.PROTOCOL_VERSION
    import argparse

    assert cmd_peers(argparse.Namespace(data=b.node.data.root, watch=False, json=False, interval=1.0)) == 0
    out = capsys.readouterr().out
    assert f"{a.node_id}  {a.url}  sync protocol v3" in out
    assert "too-new 2 (from feed position 2: read again by a newer release)" in out
