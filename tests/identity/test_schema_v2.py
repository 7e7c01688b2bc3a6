"""identity.schema_v2: the record schemas of the last v2 release, frozen (docs/format-v3.md, 8.2)."""

from __future__ import annotations

import msgspec

from identity import keys, records, schema, schema_v2
from sync import compat
from tests.sync.conftest import signed_entry

AUTHOR = keys.SigningKey.generate()


def test_the_frozen_schemas_are_today_s_v1_kinds() -> None:
    """Every member the last v2 release knew is still known, with the same type, to the current schema of its
    kind; a member the current schemas add later (as `agent_type` was) is what the frozen ones catch."""
    assert set(schema_v2.RECORD_TYPES) == set(records.RECORD_KINDS) == compat.V1_KINDS
    for kind, frozen in schema_v2.RECORD_TYPES.items():
        current = schema.RECORD_TYPES[kind]
        frozen_fields = {f.name: f.type for f in msgspec.structs.fields(frozen)}
        current_fields = {f.name: f.type for f in msgspec.structs.fields(current)}
        assert frozen_fields.keys() <= current_fields.keys(), kind
        # this release adds no member to a v1 kind yet: the two are equal member for member
        assert list(frozen_fields) == list(current_fields), kind


def test_they_accept_what_the_v2_release_stored_and_refuse_what_it_refused() -> None:
    entry = signed_entry(AUTHOR, "a v1 entry")
    assert schema_v2.accepts(entry)
    assert not schema_v2.accepts({**entry, "language": "en"})  # a member added later
    assert not schema_v2.accepts({**entry, "entry_type": "observation"})  # a value added later
    assert not schema_v2.accepts({**entry, "confidence": 2})
    assert not schema_v2.accepts({**entry, "kind": "key_event"})
    assert not schema_v2.accepts({**entry, "kind": 5})
