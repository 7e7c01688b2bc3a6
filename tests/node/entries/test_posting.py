"""node/entries/posting.py: posting one entry, a batch, and an entry with derived links (`post_with`), called directly.

The REST edge of the same paths is tested in test_post_read.py, test_batch.py, test_links_retract.py and
test_merged_posts.py; these call the service as default mode and the CLI do.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Awaitable, Callable

import pytest

from identity import records
from node.entries.posting import KEPT_KEYS_ONLY
from node.entries.queries import EntryOut
from node.errors import Conflict, Forbidden, InvalidInput, Located, NotFound
from node.service import Node
from node.store.conn import Conn
from node.store.sealing import MAX_HASH_RETRIES
from tests.conftest import AgentCreds, FakeClock
from tests.node.api_helpers import count, entry_record, self_signer
from wire.api import LinkSpec, PostEntry, ReadQuery, SignedSubmission

MakeAgent = Callable[[str], Awaitable[AgentCreds]]


def finding(content: str, **fields: object) -> PostEntry:
    return PostEntry(entry_type="finding", performative="inform", content=content, **fields)  # type: ignore[arg-type]


async def derived_links(node: Node, source: str) -> list[tuple[str, str]]:
    def run(conn: sqlite3.Connection) -> list[tuple[str, str]]:
        rows = conn.execute(
            "SELECT target_hash, author_id FROM links WHERE source_hash = ? AND link_type = 'derived_from'"
            " AND ordinal >= 0 ORDER BY target_hash",
            (source,),
        )
        return [(r[0], r[1]) for r in rows]

    return await node.db.read(run)


def test_located_names_the_field_under_the_item() -> None:
    with pytest.raises(InvalidInput) as caught, Located("$.entries[2]"):
        raise InvalidInput("bad", field="$.links[0].target")
    assert caught.value.field == "$.entries[2].links[0].target"
    with pytest.raises(InvalidInput) as unnamed, Located("$.entries[1]"):
        raise InvalidInput("bad")
    assert unnamed.value.field == "$.entries[1]"
    with pytest.raises(InvalidInput) as top, Located("$"):
        raise InvalidInput("bad", field="$.content")
    assert top.value.field == "$.content"


async def test_post_signs_stores_and_replays_by_key(node: Node, make_agent: MakeAgent) -> None:
    alice = await make_agent("alice")
    entry, created = await node.entries.post(alice.agent_id, finding("first words"), "k1")
    assert created and entry.author_id == alice.agent_id and entry.content == "first words"
    again, created_again = await node.entries.post(alice.agent_id, finding("other words, same key"), "k1")
    assert (again.id, created_again, again.content) == (entry.id, False, "first words")
    assert await count(node, "entries") == 1


async def test_post_of_an_author_signed_record(node: Node) -> None:
    bob = await self_signer(node, "bob")
    record = entry_record(bob.key, "signed by bob", created_ms=node.now_ms())
    entry, created = await node.entries.post(bob.agent_id, SignedSubmission(record=record), None)
    assert created and entry.record_hash == records.compute_hash(record) and entry.signature == record["signature"]
    with pytest.raises(InvalidInput) as caught:
        await node.entries.post(bob.agent_id, finding("bob has no key here"), None)
    assert caught.value.code == "agent_signs_own_records"


async def test_same_words_same_millisecond_different_fields_move_one_millisecond(
    node: Node, make_agent: MakeAgent
) -> None:
    alice = await make_agent("alice")
    first, _ = await node.entries.post(alice.agent_id, finding("+1", tags=["x"]), None)
    second, created = await node.entries.post(alice.agent_id, finding("+1", tags=["y"]), None)
    assert created and second.id != first.id and second.created_at > first.created_at
    same, created_again = await node.entries.post(alice.agent_id, finding("+1", tags=["x"]), None)
    assert (same.id, created_again) == (first.id, False)


async def test_a_taken_hash_moves_until_free_then_409(node: Node, make_agent: MakeAgent) -> None:
    """Other records with the same hashed fields (author, time, type, performative, content) hold this
    millisecond and the next ones: each retry, 1 ms later, finds its hash taken again, until the node gives up."""
    alice = await make_agent("alice")
    key = await node.sealing.signer(alice.agent_id)
    now = node.now_ms()
    for ms in range(now, now + MAX_HASH_RETRIES + 1):
        taken = entry_record(key, "crowded millisecond", created_ms=ms, tags=["another body"])
        await node.entries.post(alice.agent_id, SignedSubmission(record=taken), None)
    stored = await count(node, "entries")
    with pytest.raises(Conflict) as caught:
        await node.entries.post(alice.agent_id, finding("crowded millisecond"), None)
    assert caught.value.code == "hash_taken"
    assert await count(node, "entries") == stored


async def test_post_batch_refuses_a_key_used_twice(node: Node, make_agent: MakeAgent) -> None:
    alice = await make_agent("alice")
    bodies: list[PostEntry | SignedSubmission] = [
        finding("one", idempotency_key="same"),
        finding("two"),
        finding("three", idempotency_key="same"),
    ]
    with pytest.raises(InvalidInput) as caught:
        await node.entries.post_batch(alice.agent_id, bodies)
    assert (caught.value.code, caught.value.field) == ("idempotency_key_repeated", "$.entries[2].idempotency_key")
    assert await count(node, "entries") == 0


async def test_post_batch_names_the_bad_item_and_stores_nothing(node: Node, make_agent: MakeAgent) -> None:
    alice = await make_agent("alice")
    bodies: list[PostEntry | SignedSubmission] = [
        finding("fine"),
        finding("links nowhere", links=[LinkSpec(target="no-such-entry", link_type="supports")]),
    ]
    with pytest.raises(NotFound) as caught:
        await node.entries.post_batch(alice.agent_id, bodies)
    assert (caught.value.code, caught.value.field) == ("target_not_found", "$.entries[1].links[0].target")
    assert str(caught.value) == "link target 'no-such-entry' is not a known entry id or a record hash"
    assert await count(node, "entries") == 0


async def test_retractions_are_entries_of_their_own_author(node: Node, make_agent: MakeAgent) -> None:
    alice, bob = await make_agent("alice"), await make_agent("bob")
    hasty, _ = await node.entries.post(alice.agent_id, finding("hasty"), None)
    withdraw = PostEntry(
        entry_type="finding",
        performative="retract",
        content="withdrawn",
        links=[LinkSpec(target=hasty.record_hash, link_type="supersedes")],
    )
    with pytest.raises(Forbidden) as not_own:
        await node.entries.post(bob.agent_id, withdraw, None)
    assert (not_own.value.code, not_own.value.field) == ("retract_not_own", "$.links[0].target")
    retraction, created = await node.entries.post(alice.agent_id, withdraw, None)
    assert created and retraction.performative == "retract"
    read = await node.reads.read([str(hasty.id)], ReadQuery(include_links=False), viewer=None)
    assert read.entries[0].retracted
    with pytest.raises(InvalidInput) as no_target:
        await node.entries.post(alice.agent_id, PostEntry("finding", "retract", "withdrawing nothing"), None)
    assert (no_target.value.code, no_target.value.field) == ("retract_without_target", "$.links")


async def test_post_with_adds_derived_links_and_the_callers_mark_in_one_transaction(
    node: Node, make_agent: MakeAgent
) -> None:
    alice = await make_agent("alice")
    first, _ = await node.entries.post(alice.agent_id, finding("evidence one"), None)
    second, _ = await node.entries.post(alice.agent_id, finding("evidence two"), None)
    marked: list[int] = []

    def mark(conn: Conn, entry: EntryOut) -> None:
        marked.append(entry.id)

    targets = [first.record_hash, second.record_hash]
    entry, created = await node.entries.post_with(
        alice.agent_id, finding("derived"), "promote-1", derived_from=targets, then=mark
    )
    assert created and marked == [entry.id]
    assert await derived_links(node, entry.record_hash) == sorted((t, alice.agent_id) for t in targets)

    # a replay of the key answers with the entry and adds no second link
    again, created_again = await node.entries.post_with(
        alice.agent_id, finding("derived"), "promote-1", derived_from=targets, then=mark
    )
    assert (again.id, created_again) == (entry.id, False) and marked == [entry.id, entry.id]
    assert len(await derived_links(node, entry.record_hash)) == 2


async def test_post_with_rolls_everything_back_when_the_mark_fails(node: Node, make_agent: MakeAgent) -> None:
    alice = await make_agent("alice")
    evidence, _ = await node.entries.post(alice.agent_id, finding("evidence"), None)
    before = await count(node, "records")

    def refuse(conn: Conn, entry: EntryOut) -> None:
        raise Conflict("the caller changed its mind", code="changed_mind")

    with pytest.raises(Conflict):
        await node.entries.post_with(
            alice.agent_id, finding("never stored"), "k", derived_from=[evidence.record_hash], then=refuse
        )
    assert await count(node, "records") == before


async def test_post_with_links_only_for_agents_whose_key_is_kept(node: Node, clock: FakeClock) -> None:
    bob = await self_signer(node, "bob")
    record = entry_record(bob.key, "signed by bob", created_ms=node.now_ms())
    with pytest.raises(InvalidInput) as caught:
        await node.entries.post_with(
            bob.agent_id, SignedSubmission(record=record), "k", derived_from=["f" * 64], then=lambda c, e: None
        )
    assert (caught.value.code, str(caught.value)) == ("agent_signs_own_records", KEPT_KEYS_ONLY)
    entry, created = await node.entries.post_with(
        bob.agent_id, SignedSubmission(record=record), "k", derived_from=[], then=lambda c, e: None
    )
    assert created and entry.record_hash == records.compute_hash(record)


@pytest.mark.parametrize("performative", ["inform", "retract"])
async def test_a_batch_entry_superseded_in_its_own_batch_answers_as_read(node: Node, performative: str) -> None:
    """A batch whose later entry supersedes (or retracts) an earlier one: the earlier one's answer is not the state
    of a fresh entry (`states_known` declines) but what a read of it shows."""
    bob = await self_signer(node, "bob")
    first = entry_record(bob.key, "first take", created_ms=node.now_ms())
    second = entry_record(
        bob.key,
        "second take",
        created_ms=node.now_ms(),
        performative=performative,
        links=[{"target": records.compute_hash(first), "link_type": "supersedes", "annotation": ""}],
    )
    posted = await node.entries.post_batch(
        bob.agent_id, [SignedSubmission(record=first), SignedSubmission(record=second)]
    )
    (old, _), (new, _) = posted
    assert (old.superseded, old.retracted) == ((True, False) if performative == "inform" else (False, True))
    read = await node.reads.read([str(old.id), str(new.id)], ReadQuery(include_links=False), viewer=None)
    assert sorted(read.entries, key=lambda e: e.id) == [old, new]
