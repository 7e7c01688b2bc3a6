"""The read and write rules of spaces, as pure functions of a role (identity/space_rules.py)."""

from __future__ import annotations

import pytest

from identity.space_rules import may_administer, may_read, may_write


@pytest.mark.parametrize(
    ("role", "read", "write", "administer"),
    [
        ("owner", True, True, True),
        ("admin", True, True, True),
        ("writer", True, True, False),
        ("reader", True, False, False),
        ("none", False, False, False),
        (None, False, False, False),
        ("unknown", False, False, False),
    ],
)
def test_each_role_reads_writes_and_administers_as_docs_say(
    role: str | None, read: bool, write: bool, administer: bool
) -> None:
    assert (may_read(role), may_write(role), may_administer(role)) == (read, write, administer)
