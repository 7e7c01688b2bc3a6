"""Workflow test fixtures: the federation tests reuse the sync tests' real-node fixture."""

from tests.sync.conftest import make_peer  # noqa: F401  (a fixture, registered by being imported here)
