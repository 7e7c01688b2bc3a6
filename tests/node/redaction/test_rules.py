"""Who may redact what (docs/format-v3.md 5.2): decided against the target's body alone."""

from __future__ import annotations

from typing import Any

from node.redaction import rules

TARGET: dict[str, Any] = {"kind": "entry", "author_id": "did:key:a", "created_at": "2026-01-01T00:00:00Z"}
SPACE = "5" * 64


def never(space: str, author: str, redaction: str) -> bool:
    return False


def admins_of_space(space: str, author: str, redaction: str) -> bool:
    return space == SPACE and author == "did:key:admin"


def test_the_author_redacts_its_entries_links_and_messages() -> None:
    for kind in ("entry", "link", "message"):
        assert rules.refusal("did:key:a", None, "r", {**TARGET, "kind": kind}, never) is None


def test_no_other_kind_is_redactable_not_even_by_its_author() -> None:
    for kind in ("redaction", "task_event", "agent", "key_event", "vouch_page", "space", "space_member"):
        assert rules.refusal("did:key:a", None, "r", {**TARGET, "kind": kind}, never) == rules.NOT_REDACTABLE


def test_another_author_is_refused_outside_a_space_and_an_admin_inside_it_is_not() -> None:
    assert rules.refusal("did:key:b", None, "r", TARGET, admins_of_space) == rules.NOT_TARGET_AUTHOR
    in_space = {**TARGET, "space": SPACE}
    assert rules.refusal("did:key:admin", SPACE, "r", in_space, admins_of_space) is None
    assert rules.refusal("did:key:b", SPACE, "r", in_space, admins_of_space) == rules.NOT_TARGET_AUTHOR
    assert rules.refusal("did:key:a", SPACE, "r", in_space, never) is None  # its author needs no membership


def test_the_redaction_names_the_targets_space_and_only_then() -> None:
    assert rules.refusal("did:key:a", SPACE, "r", TARGET, never) == rules.SPACE_MISMATCH
    assert rules.refusal("did:key:a", None, "r", {**TARGET, "space": SPACE}, never) == rules.SPACE_MISMATCH
    assert rules.refusal("did:key:admin", "6" * 64, "r", {**TARGET, "space": SPACE}, admins_of_space) == (
        rules.SPACE_MISMATCH
    )
