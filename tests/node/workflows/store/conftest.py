"""The workflow store tests run on each engine: a migrated SQLite file in tmp_path or a migrated PostgreSQL database
(`open_store`), read and written through `helpers.Store`, one connection with the Database's `read` and
`write`."""

from __future__ import annotations

import pytest

from node.features import LOG
from tests.node.workflows.store.helpers import Store
from tests.pg_fixtures import OpenStore


@pytest.fixture
def db(open_store: OpenStore) -> Store:
    """A migrated database of this run's engine carrying the node's log, closed after the test."""
    return Store(open_store(LOG))
