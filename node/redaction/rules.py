"""Who may redact what (docs/format-v3.md 5.2), decided against the target's body in memory, before anything of the
body would be stored: the target's author, or an owner or admin of the target's space; only entries, links and bus
messages."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from identity.records import REDACTABLE_KINDS

NOT_REDACTABLE = "not_redactable"  # the target is a redaction, a key event, an agent document, a task event, ...
SPACE_MISMATCH = "space_mismatch"  # the redaction's `space` is not the target's
NOT_TARGET_AUTHOR = "not_target_author"  # neither the target's author nor an admin of its space

# (space, author, redaction address) -> whether the author holds admin authority in the space for that redaction
Moderates = Callable[[str, str, str], bool]


def refusal(author: str, space: str | None, redaction: str, target: dict[str, Any], moderates: Moderates) -> str | None:
    """Why the redaction at address `redaction` by `author` naming `space` is void for the record `target`, or None
    when it holds: the target's kind is redactable, the spaces match, and `author` wrote the target or moderates
    its space."""
    if target.get("kind") not in REDACTABLE_KINDS:
        return NOT_REDACTABLE
    target_space = target.get("space")
    if space != target_space:
        return SPACE_MISMATCH
    if author == target.get("author_id"):
        return None
    if isinstance(target_space, str) and moderates(target_space, author, redaction):
        return None
    return NOT_TARGET_AUTHOR
