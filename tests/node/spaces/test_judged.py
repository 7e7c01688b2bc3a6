"""The space gate's kept resolutions (node/spaces/judged.py): one is given back only for exactly the inputs it was
made from, and at most `limit` spaces are kept, the least recently used dropped first."""

from __future__ import annotations

from identity.spaces import resolve
from node.spaces.judged import Inputs, JudgedSpaces

ONE = Inputs(("creation", "host"), ())


def test_a_resolution_is_given_back_only_for_the_inputs_it_was_made_from() -> None:
    judged = JudgedSpaces()
    resolved = resolve([])
    judged.put("s", ONE, resolved)
    assert judged.get("s", ONE) is resolved
    assert judged.get("s", Inputs(("creation", "host", "removal"), ())) is None  # a structure record stored
    assert judged.get("s", Inputs(("creation",), ())) is None  # one flagged void or purged
    assert judged.get("s", Inputs(ONE.structure, ("key event",))) is None  # a key event of an author
    assert judged.get("t", ONE) is None


def test_the_least_recently_used_space_is_dropped_past_the_limit() -> None:
    judged = JudgedSpaces(limit=2)
    for space in ("a", "b"):
        judged.put(space, ONE, resolve([]))
    assert judged.get("a", ONE) is not None  # a is now the most recently used
    judged.put("c", ONE, resolve([]))
    assert len(judged) == 2
    assert judged.get("b", ONE) is None and judged.get("a", ONE) is not None and judged.get("c", ONE) is not None
