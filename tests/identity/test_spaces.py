"""Spaces (`identity.spaces`): the rules of docs/format-v3.md section 4, each with a test, the hard cases of issue 37
decided as docs/decisions.md record 62 says, the vectors' space decided the same in every order of its records, and
hypothesis tests that random spaces give the same members, roles and verdicts for every arrival order and batching
of the same records, through a node that stores valid records, keeps undecided ones waiting and forgets void ones."""

from __future__ import annotations

import hashlib
import json
from itertools import permutations
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from identity import canonical, key_history, keys, vouching
from identity.keys import SigningKey
from identity.space_rules import may_read
from identity.spaces import Decision, Held, Spaces, key_verdicts, resolve
from tests.identity import format_v3_vectors as make

K = [SigningKey.from_seed(bytes([0x60 + i]) * 32).did for i in range(10)]
A, C, D, B, E, N = K[0], K[1], K[2], K[3], K[4], K[5]  # the owner, two admins, two members, a node
REVOKED, UNKNOWN = K[7], K[8]  # keys the tests' key verdicts find void / do not know
WHEN = "2026-03-01T09:00:00Z"


def _held(record: dict[str, Any]) -> Held:
    address = make.address(record)
    version = canonical.sha256_hex(canonical.canonical_bytes(record)) if record["kind"] == "entry" else address
    return Held(address, version, record)


def _space(owner: str = A, name: str = "K\u00fcche", **extra: Any) -> Held:
    record = {
        "kind": "space",
        "schema_version": "v1",
        "author_id": owner,
        "created_at": WHEN,
        "name": name,
        "description": "",
        "nonce": keys.b64u(hashlib.sha256(name.encode()).digest()),
        "signature": "-",
    }
    return _held(record | extra)


SPACE = _space()


def _chain(
    kind: str,
    author: str,
    subject: str,
    role: str,
    prior: Held | None = None,
    vouched: list[Held] | None = None,
    space: Held = SPACE,
    **extra: Any,
) -> Held:
    """A membership (`space_member`, `space_admin`) or hosting record; `vouched` the subject's records it keeps."""
    record: dict[str, Any] = {
        "kind": kind,
        "schema_version": "v1",
        "author_id": author,
        "created_at": WHEN,
        "space": space.address,
        "node" if kind == "space_host" else "member": subject,
        "role": role,
        "seq": 1 if prior is None else prior.record["seq"] + 1,
        "signature": "-",
    }
    if prior is not None:
        record["prior"] = prior.address
    if vouched is not None:
        record["vouches"] = [vouching.vouch(subject, [h.version for h in vouched]).as_json()]
    return _held(record | extra)


def _member(author: str, member: str, role: str, prior: Held | None = None, **extra: Any) -> Held:
    return _chain("space_member", author, member, role, prior, **extra)


def _admin(author: str, member: str, role: str, prior: Held | None = None, **extra: Any) -> Held:
    return _chain("space_admin", author, member, role, prior, **extra)


def _host(author: str, node: str, role: str, prior: Held | None = None, **extra: Any) -> Held:
    return _chain("space_host", author, node, role, prior, **extra)


def _post(author: str, content: str, created_at: str = WHEN, space: Held = SPACE, **extra: Any) -> Held:
    record: dict[str, Any] = {
        "kind": "entry",
        "schema_version": "v2",
        "author_id": author,
        "created_at": created_at,
        "entry_type": "finding",
        "performative": "inform",
        "content": content,
        "confidence": 0.9,
        "tags": [],
        "directed_to": [],
        "links": [],
        "metadata": {},
        "truth_state": "fact",
        "authority": "raw",
        "scope": "federation",
        "space": space.address,
        "signature": "-",
    }
    return _held(record | extra)


def _pages(event: Held, subject: str | None = None) -> list[Held]:
    """Every vouch page of `event`'s vouch, signed as the event is."""
    record = event.record
    subject = subject or record["member"]
    vouch = vouching.vouch_for(record, subject)
    assert vouch is not None
    # the pages of a vouch are built from its set: the tests know it as the versions the record was made with
    members = _SETS[event.address]
    out = []
    for index in range(vouching.page_count(vouch.count)):
        versions, proof = vouching.page(members, index)
        page = {
            "kind": "vouch_page",
            "schema_version": "v1",
            "author_id": record["author_id"],
            "created_at": WHEN,
            "event": event.address,
            "subject": subject,
            "page": index,
            "versions": versions,
            "proof": proof,
            "space": record["space"],
            "signature": "-",
        }
        if "signing_key" in record:
            page["signing_key"] = record["signing_key"]
        out.append(_held(page))
    return out


_SETS: dict[str, list[str]] = {}


def _lowering(
    kind: str, author: str, subject: str, role: str, prior: Held | None, vouched: list[Held], **extra: Any
) -> Held:
    """A record lowering `subject`'s role, vouching for `vouched`; its pages come from `_pages`."""
    held = _chain(kind, author, subject, role, prior, vouched=vouched, **extra)
    _SETS[held.address] = vouching.sorted_versions(h.version for h in vouched)
    return held


def _keys(version: str, record: dict[str, Any]) -> key_history.KeyVerdict:
    """Key verdicts of the tests: the REVOKED key's records are void, the UNKNOWN key's undecided, others valid."""
    signer = key_history.signer_of(record)
    return "void" if signer == REVOKED else "undecided" if signer == UNKNOWN else "valid"


def _resolve(*records: Held) -> Spaces:
    return resolve(list(records), _keys)


def _decision(result: Spaces, held: Held) -> Decision:
    return result.decisions[held.version]


def _verdicts(result: Spaces, *records: Held) -> list[str]:
    return [result.verdict(h.version) for h in records]


# ---- 4.1 creation ------------------------------------------------------------------------------------------------


def test_the_owner_holds_every_role_and_the_space_is_its_creations_address() -> None:
    result = _resolve(SPACE, post := _post(A, "the owner posts"))
    space = result.spaces[SPACE.address]
    assert space.id == SPACE.address and space.owner == A
    assert space.roles == {A: "owner"} and space.may_read(A) and not space.may_read(B)
    assert result.verdict(post.version) == "valid" and result.verdict(SPACE.version) == "valid"


def test_records_of_a_space_whose_creation_is_not_held_wait_for_it() -> None:
    add, post = _member(A, B, "writer"), _post(A, "early")
    result = _resolve(add, post)
    assert result.spaces == {} and result.role(SPACE.address, B) == "none"
    for held in (add, post):
        assert _decision(result, held) == Decision("undecided", None, frozenset({f"space:{SPACE.address}"}))
    assert _verdicts(_resolve(add, post, SPACE), add, post) == ["valid", "valid"]


def test_a_creation_signed_by_a_void_key_voids_its_space() -> None:
    space = _space(signing_key=REVOKED)
    add = _member(A, B, "writer", space=space)
    result = _resolve(space, add)
    assert result.verdict(space.version) == "void" and _decision(result, add).reason == "void_space"
    assert result.spaces == {}
    assert result.moderator(space.address, A, "0" * 64).reason == "void_space"
    assert result.moderator(SPACE.address, A, "0" * 64).waits_for == {f"space:{SPACE.address}"}
    waiting = _space(signing_key=UNKNOWN)
    later = _member(A, B, "writer", space=waiting)
    assert _decision(_resolve(waiting, later), later).waits_for == {f"space:{waiting.address}"}


def test_a_record_given_twice_counts_once() -> None:
    make_c, add = _admin(A, C, "admin"), _member(A, B, "writer")
    result = _resolve(SPACE, make_c, make_c, add, add, SPACE)
    assert _verdicts(result, make_c, add) == ["valid", "valid"]
    assert result.spaces[SPACE.address].admin_chains == {C: (make_c.address,)}


def test_two_spaces_of_one_owner_are_two_spaces() -> None:
    other = _space(name="Garten")
    add = _member(A, B, "writer", space=other)
    result = _resolve(SPACE, other, add)
    assert result.role(other.address, B) == "writer" and result.role(SPACE.address, B) == "none"


# ---- 4.2 and 4.3 the chains and who may change them ----------------------------------------------------------------


def test_a_member_added_by_the_owner_writes_and_a_reader_reads_only() -> None:
    add_b, add_e = _member(A, B, "writer"), _member(A, E, "reader")
    by_b, by_e = _post(B, "from B"), _post(E, "from E")
    result = _resolve(SPACE, add_b, add_e, by_b, by_e)
    assert result.spaces[SPACE.address].roles == {A: "owner", B: "writer", E: "reader"}
    assert result.spaces[SPACE.address].may_read(E)
    assert result.verdict(by_b.version) == "valid"
    assert _decision(result, by_e) == Decision("void", "not_a_writer")


def test_an_admin_manages_member_chains_but_no_admin_chain() -> None:
    make_c = _admin(A, C, "admin")
    add_b = _member(C, B, "writer")
    c_makes_d = _admin(C, D, "admin")
    b_adds_e = _member(B, E, "writer")  # a writer is no admin
    result = _resolve(SPACE, make_c, add_b, c_makes_d, b_adds_e)
    assert result.role(SPACE.address, C) == "admin" and result.role(SPACE.address, B) == "writer"
    assert _decision(result, c_makes_d).reason == "unauthorized_membership"
    assert result.role(SPACE.address, D) == "none" and result.role(SPACE.address, E) == "none"
    # B has no admin chain: its promotion may be on its way, so its change waits; once B's admin chain is decided
    # without a role (its only record void here), the change is void
    assert _decision(result, b_adds_e).waits_for == {f"member:{SPACE.address}:{B}"}
    refused = _admin(A, B, "admin", signing_key=REVOKED)
    decided = _resolve(SPACE, make_c, add_b, b_adds_e, refused)
    assert _decision(decided, b_adds_e).reason == "unauthorized_membership"


def test_an_admin_posts_and_hosts() -> None:
    make_c = _admin(A, C, "admin")
    post, host = _post(C, "from the admin"), _host(C, N, "host")
    result = _resolve(SPACE, make_c, post, host)
    assert _verdicts(result, post, host) == ["valid", "valid"]
    assert result.spaces[SPACE.address].hosts == {N}
    assert (
        result.moderator(SPACE.address, C, "0" * 64)
        == result.moderator(SPACE.address, A, "0" * 64)
        == Decision("valid")
    )
    assert result.moderator(SPACE.address, B, "0" * 64).waits_for == {f"member:{SPACE.address}:{B}"}


def test_a_member_may_only_lower_itself_to_none() -> None:
    add = _member(A, B, "reader")
    leave = _lowering("space_member", B, B, "none", add, [])
    raise_self = _member(B, B, "writer", prior=add)
    no_admin = _admin(A, B, "admin", signing_key=REVOKED)  # B's admin chain decided: B is no admin
    result = _resolve(SPACE, add, leave, raise_self, no_admin)
    assert result.verdict(leave.version) == "valid" and result.role(SPACE.address, B) == "none"
    assert _decision(result, raise_self).reason == "unauthorized_membership"
    writer = _member(A, B, "writer")
    to_reader = _lowering("space_member", B, B, "reader", writer, [])  # lowering, but only to none
    assert _decision(_resolve(SPACE, writer, to_reader, no_admin), to_reader).reason == "unauthorized_membership"
    # without anything of B's admin chain held, B's change waits: its promotion may be on its way
    assert _decision(_resolve(SPACE, writer, to_reader), to_reader).waits_for == {f"member:{SPACE.address}:{B}"}


def test_an_admin_leaves_its_admin_chain_but_signs_nothing_else_in_it() -> None:
    make_c = _admin(A, C, "admin")
    leave = _lowering("space_admin", C, C, "none", make_c, [])
    result = _resolve(SPACE, make_c, leave)
    assert result.verdict(leave.version) == "valid" and result.role(SPACE.address, C) == "none"
    after = _admin(C, C, "admin", prior=leave)  # an agent does not make itself admin again
    assert _decision(_resolve(SPACE, make_c, leave, after), after).reason == "unauthorized_membership"
    first_by_self = _admin(C, C, "admin")
    assert _decision(_resolve(SPACE, first_by_self), first_by_self).reason == "unauthorized_membership"


def test_the_owner_has_no_chain() -> None:
    as_member, as_admin = _member(A, A, "writer"), _admin(A, A, "admin")
    result = _resolve(SPACE, as_member, as_admin)
    assert {_decision(result, h).reason for h in (as_member, as_admin)} == {"unauthorized_membership"}


def test_a_vouch_exactly_on_a_lowering() -> None:
    add = _member(A, B, "writer")
    no_vouch = _member(A, B, "reader", prior=add)
    reader = _lowering("space_member", A, B, "reader", add, [])
    raise_with_vouch = _lowering("space_member", A, B, "writer", reader, [])
    result = _resolve(SPACE, add, no_vouch, reader, raise_with_vouch)
    assert _decision(result, no_vouch).reason == "missing_vouch"
    assert result.verdict(reader.version) == "valid"
    assert _decision(result, raise_with_vouch).reason == "unexpected_vouch"
    make_c = _admin(A, C, "admin")
    gone = _lowering("space_admin", A, C, "none", make_c, [])
    gone_again = _lowering("space_admin", A, C, "none", gone, [])  # not a lowering: nothing left to take
    assert _decision(_resolve(SPACE, make_c, gone, gone_again), gone_again).reason == "unexpected_vouch"


def test_seq_and_prior() -> None:
    add = _member(A, B, "writer")
    skipped = _member(A, B, "reader", prior=add, seq=3)
    after_skipped = _member(A, B, "writer", prior=skipped)
    orphan = _member(A, B, "reader", prior=_member(A, B, "writer", created_at="2026-03-02T00:00:00Z"))
    result = _resolve(SPACE, add, skipped, after_skipped, orphan)
    assert _decision(result, skipped).reason == "bad_seq"
    assert _decision(result, after_skipped).reason == "prior_void"
    assert _decision(result, orphan) == Decision("undecided", None, frozenset({f"event:{orphan.record['prior']}"}))
    assert result.spaces[SPACE.address].member_chains == {B: (add.address,)}


# ---- 4.4 concurrent changes --------------------------------------------------------------------------------------


def test_two_admins_changing_one_member_at_once_the_removal_wins() -> None:
    make_c, make_d = _admin(A, C, "admin"), _admin(A, D, "admin")
    add = _member(A, B, "writer")
    by_c = _member(C, B, "reader", prior=add, vouches=[vouching.vouch(B, []).as_json()])
    by_d = _lowering("space_member", D, B, "none", add, [])
    on_loser = _member(C, B, "writer", prior=by_c)  # C builds on its lost change
    records = [SPACE, make_c, make_d, add, by_c, by_d, on_loser]
    for order in permutations(records[3:]):
        result = _resolve(*records[:3], *order)
        assert result.role(SPACE.address, B) == "none"
        assert _decision(result, by_c).reason == "losing_branch"
        assert _decision(result, on_loser).reason == "losing_branch"
        assert result.spaces[SPACE.address].member_chains[B] == (add.address, by_d.address)


def test_two_admins_setting_the_same_role_the_smaller_address_wins() -> None:
    make_c, make_d = _admin(A, C, "admin"), _admin(A, D, "admin")
    add = _member(A, B, "reader")
    by_c, by_d = _member(C, B, "writer", prior=add), _member(D, B, "writer", prior=add)
    result = _resolve(SPACE, make_c, make_d, add, by_c, by_d)
    assert result.spaces[SPACE.address].member_chains[B][-1] == min(by_c.address, by_d.address)


def test_the_owner_outranks_an_admin_whatever_the_roles() -> None:
    make_c = _admin(A, C, "admin")
    add = _member(A, B, "writer")
    by_c = _lowering("space_member", C, B, "none", add, [])
    by_owner = _member(A, B, "writer", prior=add)  # less restrictive, but signed by the owner
    result = _resolve(SPACE, make_c, add, by_c, by_owner)
    assert result.role(SPACE.address, B) == "writer" and _decision(result, by_c).reason == "losing_branch"


def test_an_equivocating_owner_is_decided_by_role_then_hash() -> None:
    as_writer, as_reader = _member(A, B, "writer"), _member(A, B, "reader")
    result = _resolve(SPACE, as_writer, as_reader)
    assert result.role(SPACE.address, B) == "reader" and _decision(result, as_writer).reason == "losing_branch"
    make_c, twice = _admin(A, C, "admin"), _admin(A, C, "admin", created_at="2026-03-01T10:00:00Z")
    result = _resolve(SPACE, make_c, twice)
    winner = min(make_c.address, twice.address)
    assert result.spaces[SPACE.address].admin_chains[C] == (winner,)


def test_the_member_leaving_loses_to_an_admins_concurrent_change() -> None:
    make_c = _admin(A, C, "admin")
    add = _member(A, B, "writer")
    leave = _lowering("space_member", B, B, "none", add, [])
    by_c = _member(C, B, "reader", prior=add, vouches=[vouching.vouch(B, []).as_json()])
    result = _resolve(SPACE, make_c, add, leave, by_c)
    assert result.role(SPACE.address, B) == "reader"  # rank first: the admin over the member itself


# ---- 4.5 removal and the vouched set -----------------------------------------------------------------------------


def test_a_removed_writers_backdated_posts_are_void_whatever_their_dates() -> None:
    add = _member(A, B, "writer")
    kept = _post(B, "kept", "2026-03-01T10:00:00Z")
    backdated = _post(B, "backdated", "2026-01-01T00:00:00Z")
    remove = _lowering("space_member", A, B, "none", add, [kept])
    after = _post(B, "after the removal", "2026-03-09T00:00:00Z")
    result = _resolve(SPACE, add, kept, backdated, remove, *_pages(remove), after)
    assert _verdicts(result, kept, backdated, after) == ["valid", "void", "void"]
    assert _decision(result, backdated).reason == "unvouched"
    assert result.spaces[SPACE.address].may_read(B) is False


def test_a_removal_decides_once_its_pages_are_held() -> None:
    add = _member(A, B, "writer")
    kept = _post(B, "kept")
    remove = _lowering("space_member", A, B, "reader", add, [kept])
    result = _resolve(SPACE, add, kept, remove)
    assert _decision(result, kept).waits_for == {f"pages:{remove.address}:{B}"}
    assert result.role(SPACE.address, B) == "reader"  # the role is decided without the pages
    assert _resolve(SPACE, add, kept, remove, *_pages(remove)).verdict(kept.version) == "valid"
    none_kept = _lowering("space_member", A, B, "reader", add, [])
    assert _resolve(SPACE, add, kept, none_kept).verdict(kept.version) == "void"  # count 0: no page needed


def test_the_latest_removal_decides_every_earlier_stretch() -> None:
    add = _member(A, B, "writer")
    first, second = _post(B, "first stretch"), _post(B, "second stretch")
    remove = _lowering("space_member", A, B, "none", add, [first])
    again = _member(A, B, "writer", prior=remove)
    while_writer = _resolve(SPACE, add, remove, *_pages(remove), again, first, second)
    # a member added again writes: its records are valid, earlier ones the first removal voided included (record 62)
    assert _verdicts(while_writer, first, second) == ["valid", "valid"]
    remove_again = _lowering("space_member", A, B, "reader", again, [second])
    result = _resolve(SPACE, add, remove, *_pages(remove), again, remove_again, *_pages(remove_again), first, second)
    assert _verdicts(result, first, second) == ["void", "valid"]
    as_reader = _member(A, B, "reader", prior=remove)  # added again as a reader: the first removal still decides
    result = _resolve(SPACE, add, remove, *_pages(remove), as_reader, first, second)
    assert _verdicts(result, first, second) == ["valid", "void"]


def test_a_reader_leaving_does_not_decide_the_posts_of_its_writer_stretch() -> None:
    add = _member(A, B, "writer")
    post = _post(B, "while a writer")
    to_reader = _lowering("space_member", A, B, "reader", add, [post])
    leave = _lowering("space_member", B, B, "none", to_reader, [])
    result = _resolve(SPACE, add, post, to_reader, *_pages(to_reader), leave)
    assert result.verdict(post.version) == "valid" and result.role(SPACE.address, B) == "none"


def test_an_admin_only_members_posts_are_kept_by_its_admin_removal() -> None:
    make_c = _admin(A, C, "admin")
    kept, dropped = _post(C, "kept"), _post(C, "dropped")
    remove = _lowering("space_admin", A, C, "none", make_c, [kept])
    result = _resolve(SPACE, make_c, kept, dropped, remove, *_pages(remove, C))
    assert _verdicts(result, kept, dropped) == ["valid", "void"]


def test_a_member_no_held_record_names_waits_and_one_never_added_is_void() -> None:
    stranger = _post(B, "who is B?")
    result = _resolve(SPACE, stranger)
    assert _decision(result, stranger) == Decision("undecided", None, frozenset({f"member:{SPACE.address}:{B}"}))
    refused_add = _member(A, B, "writer", signing_key=REVOKED)  # B's only chain record is void: decided
    assert _decision(_resolve(SPACE, refused_add, stranger), stranger).reason == "not_a_member"


# ---- the hard cases of issue 37 ----------------------------------------------------------------------------------


def test_a_change_arriving_before_what_it_depends_on_waits_then_counts() -> None:
    """An admin's change before the admin's promotion, a removal before the addition it follows, a post before its
    author's addition: each undecided, never void, and decided once the dependency is held, in every order."""
    make_c = _admin(A, C, "admin")
    add = _member(C, B, "writer")
    post = _post(B, "early")
    remove = _lowering("space_member", A, B, "reader", add, [post])
    pages = _pages(remove)
    assert _decision(_resolve(SPACE, add), add).waits_for == {f"member:{SPACE.address}:{C}"}
    assert _decision(_resolve(SPACE, remove, post), remove).waits_for == {f"event:{add.address}"}
    assert _decision(_resolve(SPACE, remove, post), post).waits_for == {f"member:{SPACE.address}:{B}"}
    items = [SPACE, make_c, add, post, remove, *pages]
    outcomes = set()
    for order in permutations(items):
        result = _resolve(*order)
        outcomes.add((tuple(sorted(result.decisions.items())), result.role(SPACE.address, B)))
    assert len(outcomes) == 1
    result = _resolve(*items)
    assert _verdicts(result, make_c, add, post, remove) == ["valid"] * 4


def test_an_admin_removed_while_its_changes_travel() -> None:
    """C changes B and E while the owner removes C, vouching only for the change of B: the change of E is void,
    and so is what the owner built on it (the chain needs its prior); admin D's concurrent change of E, which lost
    to C's (a removal over a change of role), then wins."""
    make_c, make_d = _admin(A, C, "admin"), _admin(A, D, "admin")
    add_b, add_e = _member(A, B, "writer"), _member(A, E, "writer")
    c_on_b = _member(C, B, "reader", prior=add_b, vouches=[vouching.vouch(B, []).as_json()])
    c_on_e = _lowering("space_member", C, E, "none", add_e, [])
    built_on = _member(A, E, "writer", prior=c_on_e)
    rival = _lowering("space_member", D, E, "reader", add_e, [])
    remove_c = _lowering("space_admin", A, C, "none", make_c, [c_on_b])
    records = [SPACE, make_c, make_d, add_b, add_e, c_on_b, c_on_e, built_on, rival]
    before = _resolve(*records)
    assert before.role(SPACE.address, E) == "writer" and _decision(before, rival).reason == "losing_branch"
    after = _resolve(*records, remove_c, *_pages(remove_c, C))
    assert after.verdict(c_on_b.version) == "valid" and after.role(SPACE.address, B) == "reader"
    assert _decision(after, c_on_e).reason == "unvouched"
    assert _decision(after, built_on).reason == "prior_void"
    assert after.verdict(rival.version) == "valid" and after.role(SPACE.address, E) == "reader"
    assert after.spaces[SPACE.address].member_chains[E] == (add_e.address, rival.address)
    waiting = _resolve(SPACE, make_c, add_b, c_on_b, remove_c)  # the removal's pages not held yet
    assert _decision(waiting, c_on_b).waits_for == {f"pages:{remove_c.address}:{C}"}
    assert after.moderator(SPACE.address, C, c_on_b.version) == Decision("valid")
    assert after.moderator(SPACE.address, C, "0" * 64).reason == "unvouched"


def test_a_removed_member_who_keeps_writing() -> None:
    add = _member(A, B, "writer")
    before = _post(B, "before", "2026-03-01T10:00:00Z")
    remove = _lowering("space_member", A, B, "none", add, [before])
    later = [_post(B, f"still writing {i}", f"2026-0{i}-01T00:00:00Z") for i in range(1, 6)]
    result = _resolve(SPACE, add, before, remove, *_pages(remove), *later)
    assert result.verdict(before.version) == "valid"
    assert {result.verdict(h.version) for h in later} == {"void"}
    link = _held(
        {
            "kind": "link",
            "schema_version": "v1",
            "author_id": B,
            "created_at": "2026-03-09T00:00:00Z",
            "space": SPACE.address,
            "source": later[0].address,
            "target": before.address,
            "link_type": "supports",
            "annotation": "",
            "signature": "-",
        }
    )
    assert _resolve(SPACE, add, remove, *_pages(remove), link).verdict(link.version) == "void"


def test_a_revoked_admin_key_voids_what_it_signed_after_and_what_is_built_on_it() -> None:
    """Key verdicts from identity.key_history: admin C rotates its key C -> K[9] vouching for its first change only;
    C's first key signs a second change afterwards (a thief): void, and the owner's record built on it too."""
    c_new = K[9]
    make_c = _admin(A, C, "admin")
    add_b = _member(A, B, "writer")
    first = _member(C, B, "reader", prior=add_b, vouches=[vouching.vouch(B, []).as_json()])
    thief = _member(C, E, "writer")
    built_on = _member(A, E, "reader", prior=thief, vouches=[vouching.vouch(E, []).as_json()])
    by_new_key = _member(C, D, "reader", signing_key=c_new)
    rotation = {
        "kind": "key_event",
        "schema_version": "v1",
        "author_id": C,
        "created_at": "2026-03-02T00:00:00Z",
        "event": "rotate",
        "seq": 1,
        "key": c_new,
        "vouches": [vouching.vouch(C, [first.version]).as_json()],
        "signature": "-",
    }
    event_address = make.address(rotation)
    histories = {C: key_history.resolve(C, [(event_address, rotation)])}
    key_pages = {(event_address, C): {0: [first.version]}}
    result = resolve([SPACE, make_c, add_b, first, thief, built_on, by_new_key], key_verdicts(histories, key_pages))
    assert _verdicts(result, first, by_new_key) == ["valid", "valid"]
    assert _decision(result, thief).reason == "void_key"
    assert _decision(result, built_on).reason == "prior_void"
    assert result.spaces[SPACE.address].roles == {A: "owner", C: "admin", B: "reader", D: "reader"}
    unpaged = resolve([SPACE, make_c, add_b, first], key_verdicts(histories, {}))
    assert _decision(unpaged, first).waits_for == {f"key:{C}:{C}"}


def test_a_record_nobody_can_decide_cannot_stall_a_chain() -> None:
    """Anyone can sign a record claiming the owner with a key no event installs: it waits for ever, and takes no part
    in the chain meanwhile (an undecided record is not stored)."""
    add = _member(A, B, "writer")
    forged = _lowering("space_member", A, B, "none", add, [], signing_key=UNKNOWN)
    forged_first = _member(A, B, "reader", signing_key=UNKNOWN)
    result = _resolve(SPACE, add, forged, forged_first)
    assert result.role(SPACE.address, B) == "writer"
    assert _decision(result, forged).waits_for == {f"key:{A}:{UNKNOWN}"}
    assert result.verdict(forged_first.version) == "undecided"


# ---- 4.6 hosting and 6.4 pages -----------------------------------------------------------------------------------


def test_hosting_chains() -> None:
    make_c = _admin(A, C, "admin")
    host = _host(A, N, "host")
    unhost_by_c, rehost = _host(C, N, "none", prior=host), _host(C, N, "host", prior=host)
    by_writer = _host(B, K[9], "host")
    result = _resolve(SPACE, make_c, _member(A, B, "writer"), host, unhost_by_c, rehost, by_writer)
    assert result.spaces[SPACE.address].hosts == frozenset()  # none before host
    assert _decision(result, rehost).reason == "losing_branch"
    assert _decision(result, by_writer).waits_for == {f"member:{SPACE.address}:{B}"}  # B's promotion may come
    no_admin = _admin(A, B, "admin", signing_key=REVOKED)
    assert _decision(_resolve(SPACE, no_admin, by_writer), by_writer).reason == "unauthorized_membership"


def test_a_page_must_prove_its_place_and_be_signed_as_its_event() -> None:
    add = _member(A, B, "writer")
    post = _post(B, "kept")
    remove = _lowering("space_member", A, B, "none", add, [post])
    (page,) = _pages(remove)
    wrong_signer = _held(page.record | {"author_id": C})
    wrong_versions = _held(page.record | {"versions": ["0" * 64]})
    result = _resolve(SPACE, add, post, remove, wrong_signer, wrong_versions)
    assert {_decision(result, h).reason for h in (wrong_signer, wrong_versions)} == {"bad_vouch_page"}
    assert result.verdict(post.version) == "undecided"
    lonely = _resolve(SPACE, page)
    assert _decision(lonely, page).waits_for == {f"event:{remove.address}"}
    rival = _lowering("space_member", A, B, "none", add, [post], created_at="2026-03-01T11:00:00Z")
    (rival_page,) = _pages(rival)
    loser, winner = sorted([(remove, page), (rival, rival_page)], key=lambda pair: pair[0].address, reverse=True)
    over = _resolve(SPACE, add, post, remove, rival, page, rival_page)
    assert _decision(over, loser[0]).reason == "losing_branch" and _decision(over, loser[1]).reason == "event_void"
    assert over.verdict(winner[1].version) == "valid" and over.verdict(post.version) == "valid"


# ---- the vectors' space ------------------------------------------------------------------------------------------

DOCUMENT: dict[str, Any] = json.loads(make.VECTORS.read_text("ascii"))
VECTORS = {vector["name"]: vector for vector in DOCUMENT["records"]}


def test_the_vectors_space_in_every_order() -> None:
    """The vectors' story: B added as a writer, its backdated post void after its removal, made a reader again by
    admin C; the owner's link signed by its rotated key; decided by A's key history, in every order."""
    a = DOCUMENT["keys"]["A0"]["did"]
    events = ("rotate_by_current", "rotate_by_next", "revoke_by_recovery", "recover")
    history = key_history.resolve(a, [(VECTORS[n]["hash"], VECTORS[n]["record"]) for n in events])
    pages: dict[tuple[str, str], dict[int, list[str]]] = {}
    for name in ("vouch_page", "vouch_page_of_recover"):
        page = VECTORS[name]["record"]
        pages[(page["event"], page["subject"])] = {page["page"]: page["versions"]}
    verdicts = key_verdicts({a: history}, pages)
    names = make.SPACE_RECORDS
    items = [Held(VECTORS[n]["hash"], VECTORS[n]["version"], VECTORS[n]["record"]) for n in names]
    results = set()
    for order in permutations(items[1:8]):
        result = resolve([items[0], *order, *items[8:]], verdicts)
        results.add(tuple(sorted(result.decisions.items())))
    assert len(results) == 1
    result = resolve(items, verdicts)
    space = result.spaces[VECTORS["space"]["hash"]]
    b, c, n = (DOCUMENT["keys"][k]["did"] for k in ("B0", "C0", "N"))
    assert space.roles == {a: "owner", b: "reader", c: "admin"} and space.hosts == {n}
    by_name = dict(zip(names, items, strict=True))
    assert _decision(result, by_name["space_entry_backdated"]).reason == "unvouched"
    assert {result.verdict(h.version) for n, h in by_name.items() if n != "space_entry_backdated"} == {"valid"}
    published = {item["record"]: item["verdict"] for item in DOCUMENT["spaces"][0]["verdicts"]}
    assert published == {n: result.verdict(h.version) for n, h in by_name.items()}
    without_page = resolve([h for n, h in by_name.items() if n != "vouch_page_of_member_remove"], verdicts)
    assert _decision(without_page, by_name["space_entry"]).waits_for == {
        f"pages:{by_name['member_remove'].address}:{b}"
    }


# ---- random spaces -----------------------------------------------------------------------------------------------

SIGNING = [None] * 8 + [REVOKED, UNKNOWN]
STEPS = ["space_admin", "space_member", "space_member", "post", "post", "post", "space_host", "remove"]


class _Story:
    """The records of a random story as they are drawn, with each chain's records and each author's records."""

    def __init__(self, draw: st.DrawFn) -> None:
        self.draw = draw
        self.out: list[Held] = [SPACE] if draw(st.integers(0, 9)) else []
        self.chains: dict[tuple[str, str], list[Held]] = {}
        self.by_author: dict[str, list[Held]] = {}

    def add(self, held: Held) -> None:
        self.out.append(held)
        self.by_author.setdefault(held.record["author_id"], []).append(held)
        if held.record["kind"] in ("space_admin", "space_member", "space_host"):
            subject = held.record["node" if held.record["kind"] == "space_host" else "member"]
            self.chains.setdefault((held.record["kind"], subject), []).append(held)

    def kept(self, subject: str) -> list[Held]:
        known = self.by_author.get(subject, [])
        return self.draw(st.lists(st.sampled_from(known), unique_by=lambda h: h.version)) if known else []

    def pages_of(self, held: Held) -> None:
        """Usually the pages of a non-empty vouch, sometimes with a forged proof."""
        vouches = held.record.get("vouches")
        if not vouches or not vouches[0]["count"] or not self.draw(st.integers(0, 3)):
            return
        pages = _pages(held)
        if self.draw(st.integers(0, 5)) == 0:
            pages = [_held(p.record | {"proof": ["0" * 64]}) for p in pages]
        self.out.extend(pages)

    def removal(self, extra: dict[str, Any]) -> None:
        """The owner or an admin lowers the head of a membership chain, vouching for some of the member's records."""
        heads = sorted(key for key in self.chains if key[0] != "space_host")
        if not heads:
            return
        kind, subject = self.draw(st.sampled_from(heads))
        chain = self.chains[(kind, subject)]
        lower = {"admin": ["none"], "writer": ["none", "reader"], "reader": ["none"], "none": []}
        choices = lower[chain[-1].record["role"]]
        if choices:
            role = self.draw(st.sampled_from(choices))
            author = self.draw(st.sampled_from([A, A, C, D]))
            held = _lowering(kind, author, subject, role, chain[-1], self.kept(subject), **extra)
            self.add(held)
            self.pages_of(held)

    def change(self, kind: str, extra: dict[str, Any]) -> None:
        """Any record of a chain on a random parent (mostly its head) by a random signer."""
        draw = self.draw
        subject = N if kind == "space_host" else draw(st.sampled_from([C, D, B, E]))
        author = draw(st.sampled_from([A, A, A, C, D, subject]))
        parents = self.chains.get((kind, subject), [])
        prior: Held | None = draw(st.sampled_from([None, *parents]))
        if parents and draw(st.integers(0, 2)) > 0:
            prior = parents[-1]
        roles = {"space_admin": ["admin", "none"], "space_member": ["writer", "reader", "none"]}
        role = draw(st.sampled_from(roles.get(kind, ["host", "none"])))
        if prior is None and role == "none":
            role = {"space_admin": "admin", "space_host": "host"}.get(kind, "reader")
        if prior is not None and draw(st.integers(0, 9)) == 0:
            extra["seq"] = prior.record["seq"] + 2
        order = {"admin": 1, "writer": 2, "reader": 1, "none": 0}
        lowers = prior is not None and order.get(role, 0) < order.get(prior.record["role"], 0)
        if kind == "space_host":
            held = _chain(kind, author, subject, role, prior, **extra)
        elif lowers or (kind == "space_admin" and role == "none") or draw(st.integers(0, 19)) == 0:
            held = _lowering(kind, author, subject, role, prior, self.kept(subject), **extra)
        else:
            held = _chain(kind, author, subject, role, prior, **extra)
        self.add(held)
        self.pages_of(held)


@st.composite
def stories(draw: st.DrawFn) -> list[Held]:
    """A space (sometimes missing) whose owner first makes some of C and D admins and adds some of B, E, C as
    members, then up to 16 records: admin, member and hosting records on random parents by random signers (mostly
    ones allowed to sign them), posts by every agent, removals of a chain's head vouching for random subsets of the
    member's records, their pages (sometimes forged), records by a void or an undecided key."""
    story = _Story(draw)
    for agent in (C, D):
        if draw(st.integers(0, 2)):
            story.add(_admin(A, agent, "admin"))
    for agent in (B, E, C):
        if draw(st.integers(0, 3)):
            story.add(_member(draw(st.sampled_from([A, A, C])), agent, draw(st.sampled_from(["writer", "reader"]))))
    for step in range(draw(st.integers(0, 16))):
        what = draw(st.sampled_from(STEPS))
        extra: dict[str, Any] = {"created_at": f"2026-03-01T09:{step:02d}:00Z"}
        signing = draw(st.sampled_from(SIGNING))
        if signing is not None:
            extra["signing_key"] = signing
        if what == "remove":
            story.removal(extra)
        elif what == "post":
            story.add(_post(draw(st.sampled_from([A, C, D, B, B, E, E])), f"post {step}", **extra))
        else:
            story.change(what, extra)
    return story.out


def _outcome(result: Spaces) -> tuple[Any, ...]:
    return (result.spaces, result.decisions)


def _visibility(result: Spaces) -> dict[str, frozenset[str]]:
    """Who reads what (`identity.space_rules.may_read` of each agent's role): the spaces each agent of the stories
    may read, and so the records of them it is shown (docs/spaces.md, the read rule)."""
    return {
        agent: frozenset(sid for sid, space in result.spaces.items() if may_read(space.role(agent)))
        for agent in (A, B, C, D, E)
    }


def _valid(result: Spaces) -> tuple[frozenset[str], dict[str, Any]]:
    roles = {space_id: space.roles for space_id, space in result.spaces.items()}
    return frozenset(v for v, d in result.decisions.items() if d.verdict == "valid"), roles


@settings(max_examples=200, deadline=None)
@given(stories(), st.randoms(use_true_random=False))
def test_random_spaces_are_decided_the_same_in_every_order(items: list[Held], rnd: Any) -> None:
    result = _resolve(*items)
    shuffled = list(items)
    rnd.shuffle(shuffled)
    assert _outcome(_resolve(*shuffled)) == _outcome(result)
    assert _visibility(_resolve(*shuffled)) == _visibility(result)  # the same readers in every order
    assert set(result.decisions) == {h.version for h in items if h.record["kind"] != "space"} | (
        {SPACE.version} if SPACE in items else set()
    )
    # void records are inert: without them, the same records are valid and every role is the same
    alive = [h for h in items if result.verdict(h.version) != "void"]
    assert _valid(_resolve(*alive)) == _valid(result)
    # every winning step is valid, and valid records stand on valid chains
    for space in result.spaces.values():
        for chains in (space.admin_chains, space.member_chains, space.host_chains):
            for chain in chains.values():
                assert all(result.decisions[a].verdict == "valid" for a in chain)


@settings(max_examples=150, deadline=None)
@given(stories(), st.randoms(use_true_random=False), st.integers(1, 5))
def test_a_node_ingesting_any_order_and_batching_ends_with_the_same_spaces(
    items: list[Held], rnd: Any, batches: int
) -> None:
    """A node as docs/format-v3.md section 7 describes it: each batch is decided against what it holds; valid
    records are stored (and stay, flagged when they become void), undecided ones wait, void ones are refused and
    remembered until a record of their space's chains is stored; reconciliation then offers every record the node
    neither holds, nor waits for, nor remembers. It ends with the valid records and roles of the whole set."""
    everything = {h.version: h for h in items}
    order = list(everything)
    rnd.shuffle(order)
    cuts = sorted(rnd.sample(range(1, len(order)), min(batches - 1, len(order) - 1))) if len(order) > 1 else []
    arrivals = [order[i:j] for i, j in zip([0, *cuts], [*cuts, len(order)], strict=True)]
    log: dict[str, Held] = {}
    waiting: dict[str, Held] = {}
    refused: set[str] = set()
    rounds = 0
    while arrivals and rounds < 40:
        rounds += 1
        batch = [everything[v] for v in arrivals.pop(0) if v not in refused and v not in log and v not in waiting]
        held = {**log, **waiting, **{h.version: h for h in batch}}
        result = _resolve(*held.values())
        chain_changed = False
        for version, record in held.items():
            if version in log:
                continue
            verdict = result.verdict(version)
            waiting.pop(version, None)
            if verdict == "valid":
                log[version] = record
                chain_changed |= record.record["kind"] in ("space", "space_admin", "space_member", "space_host")
            elif verdict == "undecided":
                waiting[version] = record
            else:
                refused.add(version)
        if chain_changed:
            refused.clear()  # the space's chains changed: what was void may not be any more
        if not arrivals:  # a reconciliation round
            missing = [v for v in order if v not in log and v not in waiting and v not in refused]
            if missing:
                arrivals.append(missing)
    assert not arrivals, "the node did not settle"
    final = _resolve(*log.values(), *waiting.values())
    assert _valid(final) == _valid(_resolve(*items))


@settings(max_examples=200, deadline=None)
@given(stories())
def test_posts_decided_against_a_resolution_without_posts_are_decided_as_with_them(items: list[Held]) -> None:
    """`Spaces.decide_posts` (what the space gate decides a batch of posts with, node/spaces/judged.py): the
    resolution of a random space's other records decides its posts exactly as `resolve` over all of them does, the
    creation missing, void or undecided included. The resolution knows only its own records' key verdicts (as the
    gate's, made from their authors' key events): the posts' come with them."""
    posts = [h for h in items if h.record["kind"] == "entry"]
    rest = [h for h in items if h.record["kind"] != "entry"]
    authors = {h.record["author_id"] for h in rest}

    def rest_keys(version: str, record: dict[str, Any]) -> key_history.KeyVerdict:
        return _keys(version, record) if record["author_id"] in authors else "valid"

    whole = _resolve(*items)
    kept = resolve(rest, rest_keys)
    assert kept.decide_posts(SPACE.address, posts, _keys) == {h.version: whole.decisions[h.version] for h in posts}
    assert kept.spaces == whole.spaces  # posts change no space's chains, roles or hosts
