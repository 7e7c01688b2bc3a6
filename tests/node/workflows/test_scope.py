"""A task's identity as one scoped key (node/workflows/scope.py): (space, key) and back, never two tasks on one."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from node.workflows import scope

KEYS = st.from_regex(r"(?![0-9]+$)[A-Za-z0-9_.:@-]{1,128}", fullmatch=True)
SPACES = st.none() | st.from_regex(r"[0-9a-f]{64}", fullmatch=True)


def test_a_public_task_keeps_its_key_and_a_spaces_is_prefixed() -> None:
    space = "a" * 64
    assert scope.scoped(None, "roof") == "roof"
    assert scope.scoped(space, "roof") == f"{space}/roof"
    assert scope.split(f"{space}/roof") == (space, "roof") and scope.split("roof") == (None, "roof")
    assert scope.key_of(f"{space}/roof") == "roof"
    assert scope.in_space(space, ["a", "b"]) == [f"{space}/a", f"{space}/b"] and scope.in_space(None, ["a"]) == ["a"]


@given(SPACES, KEYS, SPACES, KEYS)
def test_two_tasks_never_share_a_scoped_key(space: str | None, key: str, other: str | None, other_key: str) -> None:
    assert scope.split(scope.scoped(space, key)) == (space, key)
    assert (scope.scoped(space, key) == scope.scoped(other, other_key)) == ((space, key) == (other, other_key))
