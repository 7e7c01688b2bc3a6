"""The read and write rules of spaces, as pure functions of a role (identity/space_rules.py)."""

from __future__ import annotations

import pytest

from identity.space_rules import hosting, may_administer, may_read, may_receive, may_write


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


N1, N2, N3 = (f"did:key:z6Mk{name}" for name in ("node1", "node2", "node3"))
SPACE = "a" * 64


def test_a_space_is_hosted_by_the_nodes_its_admins_name_and_its_creation_node() -> None:
    assert hosting({N1, N2}) == {N1, N2}
    assert hosting({N1}, creation_node=N3) == {N1, N3}
    assert hosting(frozenset(), creation_node=N3) == {N3}  # the owner's own node serves a space nobody named yet
    assert hosting(frozenset()) == frozenset()  # elsewhere, a space no admin named a host goes nowhere
    assert hosting({N1}, creation_node=N3, chained={N1, N3}) == {N1}  # named `none`: the admins' word wins
    assert hosting({N1, N3}, creation_node=N3, chained={N1, N3}) == {N1, N3}


@pytest.mark.parametrize(
    ("peer", "space", "hosts", "receives"),
    [
        (N3, None, frozenset(), True),  # a public record: every node
        (N3, None, frozenset({N1}), True),
        (N1, SPACE, frozenset({N1, N2}), True),
        (N2, SPACE, frozenset({N1, N2}), True),
        (N3, SPACE, frozenset({N1, N2}), False),  # not a host: nothing of the space
        (N1, SPACE, frozenset(), False),
    ],
)
def test_a_node_receives_a_space_record_only_when_it_hosts_the_space(
    peer: str, space: str | None, hosts: frozenset[str], receives: bool
) -> None:
    assert may_receive(peer, space, hosts) is receives
