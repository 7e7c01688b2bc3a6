"""node.entries.queries: the renderers of entries and the SQL fragments the store modules share."""

from __future__ import annotations

from typing import Any

from node.entries import queries
from wire.api import EntryOut


def test_entry_out_fills_entry_out_in_its_field_order() -> None:
    """entry_out builds EntryOut positionally (it is rendered for every entry of a page)."""
    assert EntryOut.__struct_fields__ == (
        *("id", "record_hash", "content_fingerprint", "author_id", "created_at", "entry_type", "performative"),
        *("content", "confidence", "tags", "directed_to", "metadata", "truth_state", "authority", "scope"),
        *("signature", "retracted", "superseded", "community_confidence", "superseded_claims", "equivocated"),
        *("versions", "space"),
    )


def test_tagged_any_binds_each_tag_once_in_nfc() -> None:
    params: dict[str, Any] = {}
    condition = queries.tagged_any(["cafe\u0301", "café", "a\u0000b"], params)
    assert params == {"tag0": "café", "tag1": "a\u0000b"}
    assert condition == "e.id IN (SELECT entry_id FROM entry_tags WHERE tag IN (:tag0, :tag1))"
