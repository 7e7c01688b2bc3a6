"""Fixtures shared with the sync tests: nodes of a test federation."""

from tests.sync.conftest import make_peer  # noqa: F401
