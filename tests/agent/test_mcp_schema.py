"""agent/mcp_schema.py: tool arguments derived from the wire Structs, the compact published schema, and the strict
check whose refusals name the argument and what it accepts, in one line."""

from __future__ import annotations

from typing import Any

import pytest

from agent.mcp_schema import (
    Action,
    ArgumentError,
    ArgumentSpec,
    accepts,
    action_argument,
    arguments,
    compact,
    struct_arguments,
)
from wire.api import PostEntry, ReadQuery, SearchQuery


def test_struct_arguments_are_the_struct_s_fields_with_references_inlined() -> None:
    fields, required = struct_arguments(PostEntry)
    assert list(fields)[:3] == ["entry_type", "performative", "content"]
    assert required == ["entry_type", "performative", "content"]
    link = fields["links"]["items"]
    assert "$ref" not in link and set(link["properties"]) == {"target", "link_type", "annotation"}


def test_compact_keeps_what_a_model_needs_and_drops_what_the_check_enforces_anyway() -> None:
    fields, _ = struct_arguments(SearchQuery)
    assert compact(fields["q"]) == {"type": "string"}  # no null alternative, no length
    assert compact(fields["min_confidence"]) == {"type": "number", "minimum": 0, "maximum": 1}
    assert compact(fields["author"]) == {"type": "array", "items": {"type": "string"}}  # no pattern
    assert compact(fields["limit"]) == {"type": "integer", "minimum": 1, "maximum": 200, "default": 20}
    assert "maximum" not in compact(fields["offset"])  # 100,000: beyond what anyone reaches by mistake
    assert compact({"title": "T", "type": "object", "description": "d", "properties": {"x": {"title": "X"}}}) == {
        "type": "object",
        "description": "d",
        "properties": {"x": {}},
    }


def test_arguments_rename_skip_describe_and_default() -> None:
    spec = arguments(
        PostEntry,
        rename={"content": "text"},
        skip=("metadata",),
        extra={"action": action_argument({"a": Action(frozenset())}, "a")},
        describe={"text": "what you say"},
        defaults={"entry_type": "finding"},
    )
    assert "metadata" not in spec.properties and "text" in spec.properties and "content" not in spec.properties
    assert spec.required == ["performative", "text"]  # entry_type has a default here
    published = spec.published()
    assert published["additionalProperties"] is False and published["required"] == ["performative", "text"]
    props = published["properties"]
    assert props["text"]["description"] == "what you say"
    assert props["entry_type"]["default"] == "finding" and props["action"]["default"] == "a"
    assert "default" not in props["scope"]  # the neutral default of an enum goes unsaid
    assert all("description" not in p for name, p in props.items() if name != "text")


def refusal(spec: ArgumentSpec, given: dict[str, Any]) -> tuple[str, str]:
    with pytest.raises(ArgumentError) as caught:
        spec.check(given)
    assert "\n" not in caught.value.detail
    return caught.value.field, caught.value.detail


SEARCH = arguments(SearchQuery)
READ = arguments(ReadQuery, required=["ids"], tighten={"ids": {"minItems": 1}})


@pytest.mark.parametrize(
    ("spec", "given", "field", "says"),
    [
        (SEARCH, {"nonsense": 1}, "nonsense", "unknown argument; this tool takes q, tags"),
        (SEARCH, {"entry_type": "question"}, "entry_type", "got string; accepts a list of at most 5 items, each"),
        (SEARCH, {"entry_type": ["rumour"]}, "entry_type[0]", "'rumour' is not one of contradiction, finding"),
        (SEARCH, {"min_confidence": 3}, "min_confidence", "3 is out of range; accepts a number from 0.0 to 1.0"),
        (SEARCH, {"limit": True}, "limit", "got boolean; accepts an integer from 1 to 200"),
        (SEARCH, {"author": ["Not A Name"]}, "author[0]", "'Not A Name' is not an agent's did or its local name"),
        (SEARCH, {"q": "x" * 600}, "q", "600 characters; accepts 0 to 512 characters"),
        (READ, {}, "ids", "required; accepts a list"),
        (READ, {"ids": []}, "ids", "0 items; accepts a list of 1 to 100 items"),
        (READ, {"ids": ["1"], "hops": 9}, "hops", "9 is out of range; accepts an integer from 0 to 3"),
        (arguments(PostEntry), {"entry_type": "finding", "performative": "inform", "content": "x",
                                "links": [{"target": "1", "link_type": "supports", "why": 1}]},
         "links[0].why", "unknown field; it takes target, link_type, annotation"),
    ],
)  # fmt: skip
def test_a_refusal_names_the_argument_and_what_it_accepts(
    spec: ArgumentSpec, given: dict[str, Any], field: str, says: str
) -> None:
    named, detail = refusal(spec, given)
    assert named == field and detail.startswith(says), detail


def test_a_null_argument_is_an_argument_not_given() -> None:
    assert SEARCH.check({"q": None, "limit": 5}) == {"limit": 5}


ACTIONS = {
    "add": Action(frozenset({"url", "tiers"}), frozenset({"url"})),
    "list": Action(frozenset()),
}
MULTI = ArgumentSpec(
    {"action": action_argument(ACTIONS, "list"), "url": {"type": "string"}, "tiers": {"type": "array"}},
    actions=ACTIONS,
)


def test_an_action_takes_only_its_own_arguments_and_needs_its_required_ones() -> None:
    assert MULTI.check({}) == {} and MULTI.check({"action": "add", "url": "u"}) == {"action": "add", "url": "u"}
    assert refusal(MULTI, {"url": "u"}) == ("url", "not an argument of action list (it takes no other argument)")
    assert refusal(MULTI, {"action": "add"}) == ("url", "action add needs it")
    assert refusal(MULTI, {"action": "drop"})[0] == "action"


def test_accepts_says_it_in_words() -> None:
    assert accepts({"enum": ["a", "b"]}) == "one of a, b"
    assert accepts({"type": "integer", "minimum": 30, "maximum": 86400}) == "an integer from 30 to 86400"
    assert accepts({"type": "integer", "minimum": 1}) == "an integer of at least 1"
    assert accepts({"type": "boolean"}) == "true or false" and accepts({"type": "object"}) == "an object"
    assert accepts({"anyOf": [{"type": "string", "maxLength": 8}, {"type": "null"}]}) == (
        "a string of at most 8 characters"
    )
