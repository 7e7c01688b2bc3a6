"""node.agents.recovery_file: the node's agent recovery key, made once (mode 0600) and read back unchanged."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from identity import keys
from node.agents import recovery_file


def test_the_recovery_key_is_made_once_private_and_read_back(tmp_path: Path) -> None:
    path = tmp_path / recovery_file.FILE_NAME
    assert recovery_file.load(path) is None
    made = recovery_file.load_or_create(path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert recovery_file.load_or_create(path).did == made.did
    loaded = recovery_file.load(path)
    assert loaded is not None and loaded.seed == made.seed


def test_a_damaged_recovery_key_file_is_an_error_not_a_new_key(tmp_path: Path) -> None:
    path = tmp_path / recovery_file.FILE_NAME
    path.write_text("not a key\n")
    with pytest.raises(keys.KeyError_):
        recovery_file.load_or_create(path)
    assert path.read_text() == "not a key\n"
