"""Key files (`identity.key_files`): a key saved and loaded, mode 0600 whatever the umask, atomic secret writes."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from identity import key_files
from identity.key_files import load_key, save_key
from identity.keys import SigningKey, b64u
from tests.identity.test_keys import ZERO_SEED, ZERO_SEED_DID

seeds = st.binary(min_size=32, max_size=32)


def test_save_and_load_key_round_trip(tmp_path: Path) -> None:
    key = SigningKey.from_seed(ZERO_SEED)
    path = tmp_path / "nested" / "dir" / "agent.key"  # parents are created
    save_key(path, key)
    loaded = load_key(path)
    assert loaded.seed == key.seed
    assert loaded.did == key.did == ZERO_SEED_DID
    assert path.read_text("ascii") == "ed25519:" + b64u(ZERO_SEED) + "\n"
    assert path.read_text("ascii") == "ed25519:AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA\n"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert not path.with_name(path.name + ".tmp").exists()


@given(seeds)
def test_save_and_load_key_round_trip_any_seed(tmp_path_factory: pytest.TempPathFactory, seed: bytes) -> None:
    path = tmp_path_factory.mktemp("keys") / "k.key"
    save_key(path, SigningKey.from_seed(seed))
    assert load_key(path).seed == seed
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_key_file_mode_is_0600_whatever_the_umask(tmp_path: Path) -> None:
    key = SigningKey.from_seed(ZERO_SEED)
    old = os.umask(0)
    try:
        save_key(tmp_path / "a.key", key)
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "a.key").stat().st_mode) == 0o600


def test_save_key_over_a_world_readable_file_leaves_0600(tmp_path: Path) -> None:
    path = tmp_path / "agent.key"
    path.write_text("old")
    path.chmod(0o644)
    save_key(path, SigningKey.from_seed(b"\x02" * 32))
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert load_key(path).seed == b"\x02" * 32


def test_write_private_file_mode(tmp_path: Path) -> None:
    path = tmp_path / "secret"
    key_files.write_private_file(path, b"s3cret")
    assert path.read_bytes() == b"s3cret"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


@pytest.mark.parametrize(
    "content",
    [
        b"",
        b"\n",
        b"AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA\n",  # no prefix
        b"rsa:AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA\n",
        b"ED25519:AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA\n",
        b"ed25519:\n",
        b"ed25519:A\n",  # not base64
        b"ed25519:" + b64u(bytes(31)).encode() + b"\n",  # wrong length
        b"ed25519:" + b64u(bytes(33)).encode() + b"\n",
        b"ed25519:" + b64u(bytes(64)).encode() + b"\n",
        "ed25519:\u00e9\u00e9\u00e9\n".encode(),  # not ASCII
    ],
)
def test_load_key_refuses_malformed_files(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "bad.key"
    path.write_bytes(content)
    with pytest.raises(ValueError):  # KeyError_ (UnicodeDecodeError for non-ASCII files)
        load_key(path)


def test_load_key_of_a_missing_file_raises(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        load_key(tmp_path / "absent.key")
