"""agent.key_lifecycle and the client's key events (`Client.rotate_signing_key`, `revoke_signing_key`, `recover`):
an agent holding its identity file rotates, is stolen from, revokes and recovers, against a real node on loopback
(aiohttp test server, real SQLite, real Ed25519 keys); another client on the same file follows by its mtime."""

from __future__ import annotations

import json
import shutil
import stat
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient

from agent import identity_file, key_lifecycle
from agent.client import BBSClientError, Client
from identity import key_files, key_history, keys, records, vouching
from node.agents import service as agents
from node.agents.portable import import_identity
from node.service import Node


def base(client: TestClient) -> str:
    return str(client.make_url("")).rstrip("/")


async def held_identity(node: Node, path: Path) -> identity_file.Identity:
    """An agent registered on `node` that holds its own key, written to the identity file `path` (version 1)."""
    key = keys.SigningKey.generate()
    record = agents.identity_record(key, "Rover", "", node.node_id)
    await import_identity(node, "rover", key, record)
    ident = identity_file.Identity(key, "Rover", "", node.node_id, record)
    identity_file.save(path, ident)
    return ident


async def body_of(node: Node, record_hash: str) -> dict[str, Any]:
    raw = await node.db.read(lambda c: bytes(c.execute("SELECT body FROM records WHERE hash = ?", (record_hash,))
                                             .fetchone()[0]))  # fmt: skip
    return dict(json.loads(raw))


async def test_a_rotation_rewrites_the_file_sets_a_recovery_key_and_every_client_follows(
    client: TestClient, node: Node, tmp_path: Path
) -> None:
    path = tmp_path / "rover.id"
    first = await held_identity(node, path)
    async with Client(base(client), identity_file=path) as owner, Client(base(client), identity_file=path) as other:
        before = await owner.post("signed by the first key")
        assert (await other.post("the other process, first key")).author_id == first.did
        out = await owner.rotate_signing_key()
        rotated = identity_file.load(path)
        assert rotated.did == first.did and rotated.key.did != first.did
        assert out.key_history.current_key == rotated.key.did and out.pages_stored == 1
        assert json.loads(path.read_text())["version"] == 2 and stat.S_IMODE(path.stat().st_mode) == 0o600
        recovery = key_lifecycle.recovery_key_path(path)
        assert stat.S_IMODE(recovery.stat().st_mode) == 0o600
        assert out.key_history.recovery == key_files.load_key(recovery).did
        assert not path.with_name("rover.id.pending").exists()
        assert owner.agent_id == first.did and owner.signing_key == rotated.key.did
        after = await owner.post("signed by the new key")
        assert (await body_of(node, after.record_hash))["signing_key"] == rotated.key.did
        assert "signing_key" not in await body_of(node, before.record_hash)
        # the other client never rotated: it sees the file's new mtime and signs with the new key
        followed = await other.post("the other process, after the rotation")
        assert (await body_of(node, followed.record_hash))["signing_key"] == rotated.key.did
        assert other.signing_key == rotated.key.did
    # a fresh client logs in with the rotated key (key proof names signing_key)
    async with Client(base(client), identity_file=path) as fresh:
        session = await fresh.login()
        assert session.agent_id == first.did
        second = await fresh.rotate_signing_key()
        assert second.key_history.recovery == out.key_history.recovery  # set once
        assert [e.seq for e in second.key_history.events] == [1, 2]
    assert [e["seq"] for e in identity_file.load(path).key_history] == [1, 2]


async def test_a_stolen_key_is_revoked_with_the_recovery_key_and_the_thief_is_refused(
    client: TestClient, node: Node, tmp_path: Path
) -> None:
    path = tmp_path / "rover.id"
    await held_identity(node, path)
    async with Client(base(client), identity_file=path) as owner:
        await owner.rotate_signing_key()
        await owner.post("the owner's, before the theft")
    stolen = tmp_path / "thief.id"
    shutil.copy(path, stolen)
    recovery = key_files.load_key(key_lifecycle.recovery_key_path(path))
    async with Client(base(client), identity_file=stolen) as thief, Client(base(client), identity_file=path) as owner:
        await thief.post("the thief's, before the revocation")  # accepted: the window before the revocation
        vouched = await owner.signed_versions(identity_file.load(path).key.did)
        assert len(vouched) == 2  # what the node holds of the key (record 56 #7): both posts
        out = await owner.revoke_signing_key(recovery)
        assert out.key_history.current_key == identity_file.load(path).key.did
        kinds = [e.event for e in out.key_history.events]
        assert kinds == ["rotate", "revoke"] and out.key_history.events[-1].signer == recovery.did
        with pytest.raises(BBSClientError) as refused:
            await thief.post("the thief's, after the revocation")
        # the session the stolen key opened before the revocation ends with it (migration 0025); the client logs in
        # again, and the stolen key proves nothing now
        assert (refused.value.status, refused.value.code) == (401, "not_current_key")
        assert (await owner.post("the owner's, new key")).author_id == owner.agent_id
        # the stolen key cannot prove itself any more either
        async with Client(base(client), identity_file=stolen) as again:
            with pytest.raises(BBSClientError) as login:
                await again.login()
        assert (login.value.status, login.value.code) == (401, "not_current_key")


async def test_recovery_replaces_a_thiefs_rotation(client: TestClient, node: Node, tmp_path: Path) -> None:
    path = tmp_path / "rover.id"
    ident = await held_identity(node, path)
    async with Client(base(client), identity_file=path) as owner:
        await owner.rotate_signing_key()
    stolen = tmp_path / "thief.id"
    shutil.copy(path, stolen)
    recovery = key_files.load_key(key_lifecycle.recovery_key_path(path))
    async with Client(base(client), identity_file=stolen) as thief:
        taken = await thief.rotate_signing_key()  # the thief rotates to a key of its own (rank `current`)
        assert taken.key_history.current_key == identity_file.load(stolen).key.did
        await thief.post("the thief's own key")
    async with Client(base(client), identity_file=path) as owner:
        with pytest.raises(BBSClientError) as not_current:
            await owner.revoke_signing_key(recovery)
        assert not_current.value.code == "key_not_current"
        out = await owner.recover(recovery)
        history = out.key_history
        assert history.current_key == identity_file.load(path).key.did
        chain = [(e.seq, e.event) for e in history.events if e.in_chain]
        assert chain == [(1, "rotate"), (2, "recover")]
        assert (await owner.post("the owner, recovered")).author_id == ident.did
    async with Client(base(client), identity_file=stolen) as thief:
        with pytest.raises(BBSClientError) as refused:
            await thief.post("the thief again")
        assert refused.value.code == "not_current_key"


def test_key_event_builds_what_the_reference_accepts() -> None:
    first, new, recovery = keys.SigningKey.generate(), keys.SigningKey.generate(), keys.SigningKey.generate()
    versions = [f"{i:064x}" for i in range(1500)]  # two pages
    event, pages = key_lifecycle.key_event(first.did, first, "rotate", seq=1, prior=None, subject=first.did,
                                           versions=versions, key=new.did, recovery=recovery.did)  # fmt: skip
    address = records.check(event, v3=True)[0]
    history = key_history.resolve(first.did, [(address, event)])
    assert history.state == key_history.KeyState(new.did, None, recovery.did, frozenset({first.did, new.did}))
    assert [p["page"] for p in pages] == [0, 1] and all(p["event"] == address for p in pages)
    for page in pages:
        records.check(page, v3=True)
    assert vouching.vouch(first.did, versions).as_json() == event["vouches"][0]
    revoke, revoke_pages = key_lifecycle.key_event(first.did, recovery, "revoke", seq=2, prior=address,
                                                   subject=new.did, versions=[], key=None)  # fmt: skip
    assert revoke["signing_key"] == recovery.did and revoke_pages == [] and "key" not in revoke
    later = key_history.resolve(first.did, [(address, event), (records.check(revoke, v3=True)[0], revoke)])
    assert later.state.key is None and later.state.recovery == recovery.did
    bodies = key_lifecycle.requests(event, pages * 7)
    assert [len(b["pages"]) for b in bodies] == [12, 2] and all(b["record"] == event for b in bodies)
    assert key_lifecycle.requests(event, []) == [{"record": event, "pages": []}]


def test_the_recovery_key_beside_an_identity_file_is_made_once(tmp_path: Path) -> None:
    path = tmp_path / "a.id"
    made = key_lifecycle.recovery_key_for(path)
    assert key_lifecycle.recovery_key_path(path).name == "a.id.recovery.key"
    assert key_lifecycle.recovery_key_for(path).did == made.did
