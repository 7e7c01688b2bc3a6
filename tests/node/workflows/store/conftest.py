"""The workflow store tests run on a real, migrated SQLite database in tmp_path, through the node's Database."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from node.features import LOG
from node.store.db import Database


@pytest.fixture
async def db(tmp_path: Path) -> AsyncIterator[Database]:
    """A migrated database with its writer thread running (`write`, `read`), closed after the test."""
    database = Database(tmp_path / "bbs.db", log=LOG)
    database.open()
    yield database
    database.close()
