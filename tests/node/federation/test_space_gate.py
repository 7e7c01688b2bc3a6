"""What a node takes of a space's records from a peer (node/federation/space_gate.py): a real node's store and real
signed records, ingested as sync does. A host takes the valid ones (judged with the batch, so a batch that names
this node a host is taken whole); a node that does not host takes nothing; every refusal has its stable reason in
the peer's counters and is never remembered, so the record is taken once it can count."""

from __future__ import annotations

from typing import Any

from identity import canonical, keys, records
from identity.vouching import vouch
from node.federation.store import add_peer_txn
from node.service import Node
from node.spaces import store as space_store
from node.spaces.service import nonce
from sync.store import Outcome, Verified
from sync.verify import verify_record
from tests.node.api_helpers import entry_record

OWNER, WRITER, READER, STRANGER = (keys.SigningKey.from_seed(bytes([0x40 + i]) * 32) for i in range(4))
OTHER_NODE = keys.SigningKey.from_seed(b"\x4f" * 32).did
PEER = keys.SigningKey.from_seed(b"\x4e" * 32).did


def signed(key: keys.SigningKey, **body: Any) -> dict[str, Any]:
    return records.sign(
        {"schema_version": canonical.SCHEMA_VERSION, "author_id": key.did, "created_at": canonical.now_created_at(),
         **body},
        key,
    )  # fmt: skip


def creation() -> dict[str, Any]:
    return signed(OWNER, kind="space", name="family", description="", nonce=nonce())


def chain(kind: str, space: str, subject: str, role: str) -> dict[str, Any]:
    member = {"node": subject} if kind == "space_host" else {"member": subject}
    return signed(OWNER, kind=kind, space=space, role=role, seq=1, **member)


def post(key: keys.SigningKey, space: str, content: str) -> dict[str, Any]:
    return entry_record(key, content, created_ms=1_000_000_000_000, schema_version="v2", space=space)


async def ingest(node: Node, items: list[dict[str, Any]]) -> list[Outcome]:
    await node.db.write(lambda c: add_peer_txn(c, "http://127.0.0.1:9", PEER, node.now_ms()))
    verified = []
    for record in items:
        checked = verify_record(canonical.canonical_bytes(record), records.compute_hash(record))
        assert isinstance(checked, Verified), checked
        verified.append(checked)
    return await node.sync.ingest(PEER, verified, [], None)


async def reasons(node: Node) -> dict[str, int]:
    statuses = await node.sync.statuses()
    return next(s.counters.invalid_reasons for s in statuses if s.node_id == PEER)


async def held(node: Node, space: str) -> int:
    sql = "SELECT count(*) FROM records WHERE space = ?"
    return await node.db.read(lambda c: int(c.execute(sql, (space,)).fetchone()[0]))


async def test_a_batch_naming_this_node_a_host_is_taken_whole(node: Node) -> None:
    made = creation()
    space = records.compute_hash(made)
    batch = [
        made,
        chain("space_host", space, node.node_id, "host"),
        chain("space_member", space, WRITER.did, "writer"),
        post(WRITER, space, "a family note"),
    ]
    outcomes = await ingest(node, batch)
    assert [o.outcome for o in outcomes] == ["saved"] * 4
    assert await held(node, space) == 4
    assert await node.db.read(lambda c: space_store.hosts(c, space)) == [node.node_id]
    assert await node.db.read(lambda c: space_store.role(c, space, WRITER.did)) == "writer"


async def test_a_node_that_does_not_host_takes_nothing(node: Node) -> None:
    made = creation()
    space = records.compute_hash(made)
    batch = [made, chain("space_host", space, OTHER_NODE, "host"), post(OWNER, space, "for the hosts only")]
    outcomes = await ingest(node, batch)
    assert [(o.outcome, o.reason) for o in outcomes] == [("invalid", "not_hosted")] * 3
    assert await held(node, space) == 0 and await reasons(node) == {"not_hosted": 3}
    assert await node.db.read(lambda c: space_store.space(c, space)) is None


async def test_refusals_name_their_reason_and_a_refused_record_is_taken_once_it_counts(node: Node) -> None:
    made = creation()
    space = records.compute_hash(made)
    early = post(WRITER, space, "arrived before its space")
    assert [o.reason for o in await ingest(node, [early])] == ["not_hosted"]  # the space is not held: not hosted
    base = [made, chain("space_host", space, node.node_id, "host"), chain("space_member", space, READER.did, "reader")]
    reader_post = post(READER, space, "a reader writes")
    stranger_post = post(STRANGER, space, "nobody added me")
    outcomes = await ingest(node, [*base, reader_post, stranger_post, early])
    assert [(o.hash, o.reason) for o in outcomes if o.outcome == "invalid"] == [
        (records.compute_hash(reader_post), "not_a_writer"),
        (records.compute_hash(stranger_post), "space_undecided"),  # its addition may be on its way
        (records.compute_hash(early), "space_undecided"),
    ]
    assert await reasons(node) == {"not_hosted": 1, "not_a_writer": 1, "space_undecided": 2}
    assert await held(node, space) == 3
    added = chain("space_member", space, WRITER.did, "writer")
    outcomes = await ingest(node, [added, early])  # offered again (never remembered), now it counts
    assert [o.outcome for o in outcomes] == ["saved", "saved"]
    assert await held(node, space) == 5


async def test_a_host_takes_the_record_that_removes_it_and_then_nothing_of_the_space(node: Node) -> None:
    made = creation()
    space = records.compute_hash(made)
    here = chain("space_host", space, node.node_id, "host")
    assert [o.outcome for o in await ingest(node, [made, here])] == ["saved", "saved"]
    removal = signed(OWNER, kind="space_host", space=space, node=node.node_id, role="none", seq=2,
                     prior=records.compute_hash(here))  # fmt: skip
    other = chain("space_host", space, OTHER_NODE, "host")
    outcomes = await ingest(node, [removal, other, post(OWNER, space, "after the removal")])
    assert [(o.outcome, o.reason) for o in outcomes] == [("saved", None), ("invalid", "not_hosted"),
                                                          ("invalid", "not_hosted")]  # fmt: skip
    assert await node.db.read(lambda c: space_store.hosts(c, space)) == []


async def test_a_kept_resolution_decides_later_batches_and_never_outlives_a_removal(node: Node) -> None:
    """Posts are decided against the space's structure resolved once and kept (node/spaces/judged.py); a removal
    stored after changes what it was made from, so the removed writer's next post is refused, and so is everything
    once this node's own hosting is removed."""
    made = creation()
    space = records.compute_hash(made)
    here = chain("space_host", space, node.node_id, "host")
    added = chain("space_member", space, WRITER.did, "writer")
    assert [o.outcome for o in await ingest(node, [made, here, added])] == ["saved"] * 3
    judged = node.sync.authority.judged
    assert len(judged) == 0  # a batch moving the structure is judged whole, and kept nowhere
    assert [o.outcome for o in await ingest(node, [post(WRITER, space, "one")])] == ["saved"]
    assert len(judged) == 1  # the structure resolved for the batch of posts, kept for the next
    assert [o.outcome for o in await ingest(node, [post(WRITER, space, "two")])] == ["saved"]
    removal = signed(OWNER, kind="space_member", space=space, member=WRITER.did, role="none", seq=2,
                     prior=records.compute_hash(added), vouches=[vouch(WRITER.did, []).as_json()])  # fmt: skip
    assert [o.outcome for o in await ingest(node, [removal])] == ["saved"]
    late = await ingest(node, [post(WRITER, space, "three, after the removal")])
    assert [(o.outcome, o.reason) for o in late] == [("invalid", "unvouched")]
    assert [o.outcome for o in await ingest(node, [post(OWNER, space, "the owner still writes")])] == ["saved"]
    unhosted = signed(OWNER, kind="space_host", space=space, node=node.node_id, role="none", seq=2,
                      prior=records.compute_hash(here))  # fmt: skip
    assert [o.outcome for o in await ingest(node, [unhosted])] == ["saved"]
    after = await ingest(node, [post(OWNER, space, "after this node stopped hosting")])
    assert [(o.outcome, o.reason) for o in after] == [("invalid", "not_hosted")]
    assert len(judged) == 1  # one space, resolved again over its new inputs


async def hosted_space(node: Node, name: str) -> str:
    """A space this node hosts, with WRITER a writer of it, stored from the peer."""
    made = signed(OWNER, kind="space", name=name, description="", nonce=nonce())
    space = records.compute_hash(made)
    batch = [made, chain("space_host", space, node.node_id, "host"), chain("space_member", space, WRITER.did, "writer")]
    assert [o.outcome for o in await ingest(node, batch)] == ["saved"] * 3
    return space


def linking(space: str | None, content: str, target: dict[str, Any], link_type: str = "supports") -> dict[str, Any]:
    """WRITER's entry (of `space`, None: public) linking to `target`."""
    links = [{"target": records.compute_hash(target), "link_type": link_type, "annotation": ""}]
    extra: dict[str, Any] = {} if space is None else {"schema_version": "v2", "space": space}
    return entry_record(WRITER, content, created_ms=1_000_000_000_000, links=links, **extra)


def link_record(space: str, source: dict[str, Any], target: dict[str, Any]) -> dict[str, Any]:
    return signed(WRITER, kind="link", source=records.compute_hash(source), target=records.compute_hash(target),
                  link_type="supports", annotation="", space=space)  # fmt: skip


async def test_a_link_out_of_its_space_is_refused_in_every_arrival_order_and_stored_nowhere(node: Node) -> None:
    """A record of a space naming an entry of another space (both hosted here) is void, `link_across_spaces`,
    whether the entry arrived before, with it or after it (meanwhile it waits for its target: docs/sync.md)."""
    family, work = await hosted_space(node, "family"), await hosted_space(node, "work")
    source = post(WRITER, family, "a family note")
    assert [o.outcome for o in await ingest(node, [source])] == ["saved"]
    before, with_it, after = (post(WRITER, work, f"a work note {n}") for n in ("before", "with", "after"))
    assert [o.outcome for o in await ingest(node, [before])] == ["saved"]
    first = [linking(family, "names an entry held", before), link_record(family, source, before)]
    assert [(o.outcome, o.reason) for o in await ingest(node, first)] == [("invalid", "link_across_spaces")] * 2
    together = await ingest(node, [linking(family, "names an entry of its batch", with_it), with_it])
    assert [(o.outcome, o.reason) for o in together] == [("saved", None), ("invalid", "link_across_spaces")]
    early = linking(family, "names an entry not held yet", after)
    waits = await ingest(node, [early])
    assert [(o.outcome, o.reason) for o in waits] == [("invalid", "space_undecided")]
    assert [o.outcome for o in await ingest(node, [after])] == ["saved"]
    again = await ingest(node, [early])  # offered again (a refusal is never remembered): now it is decided
    assert [(o.outcome, o.reason) for o in again] == [("invalid", "link_across_spaces")]
    assert await held(node, family) == 3 + 1  # creation, hosting, member, the note: no link
    assert (await reasons(node))["link_across_spaces"] == 4


async def test_a_link_inside_its_space_or_to_a_public_entry_is_taken_once_its_target_is_held(node: Node) -> None:
    family = await hosted_space(node, "family")
    inside = post(WRITER, family, "the target, in the space")
    public = entry_record(WRITER, "a public note", created_ms=1_000_000_000_000)
    to_inside = linking(family, "names an entry of its space not held yet", inside)
    waits = await ingest(node, [to_inside])
    assert [(o.outcome, o.reason) for o in waits] == [("invalid", "space_undecided")]
    assert [o.outcome for o in await ingest(node, [inside, to_inside])] == ["saved", "saved"]
    assert [o.outcome for o in await ingest(node, [public])] == ["saved"]
    supports, supersedes = linking(family, "supports", public), linking(family, "supersedes", public, "supersedes")
    outcomes = await ingest(node, [supports, supersedes])  # a space's supersedes names only its own entries
    assert [(o.outcome, o.reason) for o in outcomes] == [("saved", None), ("invalid", "link_across_spaces")]
