"""wire.api: the REST wire types, their bounds, and the unsigned entry a PostEntry becomes."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from identity import canonical, keys, records
from identity.schema import EntryRecord
from wire import api

ALICE = keys.SigningKey.generate()
BOB = keys.SigningKey.generate()
CREATED = "2026-01-02T03:04:05Z"


def body(**over: Any) -> api.PostEntry:
    return msgspec.convert({"entry_type": "finding", "performative": "inform", "content": "x", **over}, api.PostEntry)


def refused(typ: type[Any], value: Any) -> str:
    with pytest.raises(msgspec.ValidationError) as info:
        msgspec.convert(value, typ)
    return str(info.value)


def test_post_entry_defaults() -> None:
    entry = body()
    assert (entry.confidence, entry.truth_state, entry.authority, entry.scope) == (0.5, "fact", "raw", "federation")
    assert entry.tags == [] and entry.directed_to == [] and entry.links == [] and entry.metadata == {}
    assert entry.idempotency_key is None


@pytest.mark.parametrize(
    ("over", "path"),
    [
        ({"content": ""}, "$.content"),
        ({"confidence": 2}, "$.confidence"),
        ({"tags": ["t"] * (api.MAX_TAGS + 1)}, "$.tags"),
        ({"links": [{"target": "", "link_type": "supports"}]}, "$.links[0].target"),
        ({"links": [{"target": "1", "link_type": "retracted_by"}]}, "$.links[0].link_type"),
        ({"idempotency_key": "k" * (api.MAX_IDEMPOTENCY_KEY + 1)}, "$.idempotency_key"),
    ],
)
def test_post_entry_bounds(over: dict[str, Any], path: str) -> None:
    assert path in refused(api.PostEntry, {"entry_type": "finding", "performative": "inform", "content": "x", **over})


def test_the_unsigned_entry_is_canonical_and_signs_into_a_valid_record() -> None:
    post = body(
        content="Cafe\u0301 is open\r\nsecond line  \n",
        confidence=0.123456,
        tags=["b", "a", "b"],
        directed_to=[BOB.did, BOB.did],
        links=[{"target": "7", "link_type": "supports", "annotation": "see"}],
        metadata={"n": 1.0, "s": "e\u0301"},
    )
    target = "c" * 64
    unsigned = api.unsigned_entry(post, ALICE.did, CREATED, [target])
    assert unsigned["content"] == "Café is open\nsecond line"  # NFC, LF newlines, no trailing whitespace
    assert unsigned["confidence"] == 0.1235
    assert unsigned["tags"] == ["a", "b"] and unsigned["directed_to"] == [BOB.did]
    assert unsigned["links"] == [{"target": target, "link_type": "supports", "annotation": "see"}]
    assert unsigned["metadata"] == {"n": 1, "s": "é"}
    assert (unsigned["kind"], unsigned["schema_version"], unsigned["created_at"]) == ("entry", "v1", CREATED)
    record_hash, decoded = records.check(records.sign(unsigned, ALICE))
    assert isinstance(decoded, EntryRecord) and decoded.author_id == ALICE.did
    assert record_hash == canonical.record_hash(ALICE.did, CREATED, "finding", "inform", unsigned["content"])


def test_the_unsigned_entry_refuses_blank_content_and_unmatched_links() -> None:
    with pytest.raises(canonical.CanonicalError) as info:
        api.unsigned_entry(body(content=" \n\t "), ALICE.did, CREATED, [])
    assert info.value.field == "$.content"
    with pytest.raises(canonical.CanonicalError) as info:
        api.unsigned_entry(body(metadata={"x": float("nan")}), ALICE.did, CREATED, [])
    assert info.value.field.startswith("$.metadata")
    with pytest.raises(ValueError):  # one resolved target per link
        api.unsigned_entry(body(links=[{"target": "1", "link_type": "supports"}]), ALICE.did, CREATED, [])


def test_signed_submissions_batches_and_links() -> None:
    assert msgspec.convert({"record": {"kind": "entry"}}, api.SignedSubmission).record == {"kind": "entry"}
    assert "$.record" in refused(api.SignedSubmission, {"record": "text"})
    assert "$.entries" in refused(api.PostEntries, {"entries": []})
    assert "$.entries" in refused(api.PostEntries, {"entries": [{}] * (api.MAX_BATCH + 1)})
    link = msgspec.convert({"source": "1", "target": "2", "link_type": "supersedes"}, api.PostLink)
    assert link.annotation == ""
    assert "$.annotation" in refused(
        api.PostLink, {"source": "1", "target": "2", "link_type": "supports", "annotation": "a" * 1025}
    )


def test_query_types_bound_pages_and_hops() -> None:
    read = msgspec.convert({}, api.ReadQuery)
    assert (read.include_links, read.hops, read.direction, read.include_synthetic) == (True, 0, "both", False)
    assert "$.hops" in refused(api.ReadQuery, {"hops": api.MAX_HOPS + 1})
    assert "$.ids" in refused(api.ReadQuery, {"ids": ["1"] * (api.MAX_IDS + 1)})
    search = msgspec.convert({}, api.SearchQuery)
    assert (search.limit, search.offset, search.sort) == (20, 0, "default")
    assert "$.limit" in refused(api.SearchQuery, {"limit": api.MAX_PAGE + 1})
    assert "$.q" in refused(api.SearchQuery, {"q": "q" * (api.MAX_QUERY_CHARS + 1)})
    assert "$.min_trust" in refused(api.SearchQuery, {"min_trust": 1.5})
    assert msgspec.convert({}, api.InboxQuery).limit == 50


def test_subscription_tags_refuse_a_nul() -> None:
    assert msgspec.convert({"tags": ["home"]}, api.SubscriptionIn).tags == ["home"]
    assert "$.tags[0]" in refused(api.SubscriptionIn, {"tags": ["a\u0000b"]})
    assert "$.authors[0]" in refused(api.SubscriptionIn, {"authors": ["Alice"]})


def test_ack_needs_one_to_500_ids() -> None:
    assert msgspec.convert({"ids": [1, 2]}, api.AckIn).ids == [1, 2]
    assert "$.ids" in refused(api.AckIn, {"ids": []})
    assert "$.ids" in refused(api.AckIn, {"ids": list(range(api.MAX_ACK_IDS + 1))})


@pytest.mark.parametrize("name", ["alice", "a", "r2-d2_x", "0" + "a" * 63])
def test_agent_names_that_are_accepted(name: str) -> None:
    assert msgspec.convert({"name": name}, api.CreateAgent).name == name


@pytest.mark.parametrize("name", ["", "Alice", "-a", "_a", "a b", "a" * 65, "alice\n", "é"])
def test_agent_names_that_are_refused(name: str) -> None:
    assert "$.name" in refused(api.CreateAgent, {"name": name})


def test_key_proof_bodies() -> None:
    assert msgspec.convert({"agent_id": ALICE.did}, api.ChallengeIn).agent_id == ALICE.did
    assert "$.agent_id" in refused(api.ChallengeIn, {"agent_id": "alice"})
    session = {"agent_id": ALICE.did, "challenge": "c", "signature": "s"}
    assert msgspec.convert(session, api.SessionIn).challenge == "c"
    assert "$.signature" in refused(api.SessionIn, {**session, "signature": "s" * 129})


def test_a_problem_omits_an_absent_field() -> None:
    problem = api.Problem(type="t/x", title="X", status=422, code="x", detail="d")
    assert msgspec.json.decode(msgspec.json.encode(problem)) == {
        "type": "t/x",
        "title": "X",
        "status": 422,
        "code": "x",
        "detail": "d",
    }
    with_field = msgspec.json.encode(api.Problem(type="t/x", title="X", status=422, code="x", detail="d", field="$"))
    assert msgspec.json.decode(with_field)["field"] == "$"
