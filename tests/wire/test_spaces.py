"""The wire types of spaces refuse bad input with the field named (what the REST routes answer 422 with)."""

from __future__ import annotations

import msgspec
import pytest

from identity.schema_v3 import MAX_SPACE_NAME_CHARS
from wire.spaces import MemberIn, SpaceIn


def test_a_space_name_has_limits_and_unknown_members_are_refused() -> None:
    assert msgspec.convert({"name": "family"}, SpaceIn).description == ""
    for bad, path in (
        ({"name": ""}, "$.name"),
        ({"name": "x" * (MAX_SPACE_NAME_CHARS + 1)}, "$.name"),
        ({"name": "family", "colour": "red"}, "colour"),
    ):
        with pytest.raises(msgspec.ValidationError, match=path.replace("$", r"\$")):
            msgspec.convert(bad, SpaceIn)


def test_a_member_role_is_one_of_four() -> None:
    assert msgspec.convert({"agent_id": "did:key:z", "role": "reader"}, MemberIn).role == "reader"
    with pytest.raises(msgspec.ValidationError, match=r"\$\.role"):
        msgspec.convert({"agent_id": "did:key:z", "role": "owner"}, MemberIn)
