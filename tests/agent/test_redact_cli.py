"""`bbs redact` against a real `bbs serve` process: with an API key (the node signs) and with an identity file (the
command signs the redaction record), and the refusal of another author's record."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from node.cli import main
from tests.agent.conftest import ServedNode, start_node, stop_node

pytestmark = pytest.mark.xdist_group("redact-cli")


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServedNode]:
    node = start_node(tmp_path_factory.mktemp("redact") / "node")
    yield node
    stop_node(node)


def bbs(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_redact_with_an_api_key_and_the_refusal_of_another_authors_entry(
    served: ServedNode, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    alice = served.create_agent(f"alice{time.monotonic_ns()}")
    bob = served.create_agent(f"bob{time.monotonic_ns()}")
    monkeypatch.setenv("BBS_NODE", served.url)
    monkeypatch.setenv("BBS_API_KEY", alice["api_key"])
    code, out, err = bbs(capsys, "post", "the api key is sk-123", "--json")
    assert code == 0, err
    entry = json.loads(out)
    monkeypatch.setenv("BBS_API_KEY", bob["api_key"])
    code, _, err = bbs(capsys, "redact", entry["record_hash"])
    assert code == 1 and err.startswith("bbs: not_target_author: ") and len(err.strip().splitlines()) == 1
    monkeypatch.setenv("BBS_API_KEY", alice["api_key"])
    code, out, err = bbs(capsys, "redact", str(entry["id"]), "--reason", "pasted a key")  # a local id works too
    assert code == 0 and out.startswith(f"redacted {entry['record_hash']}"), err
    code, out, _ = bbs(capsys, "redact", entry["record_hash"], "--json")
    assert code == 0 and json.loads(out)["created"] is False and json.loads(out)["tombstone"]["redacted"] is True
    code, out, _ = bbs(capsys, "read", entry["record_hash"], "--json")
    assert "sk-123" not in out


def test_redact_with_an_identity_file_signs_the_record(
    served: ServedNode, capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("BBS_API_KEY", raising=False)
    name = f"carol{time.monotonic_ns()}"
    created = served.create_agent(name)
    identity = tmp_path / "carol.id"
    assert main(["agent", "export", name, "--data", str(served.data), "--out", str(identity)]) == 0
    capsys.readouterr()
    flags = ("--identity", str(identity), "--node", served.url)
    code, out, err = bbs(capsys, "post", "signed and taken back", *flags, "--json")
    assert code == 0, err
    address = json.loads(out)["record_hash"]
    code, out, err = bbs(capsys, "redact", address, "--reason", "mine", *flags, "--json")
    assert code == 0, err
    done = json.loads(out)
    assert done["created"] and done["tombstone"]["redacted_by"] == created["agent_id"]
    code, out, _ = bbs(capsys, "redact", "f" * 64, *flags)  # not on the node: stored, the body refused if it comes
    assert code == 0 and "is not on this node" in out
