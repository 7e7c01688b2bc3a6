"""The read rule applied (node/spaces/sight.py): what a sight sees, and the SQL condition it gives, run on SQLite."""

from __future__ import annotations

import sqlite3

import pytest

from node.spaces.sight import OPERATOR, PUBLIC, Sight, kept_local, stored_scope

A, B = "a" * 64, "b" * 64


def seen(sight: Sight) -> list[str | None]:
    """The rows of a table of one public and two spaces' records that `sight.sql` keeps."""
    conn = sqlite3.connect(":memory:")
    conn.execute("CREATE TABLE t (space TEXT)")
    conn.executemany("INSERT INTO t VALUES (?)", [(None,), (A,), (B,)])
    return [r[0] for r in conn.execute(f"SELECT space FROM t WHERE {sight.sql('space')} ORDER BY rowid")]


def test_a_reader_sees_the_public_federation_and_its_spaces() -> None:
    member = Sight(frozenset({A}))
    assert seen(PUBLIC) == [None] and not PUBLIC.sees(A) and PUBLIC.sees(None)
    assert seen(member) == [None, A] and member.sees(A) and not member.sees(B)
    assert seen(OPERATOR) == [None, A, B] and OPERATOR.sees(B)


def test_a_space_id_that_is_not_one_is_never_written_into_sql() -> None:
    with pytest.raises(ValueError):
        Sight(frozenset({"x' OR 1 = 1 --"})).sql("space")


def test_a_spaces_records_keep_their_own_scope_and_go_only_to_its_hosts() -> None:
    assert stored_scope(A) == "federation" and stored_scope(A, "local") == "local"
    assert stored_scope(None) == "federation" and stored_scope(None, "local") == "local"


def test_a_spaces_task_records_are_kept_local_for_now() -> None:
    assert kept_local(A) == "local" and kept_local(A, "federation") == "local"
    assert kept_local(None) == "federation" and kept_local(None, "local") == "local"
