"""Records too new for this release, and peers of the previous protocol version (docs/format-v3.md, 8.2 and 8.4).

`too_new` is told from `invalid`, never remembered, counted per peer, and the cursor keeps where the first one was
(`too_new_from`) with the protocol version it was taken under; a newer release reconciles and reads the feed again
from there. A peer that answers 422 unsupported_sync_version is spoken to in v2, and in v3 again once it lists it.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from identity import canonical, keys, records, schema
from node.federation.cli import cmd_peers
from sync import messages as m
from sync.client import SyncError
from sync.puller import VERSION_RECHECK_S
from sync.store import CursorVersion, PeerConfig
from sync.verify import verify_record
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
    # a signing_key, a v2 entry's other address, a kind v3 adds, a member or a value a later release adds
    for newer in (by_rotated, in_space, key_event, resigned(plain, language="en"), nested):
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
    assert await b.sync.store.refused(versions) == set()  # never remembered: reconciliation offers them again
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
    assert [o.outcome for o in report.outcomes] == ["saved", "saved", "duplicate"]
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
        assert await puller.upgrade(a.config) is True
        assert await puller.upgrade(a.config) is False  # once
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


# ---- a peer of protocol v2 ---------------------------------------------------------------------------------------


class V2Peer:
    """A peer answering as the last v2 release does: 422 unsupported_sync_version (in that release's words) to
    another version, an empty feed to v2; its GET /v1/node lists `sync_versions` once `upgraded`."""

    def __init__(self) -> None:
        self.key = keys.SigningKey.generate()
        self.upgraded = False
        self.asked: list[str] = []
        self.server: TestServer | None = None

    async def start(self) -> None:
        async def changes(request: web.Request) -> web.Response:
            v = request.query.get("v", "1")
            self.asked.append(v)
            if v != "2" and not (self.upgraded and v == "3"):
                return web.json_response(
                    {"type": "about:blank", "title": "Unprocessable", "status": 422, "code": "unsupported_sync_version",
                     "field": "$.v", "detail": f"this node speaks sync protocol v2, not v{v}: upgrade both nodes"},
                    status=422,
                    content_type="application/problem+json",
                )  # fmt: skip
            return web.json_response(
                {"type": "changes", "v": int(v), "node_id": self.key.did, "epoch": "ab" * 16, "head": 0, "next": 0,
                 "more": False, "items": []}
            )  # fmt: skip

        async def node(request: web.Request) -> web.Response:
            info: dict[str, Any] = {"node_id": self.key.did, "boot_id": "b" * 16}
            if self.upgraded:
                info["sync_versions"] = [2, 3]
            return web.json_response(info)

        app = web.Application()
        app.router.add_get("/v1/sync/changes", changes)
        app.router.add_get("/v1/node", node)
        self.server = TestServer(app, host="127.0.0.1")
        await self.server.start_server()

    @property
    def config(self) -> PeerConfig:
        assert self.server is not None
        return PeerConfig(self.key.did, str(self.server.make_url("")).rstrip("/"))


async def test_a_v2_peer_is_spoken_to_in_v2_and_in_v3_once_it_lists_it(make_peer: Any) -> None:
    old = V2Peer()
    await old.start()
    try:
        b = await make_peer("b")
        async with b.session.post(
            b.url + "/v1/peers", json={"url": old.config.url, "node_id": old.key.did}, headers=b.admin
        ) as resp:
            assert resp.status == 201
        now = [1000.0]
        puller = b.puller(clock=lambda: now[0])
        with pytest.raises(SyncError) as refused:
            await puller.pull_once(old.config)
        assert refused.value.code == "unsupported_sync_version"
        assert puller.fall_back(old.config, refused.value) is True
        assert puller.fall_back(old.config, refused.value) is False  # v2 already
        await puller.pull_once(old.config)
        assert old.asked == ["3", "2"] and puller.version_of(old.key.did) == 2
        (status,) = await b.sync.store.statuses()
        assert status.sync_version == 2 and status.last_error is None
        now[0] += VERSION_RECHECK_S - 1
        assert await puller.recheck_version(old.config) is False  # not looked at again so soon
        now[0] += 2
        assert await puller.recheck_version(old.config) is False  # looked at: it lists no v3 yet
        old.upgraded = True
        now[0] += VERSION_RECHECK_S - 1
        assert await puller.recheck_version(old.config) is False
        now[0] += 2
        assert await puller.recheck_version(old.config) is True
        await puller.pull_once(old.config)
        assert old.asked[-1] == "3" and puller.version_of(old.key.did) == 3
        (status,) = await b.sync.store.statuses()
        assert status.sync_version == 3
    finally:
        assert old.server is not None
        await old.server.close()


def test_the_v2_release_s_refusal_names_its_version() -> None:
    from sync.client import spoken_versions

    assert spoken_versions("this node speaks sync protocol v2, not v3: upgrade both nodes") == {2}
    assert spoken_versions("this node speaks sync protocol v4 and v3, not v2: upgrade the older node") == {3, 4}
    assert spoken_versions("something else") == set() == spoken_versions(None)
