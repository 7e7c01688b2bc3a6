"""Fixtures of the store tests: `new_store`, for a test that needs several fresh databases of one engine."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from node.store.conn import Conn
from node.store.projections import Log
from tests.node.fresh_stores import ENGINES, fresh_stores

NewStore = Callable[[Log | None], Conn]  # each call a new database of one engine, migrated to the head


@pytest.fixture(params=ENGINES)
def new_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[NewStore]:
    """Run the test once per engine, as `open_store` does, but each call `new_store(log)` opens a NEW database
    (tests/node/fresh_stores.py): for a test that needs several (a hypothesis example each, two nodes). All closed,
    and PostgreSQL's dropped, after the test."""
    stores = fresh_stores(request, tmp_path, None)
    fresh = next(stores)
    names = itertools.count()
    yield lambda log: fresh(f"store{next(names)}", log)
    next(stores, None)  # the generator's end closes them, and drops PostgreSQL's
