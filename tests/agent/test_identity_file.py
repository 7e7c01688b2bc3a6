"""Identity files and `bbs agent export` / `bbs agent import` on real data folders."""

from __future__ import annotations

import asyncio
import json
import stat
from pathlib import Path
from typing import Any

import pytest

from agent import identity_file
from agent.identity_file import Identity, IdentityFileError
from identity import keys
from node.agents import service as agents
from node.cli import main
from node.ops.datadir import DataDir, initialise
from node.store.db import connect


def make_identity() -> Identity:
    key = keys.SigningKey.generate()
    record = agents.identity_record(key, "Research", "reads papers", keys.SigningKey.generate().did)
    return Identity(key, "Research", "reads papers", record["home_node"], record)  # type: ignore[arg-type]


def test_round_trip_plain_and_encrypted(tmp_path: Path) -> None:
    ident = make_identity()
    plain, sealed = tmp_path / "plain.id", tmp_path / "sealed.id"
    identity_file.save(plain, ident)
    identity_file.save(sealed, ident, "correct horse")
    for path in (plain, sealed):
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert identity_file.load(plain).did == ident.did
    loaded = identity_file.load(sealed, "correct horse")
    assert loaded.key.seed == ident.key.seed and loaded.display_name == "Research"
    assert keys.b64u(ident.key.seed) not in sealed.read_text()
    assert "Research" in repr(loaded) and keys.b64u(ident.key.seed) not in repr(loaded)


def test_wrong_missing_or_moved_passphrase_protection(tmp_path: Path) -> None:
    ident, other = make_identity(), make_identity()
    path = tmp_path / "sealed.id"
    identity_file.save(path, ident, "pw")
    with pytest.raises(IdentityFileError, match="wrong passphrase"):
        identity_file.load(path, "not pw")
    with pytest.raises(IdentityFileError, match="encrypted"):
        identity_file.load(path)
    with pytest.raises(IdentityFileError, match="empty"):
        identity_file.save(tmp_path / "x.id", ident, "")
    # a sealed key pasted into another agent's file does not open (the did is bound to the ciphertext)
    doc, other_doc = json.loads(path.read_text()), json.loads(identity_file.to_json(other, "pw"))
    other_doc["key"] = doc["key"]
    with pytest.raises(IdentityFileError):
        identity_file.from_json(json.dumps(other_doc).encode(), "pw")


@pytest.mark.parametrize(
    ("n", "r", "p", "message"),
    [
        (2**20, 32, 1, "more memory or work"),  # 4 GiB of scrypt memory, refused before deriving
        (2**18, 8, 16, "more memory or work"),
        (3 * 2**10, 8, 1, "out of range"),  # not a power of two
        (2**21, 1, 1, "out of range"),
    ],
)
def test_costly_scrypt_parameters_are_refused_before_deriving(n: int, r: int, p: int, message: str) -> None:
    doc = json.loads(identity_file.to_json(make_identity(), "pw"))
    doc["key"].update(n=n, r=r, p=p)
    with pytest.raises(IdentityFileError, match=message):
        identity_file.from_json(json.dumps(doc).encode(), "pw")


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda d: d.update(did=keys.SigningKey.generate().did), "does not belong"),
        (lambda d: d.update(format="pem"), "not an agent-bbs-identity"),
        (lambda d: d.update(version=9), "version"),
        (lambda d: d["identity_record"].update(display_name="Forged"), "does not verify"),
        (lambda d: d["key"].update(seed="AAAA"), "32-byte"),
        (lambda d: d["key"].update(encoding="rot13"), "unknown key encoding"),
        (lambda d: d.update(display_name=""), "display_name"),
    ],
)
def test_tampered_files_are_refused(change, message: str) -> None:  # type: ignore[no-untyped-def]
    doc = json.loads(identity_file.to_json(make_identity()))
    change(doc)
    with pytest.raises(IdentityFileError, match=message):
        identity_file.from_json(json.dumps(doc).encode())


def test_garbage_and_missing_files(tmp_path: Path) -> None:
    (tmp_path / "junk").write_bytes(b"\xff\x00not json")
    with pytest.raises(IdentityFileError):
        identity_file.load(tmp_path / "junk")
    with pytest.raises(IdentityFileError, match="cannot read"):
        identity_file.load(tmp_path / "absent")


def _agent_row(data: Path, did: str) -> tuple[str, bytes | None] | None:
    conn = connect(DataDir(data).db_path)
    try:
        row = conn.execute("SELECT name, key_seed FROM local_agents WHERE agent_id = ?", (did,)).fetchone()
        return None if row is None else (row[0], row[1])
    finally:
        conn.close()


def test_export_then_import_on_another_node(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    a, b, c = tmp_path / "a", tmp_path / "b", tmp_path / "c"
    for folder in (a, b, c):
        initialise(folder)  # only init and serve create a node; import needs one
    assert main(["agent", "create", "research", "--data", str(a), "--json"]) == 0
    did = json.loads(capsys.readouterr().out)["agent_id"]
    out = tmp_path / "research.id"
    monkeypatch.setenv("BBS_PW", "s3cret")
    assert main(["agent", "export", "research", "--data", str(a), "--out", str(out), "--passphrase-env", "BBS_PW"]) == 0
    assert stat.S_IMODE(out.stat().st_mode) == 0o600
    assert "s3cret" not in capsys.readouterr().out

    assert main(["agent", "import", str(out), "--data", str(b), "--passphrase-env", "BBS_PW", "--json"]) == 0
    created = json.loads(capsys.readouterr().out)
    assert created["agent_id"] == did and created["name"] == "research"
    assert _agent_row(b, did) == ("research", None)  # by default the importing node does not keep the key

    assert main(["agent", "import", str(out), "--data", str(c), "--passphrase-env", "BBS_PW", "--keep-key"]) == 0
    kept = _agent_row(c, did)
    assert kept is not None and kept[1] is not None
    assert "api_key:" in capsys.readouterr().out

    # the same identity document (same record hash) on both nodes
    def doc_hash(data: Path) -> str:
        conn = connect(DataDir(data).db_path)
        try:
            return conn.execute("SELECT doc_hash FROM agents WHERE id = ?", (did,)).fetchone()[0]
        finally:
            conn.close()

    assert doc_hash(a) == doc_hash(b) == doc_hash(c)


def test_cli_errors_change_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    initialise(a)
    initialise(b)
    out = tmp_path / "x.id"
    assert main(["agent", "export", "nobody", "--data", str(a), "--out", str(out)]) == 1
    assert "agent_not_found" in capsys.readouterr().err and not out.exists()
    assert main(["agent", "export", "x", "--data", str(tmp_path / "none"), "--out", str(out)]) == 1
    assert main(["agent", "export", "x", "--data", str(a), "--out", str(out), "--passphrase-env", "UNSET_VAR"]) == 1

    assert main(["agent", "create", "research", "--data", str(a)]) == 0
    assert main(["agent", "export", "research", "--data", str(a), "--out", str(out)]) == 0
    capsys.readouterr()
    assert main(["agent", "import", str(out), "--data", str(b)]) == 0
    assert main(["agent", "import", str(out), "--data", str(b), "--name", "again"]) == 1
    assert "agent_exists" in capsys.readouterr().err
    assert main(["agent", "import", str(out), "--data", str(b), "--name", "Bad Name!"]) == 1
    (tmp_path / "bad.id").write_text("{}")
    assert main(["agent", "import", str(tmp_path / "bad.id"), "--data", str(b)]) == 1
    assert "identity_file" in capsys.readouterr().err

    # an agent imported without its key cannot be exported from that node: it holds its own file
    assert main(["agent", "export", "research", "--data", str(b), "--out", str(tmp_path / "y.id")]) == 1
    assert "key_not_kept" in capsys.readouterr().err


def test_identity_record_required_for_import(tmp_path: Path) -> None:
    from node.agents.portable import import_identity
    from node.errors import InvalidInput
    from node.service import Node

    initialise(tmp_path / "n")
    node = Node(tmp_path / "n")
    node.open()
    try:
        with pytest.raises(InvalidInput):
            asyncio.run(import_identity(node, "x", keys.SigningKey.generate(), None))
    finally:
        node.close()


def _key_events(data: Path) -> list[dict[str, object]]:
    conn = connect(DataDir(data).db_path)
    try:
        rows = conn.execute("SELECT body FROM records WHERE kind = 'key_event' ORDER BY seq").fetchall()
        return [json.loads(bytes(r[0])) for r in rows]
    finally:
        conn.close()


def test_a_rotated_agent_is_exported_with_its_key_history_and_imported_elsewhere(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    a, b, c = tmp_path / "a", tmp_path / "b", tmp_path / "c"
    for folder in (a, b, c):
        initialise(folder)
    assert main(["agent", "create", "research", "--data", str(a), "--json"]) == 0
    did = json.loads(capsys.readouterr().out)["agent_id"]
    old = tmp_path / "before.id"
    assert main(["agent", "export", "research", "--data", str(a), "--out", str(old)]) == 0
    for _ in range(2):
        assert main(["agent", "rotate-signing-key", "research", "--data", str(a), "--json"]) == 0
    current = json.loads(capsys.readouterr().out.strip().splitlines()[-1])["signing_key"]
    out = tmp_path / "research.id"
    monkeypatch.setenv("BBS_PW", "s3cret")
    assert main(["agent", "export", "research", "--data", str(a), "--out", str(out), "--passphrase-env", "BBS_PW"]) == 0
    doc = json.loads(out.read_text())
    assert doc["version"] == 2 and doc["did"] == did and doc["signing_key"] == current
    assert [e["seq"] for e in doc["key_history"]] == [1, 2]
    ident = identity_file.load(out, "s3cret")
    assert ident.did == did and ident.key.did == current and ident.rotated
    capsys.readouterr()
    assert main(["agent", "import", str(out), "--data", str(b), "--passphrase-env", "BBS_PW", "--json"]) == 0
    created = json.loads(capsys.readouterr().out)
    assert created["agent_id"] == did
    assert _agent_row(b, did) == ("research", None)
    assert _key_events(b) == _key_events(a)  # the history came with it
    # the file taken before the rotations is refused on a node holding the history, with a code that says why
    assert main(["agent", "import", str(old), "--data", str(b), "--name", "again"]) == 1
    assert "identity_key_outdated" in capsys.readouterr().err
    assert main(["agent", "import", str(out), "--data", str(c), "--passphrase-env", "BBS_PW", "--keep-key"]) == 0
    kept = _agent_row(c, did)
    assert kept is not None and kept[1] is not None and bytes(kept[1]) == ident.key.seed


def test_an_identity_file_older_than_the_history_a_node_holds_is_refused(tmp_path: Path) -> None:
    from node.agents import key_events, portable
    from node.errors import Conflict
    from node.service import Node
    from wire.api import KeyEventIn

    a, b = tmp_path / "a", tmp_path / "b"
    initialise(a)
    initialise(b)
    node_a, node_b = Node(a), Node(b)

    async def run() -> None:
        node_a.open(search_index=False)
        node_b.open(search_index=False)
        try:
            created = await node_a.agents.create("research", "Research")
            before = await portable.export_identity(node_a, "research")
            await node_a.key_events.rotate("research")
            after = await portable.export_identity(node_a, "research")
            assert after.key.did != before.key.did and after.agent_id == created.agent_id
            # node B holds the history (a key event by sync, here submitted as a client would) but not the agent
            (event,) = after.key_history
            checked, _ = node_b.key_events.check(KeyEventIn(record=event), created.agent_id)
            await node_b.db.write(lambda c: key_events.submit_txn(c, node_b.sealing.authority, checked, [], 0))
            count = await node_b.db.read(lambda c: c.execute("SELECT count(*) FROM records").fetchone()[0])
            with pytest.raises(Conflict) as refused:
                await portable.import_identity(node_b, "second", before.key, before.record)
            assert refused.value.code == "identity_key_outdated"
            assert await node_b.db.read(lambda c: c.execute("SELECT count(*) FROM records").fetchone()[0]) == count
        finally:
            node_a.close()
            node_b.close()

    asyncio.run(run())


def test_a_version_2_file_is_checked_against_its_history(tmp_path: Path) -> None:
    from node.agents import key_events

    first, second, stranger = keys.SigningKey.generate(), keys.SigningKey.generate(), keys.SigningKey.generate()
    record = agents.identity_record(first, "Research", "", keys.SigningKey.generate().did)
    event, _ = key_events.rotation_records(first.did, first, second, 1, None, [])
    ident = Identity(second, "Research", "", record["home_node"], record, first.did, [event.record])  # type: ignore[arg-type]
    path = tmp_path / "r.id"
    for secret in (None, "pw"):
        identity_file.save(path, ident, secret)
        loaded = identity_file.load(path, secret)
        assert (loaded.did, loaded.key.did, loaded.key_history) == (first.did, second.did, [event.record])
    doc = json.loads(identity_file.to_json(ident))
    cases: list[tuple[dict[str, Any], str]] = [
        ({"signing_key": stranger.did}, "signing_key is not the key"),
        ({"key_history": []}, "signing_key is not the key"),
        ({"key_history": [{**event.record, "seq": 2}]}, "does not verify"),
        ({"key_history": [record]}, "not a key event"),
        ({"key_history": "x"}, "needs signing_key"),
    ]
    for change, message in cases:
        with pytest.raises(IdentityFileError, match=message):
            identity_file.from_json(json.dumps({**doc, **change}).encode())
    # the sealed key of the rotated file, moved into a version 1 file of that same key, does not open: the
    # associated data names the identity and its signing key
    sealed = json.loads(identity_file.to_json(ident, "pw"))
    alone = Identity(second, "Research")
    forged = {**json.loads(identity_file.to_json(alone, "pw")), "key": sealed["key"]}
    with pytest.raises(IdentityFileError, match="wrong passphrase"):
        identity_file.from_json(json.dumps(forged).encode(), "pw")
    assert identity_file.from_json(identity_file.to_json(alone, "pw"), "pw").key.did == second.did
