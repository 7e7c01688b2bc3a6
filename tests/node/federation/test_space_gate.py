"""What a node takes of a space's records from a peer (node/federation/space_gate.py): a real node's store and real
signed records, ingested as sync does. A host takes the valid ones (judged with the batch, so a batch that names
this node a host is taken whole); a node that does not host takes nothing; every refusal has its stable reason in
the peer's counters and is never remembered, so the record is taken once it can count."""

from __future__ import annotations

import json
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
from tests.node.federation import v3_story

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


def message(space: str | None, body: str, depends_on: list[dict[str, Any]]) -> dict[str, Any]:
    """WRITER's bus message (of `space`, None: public) depending on the records `depends_on`."""
    extra: dict[str, Any] = {} if space is None else {"space": space}
    deps = sorted(records.compute_hash(r) for r in depends_on)
    return signed(WRITER, kind="message", message_type="note", body=body, payload={}, dependency_ids=deps,
                  tags=[WRITER.did], authority="raw", truth_state="fact", confidence=1, **extra)  # fmt: skip


def public_link_record(source: dict[str, Any], target: dict[str, Any]) -> dict[str, Any]:
    return signed(WRITER, kind="link", source=records.compute_hash(source), target=records.compute_hash(target),
                  link_type="supports", annotation="")  # fmt: skip


async def public_count(node: Node) -> int:
    sql = "SELECT count(*) FROM records WHERE space IS NULL AND kind IN ('entry', 'link', 'message', 'redaction')"
    return await node.db.read(lambda c: int(c.execute(sql).fetchone()[0]))


async def test_a_public_entry_linking_to_a_spaces_entry_is_refused(node: Node) -> None:
    """A public entry whose link names an entry of a space held here would carry its address to every node: refused
    `link_across_spaces`, held or arriving in the same batch, and nothing of it stored."""
    family = await hosted_space(node, "family")
    held_one, with_it = post(WRITER, family, "held"), post(WRITER, family, "in the same batch")
    assert [o.outcome for o in await ingest(node, [held_one])] == ["saved"]
    first = await ingest(node, [linking(None, "a public note naming a family note", held_one)])
    assert [(o.outcome, o.reason) for o in first] == [("invalid", "link_across_spaces")]
    together = await ingest(node, [linking(None, "names one of its batch", with_it), with_it])
    assert [(o.outcome, o.reason) for o in together] == [("saved", None), ("invalid", "link_across_spaces")]
    assert await public_count(node) == 0 and (await reasons(node))["link_across_spaces"] == 2


async def test_a_public_link_record_naming_a_spaces_entry_is_refused(node: Node) -> None:
    family = await hosted_space(node, "family")
    private, public = post(WRITER, family, "private"), entry_record(WRITER, "public", created_ms=1_000_000_000_000)
    assert [o.outcome for o in await ingest(node, [private, public])] == ["saved", "saved"]
    outcomes = await ingest(node, [public_link_record(public, private), public_link_record(private, public)])
    assert [(o.outcome, o.reason) for o in outcomes] == [("invalid", "link_across_spaces")] * 2
    assert await public_count(node) == 1  # the public entry alone


async def test_a_public_message_depending_on_a_spaces_entry_or_message_is_refused(node: Node) -> None:
    family = await hosted_space(node, "family")
    private_entry, private_message = post(WRITER, family, "private"), message(family, "private", [])
    assert [o.outcome for o in await ingest(node, [private_entry, private_message])] == ["saved", "saved"]
    outcomes = await ingest(node, [message(None, "on the entry", [private_entry]),
                                   message(None, "on the message", [private_message])])  # fmt: skip
    assert [(o.outcome, o.reason) for o in outcomes] == [("invalid", "link_across_spaces")] * 2
    assert await public_count(node) == 0


async def test_a_spaces_message_depending_on_another_spaces_record_is_refused(node: Node) -> None:
    """Dependencies stay inside their space, as links: one on a record of another space is refused; one on a record
    of its own space or a public one is taken; one on an address not held is taken (a dependency id need not name a
    record, so it waits for nothing)."""
    family, work = await hosted_space(node, "family"), await hosted_space(node, "work")
    at_work, public = post(WRITER, work, "a work note"), entry_record(WRITER, "public", created_ms=1_000_000_000_000)
    at_home = post(WRITER, family, "a family note")
    assert [o.outcome for o in await ingest(node, [at_work, public, at_home])] == ["saved"] * 3
    across = await ingest(node, [message(family, "on a work note", [at_work])])
    assert [(o.outcome, o.reason) for o in across] == [("invalid", "link_across_spaces")]
    unknown = entry_record(WRITER, "never sent here", created_ms=1_000_000_000_000)
    inside = await ingest(node, [message(family, "on its own and public", [at_home, public, unknown])])
    assert [o.outcome for o in inside] == ["saved"]


async def test_a_public_redaction_naming_a_spaces_entry_is_refused(node: Node) -> None:
    family = await hosted_space(node, "family")
    private = post(WRITER, family, "private")
    assert [o.outcome for o in await ingest(node, [private])] == ["saved"]
    redaction = signed(WRITER, kind="redaction", target=records.compute_hash(private))
    outcomes = await ingest(node, [redaction])
    assert [(o.outcome, o.reason) for o in outcomes] == [("invalid", "link_across_spaces")]
    assert await public_count(node) == 0 and await held(node, family) == 4


async def test_a_public_record_stored_before_the_spaces_entry_it_names_is_voided_when_that_arrives(
    node: Node,
) -> None:
    """A public record naming an address not held is stored (public links resolve later: the node cannot know);
    when the address arrives as an entry of a space hosted here, the record is flagged void, `space_link_across_spaces`,
    and leaves every projection and what peers are served: the space's hosts agree whatever the order."""
    family = await hosted_space(node, "family")
    private = post(WRITER, family, "arrives after")
    public = entry_record(WRITER, "a public note", created_ms=1_000_000_000_000)
    naming, link = linking(None, "names an address not held yet", private), public_link_record(public, private)
    assert [o.outcome for o in await ingest(node, [public, naming, link])] == ["saved", "pending_link", "pending_link"]
    assert [o.outcome for o in await ingest(node, [private])] == ["saved"]
    sql = "SELECT hash, reason FROM void_records ORDER BY seq"
    flagged = await node.db.read(lambda c: [tuple(r) for r in c.execute(sql).fetchall()])
    assert flagged == [(records.compute_hash(r), "space_link_across_spaces") for r in (naming, link)]
    shown = "SELECT (SELECT count(*) FROM entries WHERE space IS NULL), (SELECT count(*) FROM links)"
    assert await node.db.read(lambda c: tuple(c.execute(shown).fetchone())) == (1, 0)  # the public note alone


async def test_a_link_to_an_entry_its_own_space_voids_is_decided_not_left_waiting(node: Node) -> None:
    """An entry its space voids (a removed writer's unvouched post) is refused here; a link of the space naming it,
    arriving later, is decided by that entry's record (of this space: taken, its target unresolved), as on a host that
    stored the entry before the removal, instead of waiting for a target that will never be taken here."""
    family = await hosted_space(node, "family")
    added = await node.db.read(lambda c: c.execute(
        "SELECT body FROM records WHERE kind = 'space_member' AND space = ?", (family,)).fetchone()[0])  # fmt: skip
    prior = records.compute_hash(json.loads(added))
    removal = signed(OWNER, kind="space_member", space=family, member=WRITER.did, role="none", seq=2, prior=prior,
                     vouches=[vouch(WRITER.did, []).as_json()])  # fmt: skip
    assert [o.outcome for o in await ingest(node, [removal])] == ["saved"]
    unvouched = post(WRITER, family, "signed before the removal, vouched for by nobody")
    assert [(o.outcome, o.reason) for o in await ingest(node, [unvouched])] == [("invalid", "unvouched")]
    links = [{"target": records.compute_hash(unvouched), "link_type": "responds_to", "annotation": ""}]
    reply = entry_record(OWNER, "the owner answers it", created_ms=1_000_000_000_000, links=links,
                         schema_version="v2", space=family)  # fmt: skip
    outcomes = await ingest(node, [reply])
    assert [o.outcome for o in outcomes] == ["pending_link"]  # stored; its target is never taken here
    other = await hosted_space(node, "work")
    across = entry_record(OWNER, "from another space", created_ms=1_000_000_000_000, links=links,
                          schema_version="v2", space=other)  # fmt: skip
    refused = await ingest(node, [across])
    assert [(o.outcome, o.reason) for o in refused] == [("invalid", "link_across_spaces")]


async def test_a_link_to_an_entry_refused_in_its_own_batch_is_decided_too(node: Node) -> None:
    family = await hosted_space(node, "family")
    reader = chain("space_member", family, READER.did, "reader")
    assert [o.outcome for o in await ingest(node, [reader])] == ["saved"]
    by_reader = post(READER, family, "a reader may not write")
    links = [{"target": records.compute_hash(by_reader), "link_type": "supports", "annotation": ""}]
    reply = entry_record(WRITER, "names it", created_ms=1_000_000_000_000, links=links, schema_version="v2",
                         space=family)  # fmt: skip
    outcomes = {o.hash: (o.outcome, o.reason) for o in await ingest(node, [by_reader, reply])}
    assert outcomes == {records.compute_hash(by_reader): ("invalid", "not_a_writer"),
                        records.compute_hash(reply): ("pending_link", None)}  # fmt: skip


async def test_a_link_to_an_entry_void_by_its_key_is_decided_not_left_waiting(node: Node) -> None:
    """The same for an entry refused as void by its key (a rotation vouching for none of the old key's records): its
    space is remembered when the key-event gate refuses it, and a link of the space naming it is stored."""
    family = await hosted_space(node, "family")
    author = v3_story.A0
    assert [o.outcome for o in await ingest(node, [chain("space_member", family, author.did, "writer")])] == ["saved"]
    rotation = v3_story.key_event(author, "rotate", 1, installs=v3_story.A1, vouches=[vouch(author.did, [])],
                                  author=author.did)  # fmt: skip
    assert [o.outcome for o in await ingest(node, [rotation])] == ["saved"]
    thief = post(author, family, "signed by the rotated-out key, vouched for by nobody")
    assert [o.outcome for o in await ingest(node, [thief])] == ["void"]
    links = [{"target": records.compute_hash(thief), "link_type": "responds_to", "annotation": ""}]
    reply = entry_record(OWNER, "the owner answers it", created_ms=1_000_000_000_000, links=links,
                         schema_version="v2", space=family)  # fmt: skip
    assert [o.outcome for o in await ingest(node, [reply])] == ["pending_link"]


async def test_a_link_to_a_redacted_entry_is_decided_by_its_tombstone(node: Node) -> None:
    """A redacted entry's body is gone from the log; its tombstone keeps its space, so a link of the space naming it
    is stored rather than left waiting, and one of another space refused."""
    family, work = await hosted_space(node, "family"), await hosted_space(node, "work")
    target = post(WRITER, family, "a secret, soon redacted")
    redaction = signed(WRITER, kind="redaction", target=records.compute_hash(target), space=family)
    assert [o.outcome for o in await ingest(node, [target])] == ["saved"]
    assert [o.outcome for o in await ingest(node, [redaction])] == ["saved"]
    gone = "SELECT count(*) FROM records WHERE hash = ?"
    assert await node.db.read(lambda c: c.execute(gone, (records.compute_hash(target),)).fetchone()[0]) == 0
    assert [o.outcome for o in await ingest(node, [linking(family, "names it", target)])] == ["pending_link"]
    across = await ingest(node, [linking(work, "names it from another space", target)])
    assert [(o.outcome, o.reason) for o in across] == [("invalid", "link_across_spaces")]


async def test_a_public_redaction_stored_before_the_spaces_entry_it_names_is_voided_when_that_arrives(
    node: Node,
) -> None:
    """A public redaction naming an address not held is stored (a redaction never waits for its target); when the
    address arrives as an entry of a space hosted here, the entry is stored (the redaction is not of its space) and
    the redaction flagged void, as a host that had the entry first refuses it."""
    family = await hosted_space(node, "family")
    private = post(WRITER, family, "arrives after")
    redaction = signed(WRITER, kind="redaction", target=records.compute_hash(private))
    assert [o.outcome for o in await ingest(node, [redaction])] == ["saved"]
    assert [o.outcome for o in await ingest(node, [private])] == ["saved"]
    sql = "SELECT hash, reason FROM void_records"
    flagged = await node.db.read(lambda c: [tuple(r) for r in c.execute(sql).fetchall()])
    assert flagged == [(records.compute_hash(redaction), "space_link_across_spaces")]
    assert await held(node, family) == 4 and await public_count(node) == 1  # kept in the log, flagged
    assert [o.outcome for o in await ingest(node, [private])] == ["duplicate"]


async def test_a_public_message_stored_before_the_spaces_record_it_depends_on_is_voided_when_that_arrives(
    node: Node,
) -> None:
    """A public message whose dependency names an address not held is stored; when the address arrives as a record
    of a space hosted here, the message is flagged void and leaves the bus, as a host holding the record refuses it."""
    family = await hosted_space(node, "family")
    private = message(family, "arrives after", [])
    public = message(None, "depends on it", [private, entry_record(WRITER, "never sent", created_ms=1_000_000_000_000)])
    assert [o.outcome for o in await ingest(node, [public])] == ["saved"]
    assert [o.outcome for o in await ingest(node, [private])] == ["saved"]
    sql = "SELECT hash, reason FROM void_records"
    flagged = await node.db.read(lambda c: [tuple(r) for r in c.execute(sql).fetchall()])
    assert flagged == [(records.compute_hash(public), "space_link_across_spaces")]
    bus = "SELECT record_hash FROM messages"
    assert await node.db.read(lambda c: [r[0] for r in c.execute(bus)]) == [records.compute_hash(private)]
