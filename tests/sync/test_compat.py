"""sync.compat: what a v3 node serves a peer of protocol v2, decided by one function and applied on every serving
path (docs/format-v3.md, 8.2). The paths are listed here, and compared with the node's sync routes."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from typing import Any

import msgspec
import pytest

from identity import canonical, keys, records, schema
from node.federation import routes as peer_routes
from node.store import projections
from sync import compact, compat
from sync import messages as m
from sync.auth import sign_headers
from sync.negentropy import Negentropy, VectorStorage
from sync.protocol import Spoken
from tests.sync.conftest import PeerNode, signed_entry
from tests.sync.next_release import EntryRecordNext

AUTHOR = keys.SigningKey.generate()
# Every path that serves records or their set to a peer, each asking sync.compat through the store at v2.
SERVING_PATHS = ["/v1/sync/changes", "/v1/sync/fetch", "/v1/sync/bodies", "/v1/sync/reconcile", "/v1/sync/digest"]


@pytest.fixture
def next_release() -> Iterator[None]:
    """This process as the later release of tests/sync/next_release.py: entries may carry `language`."""
    schema.register_record_type("entry", EntryRecordNext)
    try:
        yield
    finally:
        schema.register_record_type("entry", schema.EntryRecord)


def with_language(key: keys.SigningKey, content: str) -> dict[str, Any]:
    unsigned = records.unsigned(signed_entry(key, content))
    return records.sign({**unsigned, "language": "en"}, key)


def resigned(record: dict[str, Any], **changes: Any) -> dict[str, Any]:
    """`record` with `changes`, signed by AUTHOR whatever it names (`records.sign` refuses a `signing_key` that is
    not the signer's: only the form matters here)."""
    body = {**records.unsigned(record), **changes}
    return {**body, "signature": AUTHOR.sign(canonical.canonical_bytes(body))}


def test_v2_compatibility_of_each_form() -> None:
    plain = signed_entry(AUTHOR, "a v1 entry")
    assert compat.v2_compatible_record(plain)
    typed = records.sign(
        {
            "kind": "agent",
            "schema_version": "v1",
            "author_id": AUTHOR.did,
            "created_at": canonical.now_created_at(),
            "display_name": "Typed",
            "description": "",
            "home_node": AUTHOR.did,
            "agent_type": "assistant",
        },
        AUTHOR,
    )
    assert compat.v2_compatible_record(typed)  # the last v2 release knew agent_type (decisions.md 28)
    other = keys.SigningKey.generate().did
    for newer in (
        resigned(plain, signing_key=other),  # signed by a rotated key
        resigned(plain, schema_version="v2", space="ab" * 32),  # an entry in a space
        resigned(plain, space="ab" * 32),
        resigned(plain, language="en"),  # a member a later release adds
        resigned(plain, entry_type="observation"),  # a value a later release adds
        {**resigned(plain), "kind": "key_event"},  # a kind v3 adds
    ):
        assert not compat.v2_compatible_record(newer), newer
    body = canonical.canonical_bytes(plain)
    version = hashlib.sha256(body).hexdigest()
    assert compat.servable(m.PROTOCOL_VERSION, version, b"not even json")  # v3 peers get every valid version
    assert compat.servable(2, version, body) and compat.decided(version) is True
    with pytest.raises(ValueError, match="v1 is not spoken"):
        compat.servable(1, version, body)


def test_the_listed_paths_are_every_sync_route() -> None:
    sync_paths = [r.path for r in peer_routes.PEER_ROUTES if r.path.startswith("/v1/sync/")]
    assert sorted(sync_paths) == sorted(SERVING_PATHS)


async def store(peer: PeerNode, record: dict[str, Any]) -> str:
    record_hash, decoded = records.check(record)
    item = projections.Incoming(record, record_hash, decoded, "federation")
    now = peer.node.now_ms()
    await peer.node.db.write(lambda c: projections.append_many(c, [item], origin="local", now_ms=now))
    return hashlib.sha256(canonical.canonical_bytes(record)).hexdigest()


async def signed(asker: PeerNode, server: PeerNode, method: str, path: str, body: Any = None) -> tuple[int, Any]:
    raw = msgspec.json.encode(body) if body is not None else None
    url = server.url + path
    headers = sign_headers(asker.node.key, method, url, raw)
    if raw is not None:
        headers["Content-Type"] = "application/json"
    async with asker.session.request(method, url, data=raw, headers=headers) as resp:
        return resp.status, await resp.json(content_type=None)


async def reconcile_need(asker: PeerNode, server: PeerNode, v: int) -> set[str]:
    """The versions an initiator holding nothing learns it needs, the server responding at protocol `v`."""
    neg = Negentropy(VectorStorage([]))
    message: bytes | None = neg.initiate()
    have: list[bytes] = []
    need: list[bytes] = []
    while message is not None:
        body = {"type": "reconcile", "v": v, "message": message.hex()}
        status, reply = await signed(asker, server, "POST", "/v1/sync/reconcile", body)
        assert status == 200 and reply["v"] == v, reply
        if reply["message"] is None:
            break
        message = neg.reconcile(bytes.fromhex(reply["message"]), have, need)
    return {h.hex() for h in need}


@pytest.mark.usefixtures("next_release")
@pytest.mark.parametrize("path", SERVING_PATHS)
async def test_every_serving_path_withholds_what_a_v2_peer_cannot_store(make_peer: Any, path: str) -> None:
    a, b = await make_peer("a"), await make_peer("b")
    await a.add_peer(b)
    plain = await store(a, signed_entry(AUTHOR, "every node stores this"))
    newer_record = with_language(AUTHOR, "only a newer release stores this")
    newer = await store(a, newer_record)
    newer_hash = records.compute_hash(newer_record)
    served: dict[int, set[str]] = {}
    for v in (2, 3):
        if path == "/v1/sync/changes":
            status, page = await signed(b, a, "GET", f"/v1/sync/changes?since=0&v={v}")
            assert status == 200 and page["v"] == v and page["next"] == page["head"] == 2, page
            served[v] = {item["version"] for item in page["items"]}
        elif path == "/v1/sync/fetch":
            asked = [plain, newer_hash]
            status, reply = await signed(b, a, "POST", path, {"type": "fetch", "v": v, "hashes": asked})
            assert status == 200 and reply["v"] == v, reply
            served[v] = {item["version"] for item in reply["items"]}
            assert reply["missing"] == ([] if v == 3 else [newer_hash])
        elif path == "/v1/sync/bodies":  # by seq (decision 74): the two records are seqs 1 and 2
            body = {"type": "bodies_request", "v": v, "seqs": compact.pack_seqs([1, 2])}
            status, reply = await signed(b, a, "POST", path, body)
            assert status == 200 and reply.get("v", 3) == v, reply
            served[v] = {hashlib.sha256(canonical.canonical_bytes(r)).hexdigest() for r in reply["records"]}
        elif path == "/v1/sync/reconcile":
            served[v] = await reconcile_need(b, a, v)
        else:
            async with a.session.get(a.url + f"{path}?v={v}", headers=a.admin) as resp:
                digest = await resp.json()
            versions = sorted({plain, newer} if v == 3 else {plain})
            expected = hashlib.sha256("".join(x + "\n" for x in versions).encode()).hexdigest()
            assert (digest["v"], digest["count"], digest["sha256"]) == (v, len(versions), expected)
            served[v] = set(versions)
    assert served == {2: {plain}, 3: {plain, newer}}


async def test_a_puller_speaking_v2_reconciles_over_the_v2_set(make_peer: Any, next_release: None) -> None:
    """Speaking v2, the initiator's set is its v2-compatible one: a record the peer could not store is no
    difference, so rounds with a v2 peer converge (nothing offered as `have` that it would refuse)."""
    a, b = await make_peer("a"), await make_peer("b")
    await a.add_peer(b)
    await b.add_peer(a)
    await store(b, with_language(AUTHOR, "b holds a record v2 cannot store"))
    puller = b.puller()
    puller.versions.spoken[a.node_id] = Spoken(2)
    report = await puller.reconcile(a.config)
    assert (report.need, report.have) == (0, 0)
    puller.versions.spoken[a.node_id] = Spoken(3)
    assert (await puller.reconcile(a.config)).have == 1


async def test_a_v2_request_is_served_and_a_v1_one_refused_naming_both_versions(make_peer: Any) -> None:
    a, b = await make_peer("a"), await make_peer("b")
    await a.add_peer(b)
    status, page = await signed(b, a, "GET", "/v1/sync/changes?since=0&v=2")
    assert (status, page["type"], page["v"]) == (200, "changes", 2)
    status, problem = await signed(b, a, "GET", "/v1/sync/changes?since=0&v=4")
    assert (status, problem["code"]) == (422, "unsupported_sync_version")
    assert "speaks sync protocol v3 and v2, not v4" in problem["detail"]
    async with b.session.get(a.url + "/v1/sync/digest?v=1", headers=a.admin) as resp:
        assert resp.status == 422 and (await resp.json())["code"] == "unsupported_sync_version"
    async with b.session.get(a.url + "/v1/node") as resp:
        assert (await resp.json())["sync_versions"] == [2, 3]
