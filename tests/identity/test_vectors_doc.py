"""The test vectors published in docs/canonical.md, checked against the code so the page cannot go stale.

Each vector lives in a fenced block whose info string names it (```` ```text vector-1-expected ````).
This module parses those blocks and recomputes every published output: did, key file, signing bytes,
record-hash preimage, hash, signature, value normalisations, timestamp verdicts, fingerprints.
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Any

import pytest

from identity import canonical, key_files, keys, records
from identity.keys import SigningKey

DOC = Path(__file__).resolve().parents[2] / "docs" / "canonical.md"
_FENCE = re.compile(r"^```(?:json|text) ([a-z0-9-]+)\n(.*?)\n```$", re.MULTILINE | re.DOTALL)
_ARROW = "  =>  "


def _blocks() -> dict[str, str]:
    found: dict[str, str] = {}
    for label, body in _FENCE.findall(DOC.read_text("utf-8")):
        assert label not in found, f"duplicate block {label} in {DOC}"
        found[label] = body
    return found


BLOCKS = _blocks()
VECTOR_IDS = sorted({m.group(1) for label in BLOCKS if (m := re.fullmatch(r"vector-(\d+)-input", label))}, key=int)


def _fields(label: str) -> dict[str, str]:
    """A `name: value` block as a dict."""
    out: dict[str, str] = {}
    for line in BLOCKS[label].splitlines():
        name, _, value = line.partition(": ")
        out[name] = value
    return out


def _arrow_lines(label: str) -> list[tuple[str, str]]:
    pairs = []
    for line in BLOCKS[label].splitlines():
        assert _ARROW in line, f"{label}: malformed line {line!r}"
        left, right = line.split(_ARROW)
        pairs.append((left, right))
    assert pairs, f"{label} is empty"
    return pairs


def _key() -> SigningKey:
    return SigningKey.from_seed(bytes.fromhex(_fields("key-vector")["seed"]))


def test_the_doc_publishes_all_vector_kinds() -> None:
    for label in ("key-vector", "json-vectors", "created-at-vectors", "fingerprint-vectors", "whitespace-set"):
        assert label in BLOCKS, f"{label} missing from {DOC}"
    assert len(VECTOR_IDS) >= 4
    kinds = {json.loads(BLOCKS[f"vector-{n}-input"])["kind"] for n in VECTOR_IDS}
    assert "entry" in kinds and len(kinds) >= 2
    for n in VECTOR_IDS:
        for part in ("signing-bytes", "expected"):
            assert f"vector-{n}-{part}" in BLOCKS, f"vector {n} lacks its {part} block"


def test_key_vector(tmp_path: Path) -> None:
    fields = _fields("key-vector")
    seed = bytes.fromhex(fields["seed"])
    assert seed == bytes(32)
    key = SigningKey.from_seed(seed)
    assert keys.public_key_bytes(key.public_key).hex() == fields["public_key"]
    assert key.did == fields["did"]
    assert keys.public_key_bytes(keys.public_key_from_did(fields["did"])).hex() == fields["public_key"]
    key_files.save_key(tmp_path / "k.key", key)
    assert (tmp_path / "k.key").read_text("ascii") == fields["key_file"] + "\n"
    assert SigningKey.from_seed(bytes.fromhex(fields["second_seed"])).did == fields["second_did"]


@pytest.mark.parametrize("n", VECTOR_IDS)
def test_record_vector(n: str) -> None:
    record: dict[str, Any] = json.loads(BLOCKS[f"vector-{n}-input"])
    signing = BLOCKS[f"vector-{n}-signing-bytes"].encode("ascii")
    expected = _fields(f"vector-{n}-expected")
    key = _key()

    # The input is already canonical, its sets are sorted sets, and its author is the vector key.
    canonical.check_canonical(record)
    for name in ("tags", "directed_to"):
        if name in record:
            assert record[name] == sorted(set(record[name]))
    assert record["author_id"] == key.did

    assert canonical.canonical_bytes(record) == signing
    assert json.loads(signing) == record

    signed = records.sign(record, key)
    assert records.signing_bytes(signed) == signing
    assert signed["signature"] == expected["signature"]
    assert records.verify(signed) == expected["hash"]
    # The published signature verifies on its own, and the hash rule per kind holds.
    assert records.verify({**record, "signature": expected["signature"]}) == expected["hash"]
    assert keys.verify(key.did, signing, expected["signature"])

    preimage_label = f"vector-{n}-hash-preimage"
    if record["kind"] == "entry":
        preimage = BLOCKS[preimage_label]
        six = {name: record[name] for name in ("author_id", "created_at", "entry_type", "performative", "content")}
        assert json.loads(preimage) == {**six, "schema_version": "v1"}
        assert canonical.canonical_bytes(json.loads(preimage)) == preimage.encode("ascii")
        assert hashlib.sha256(preimage.encode("ascii")).hexdigest() == expected["hash"]
        assert canonical.record_hash(*(six[k] for k in six)) == expected["hash"]
    else:
        assert preimage_label not in BLOCKS
        assert hashlib.sha256(signing).hexdigest() == expected["hash"]


def test_json_normalisation_vectors() -> None:
    for source, output in _arrow_lines("json-vectors"):
        value = json.loads(source)
        if output == "refused":
            with pytest.raises(canonical.CanonicalError):
                canonical.canonical_bytes(canonical.normalize_value(value))
        else:
            normal = canonical.normalize_value(value)
            assert canonical.canonical_bytes(normal).decode("ascii") == output, source
            canonical.check_canonical(json.loads(output))


def test_created_at_vectors() -> None:
    for text, verdict in _arrow_lines("created-at-vectors"):
        assert verdict in ("valid", "refused"), text
        if verdict == "valid":
            assert canonical.format_created_at(canonical.parse_created_at(text)) == text
        else:
            with pytest.raises(canonical.CanonicalError):
                canonical.parse_created_at(text)


def test_fingerprint_vectors() -> None:
    for source, digest in _arrow_lines("fingerprint-vectors"):
        assert canonical.content_fingerprint(json.loads(source)) == digest, source


def test_whitespace_set() -> None:
    published = {int(token.removeprefix("U+"), 16) for token in BLOCKS["whitespace-set"].split()}
    assert published == {c for c in range(0x110000) if chr(c).isspace()}
    for code in published:
        assert canonical.normalize_content("x" + chr(code)) == "x"


@pytest.mark.parametrize("n", VECTOR_IDS)
def test_record_vectors_are_valid_records_of_their_kind(n: str) -> None:
    """The published records also pass the kind schemas (identity/schema.py), so they are realistic."""
    record = json.loads(BLOCKS[f"vector-{n}-input"])
    signed = {**record, "signature": _fields(f"vector-{n}-expected")["signature"]}
    record_hash, decoded = records.check(signed)
    assert record_hash == _fields(f"vector-{n}-expected")["hash"]
    assert type(decoded).__name__.lower().startswith(record["kind"])
