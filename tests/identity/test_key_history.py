"""An identity's key history (`identity.key_history`): the rules of docs/format-v3.md section 3, each with a test,
the vectors' story decided the same in every order of its events, and a hypothesis test that random histories give
the same answer in every order, with a winning chain whose every step is allowed and the best of its siblings."""

from __future__ import annotations

import json
from itertools import permutations
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from identity import canonical, key_history, vouching
from identity.key_history import History, commitment, key_verdict, resolve
from identity.keys import SigningKey
from tests.identity import format_v3_vectors as make

K = [SigningKey.from_seed(bytes([0x40 + i]) * 32).did for i in range(6)]  # K[0] is the identity
A = K[0]


def _event(event: str, seq: int, prior: str | None, signer: str, vouched: list[str], **members: Any) -> dict:
    record: dict[str, Any] = {
        "kind": "key_event",
        "schema_version": "v1",
        "author_id": A,
        "created_at": "2026-03-03T08:00:00Z",
        "event": event,
        "seq": seq,
        "vouches": [vouching.vouch(k, []).as_json() for k in sorted(set(vouched))],
        "signature": "-",
    }
    if signer != A:
        record["signing_key"] = signer
    if prior is not None:
        record["prior"] = prior
    return record | {k: v for k, v in members.items() if v is not None}


def _address(record: dict[str, Any]) -> str:
    return canonical.sha256_hex(canonical.canonical_bytes({k: v for k, v in record.items() if k != "signature"}))


def _resolve(*records: dict[str, Any]) -> History:
    return resolve(A, [(_address(r), r) for r in records])


# ---- the rules, one by one ---------------------------------------------------------------------------------------


def test_no_event_the_first_key_signs() -> None:
    history = _resolve()
    assert history.chain == () and history.state == key_history.initial_state(A)
    assert key_verdict(history, A, "0" * 64, {}) == "valid"
    assert key_verdict(history, K[1], "0" * 64, {}) == "undecided"  # a rotation may be on its way


def test_a_rotation_by_the_current_key_installs_the_new_one() -> None:
    first = _event("rotate", 1, None, A, [A], key=K[1], next=commitment(K[2]), recovery=K[5])
    history = _resolve(first)
    assert history.chain == (_address(first),)
    assert history.state.key == K[1] and history.state.recovery == K[5]
    assert history.removed_by == {A: _address(first)}


def test_a_rotation_not_signed_by_the_current_key_is_refused() -> None:
    bad = _event("rotate", 1, None, K[3], [A], key=K[3])
    history = _resolve(bad)
    assert history.refused == {_address(bad): "unauthorized_key_event"} and history.chain == ()


def test_with_a_commitment_only_the_committed_key_rotates() -> None:
    first = _event("rotate", 1, None, A, [A], key=K[1], next=commitment(K[2]))
    thief = _event("rotate", 2, _address(first), K[1], [K[1]], key=K[3])  # the current key, bypassing the commitment
    thief_revoke = _event("revoke", 2, _address(first), K[1], [K[1]], key=K[3])
    owner = _event("rotate", 2, _address(first), K[2], [K[1]], key=K[2])
    wrong_key = _event("rotate", 2, _address(first), K[2], [K[1]], key=K[4])  # the committed key installs itself
    history = _resolve(first, thief, thief_revoke, owner, wrong_key)
    assert history.chain == (_address(first), _address(owner))
    assert {history.refused[_address(r)] for r in (thief, thief_revoke, wrong_key)} == {"unauthorized_key_event"}


def test_a_revocation_by_a_key_that_is_not_the_recovery_key_is_refused() -> None:
    first = _event("rotate", 1, None, A, [A], key=K[1], next=commitment(K[2]), recovery=K[5])
    revoke = _event("revoke", 2, _address(first), K[4], [K[1]])
    recover = _event("recover", 2, _address(first), K[2], [K[1]], key=K[3])  # the next key is not the recovery key
    history = _resolve(first, revoke, recover)
    assert history.refused == {_address(revoke): "unauthorized_key_event", _address(recover): "unauthorized_key_event"}


def test_recovery_beats_any_change_at_any_depth() -> None:
    first = _event("rotate", 1, None, A, [A], key=K[1], next=commitment(K[2]), recovery=K[5])
    second = _event("rotate", 2, _address(first), K[2], [K[1]], key=K[2])
    third = _event("revoke", 3, _address(second), K[5], [K[2]], key=K[3])
    recover = _event("recover", 2, _address(first), K[5], [K[1], K[2]], key=K[4])
    history = _resolve(first, second, third, recover)
    assert history.chain == (_address(first), _address(recover))
    assert history.state.key == K[4]
    assert history.losing_keys == {K[2], K[3]}
    assert history.vouched_by == {K[2]: _address(recover)}
    # kept: the chain and its runner-up at seq 2; the losing branch's own follower is not stored
    assert history.kept == {_address(first), _address(recover), _address(second)}
    assert key_verdict(history, K[2], "1" * 64, {}) == "void"  # vouched for by the recovery with an empty set
    assert key_verdict(history, K[3], "1" * 64, {}) == "void"  # a losing branch's key
    assert key_verdict(history, K[4], "1" * 64, {}) == "valid"


def test_two_changes_by_the_current_key_tie_on_rank_and_the_smaller_address_wins() -> None:
    owner = _event("revoke", 1, None, A, [A], key=K[1])
    thief = _event("rotate", 1, None, A, [A], key=K[2])
    history = _resolve(owner, thief)
    assert history.chain == (min(_address(owner), _address(thief)),)


def test_endless_forks_by_the_current_key_keep_two_events() -> None:
    """A thief holding a key without a commitment can sign any number of allowed forks: a node keeps the best two."""
    forks = [_event("rotate", 1, None, A, [A], key=k) for k in K[1:]]
    deeper = [
        _event("rotate", 2, _address(f), f["key"], [f["key"]], key=K[(i + 2) % 5 + 1]) for i, f in enumerate(forks)
    ]
    history = _resolve(*forks, *deeper)
    ranked = sorted(_address(f) for f in forks)
    winner_follower = next(d for d in deeper if d["prior"] == ranked[0])
    assert history.chain == (ranked[0], _address(winner_follower))
    assert history.kept == {ranked[0], ranked[1], _address(winner_follower)}


@pytest.mark.parametrize(
    ("members", "reason"),
    [
        ({"key": A}, "key_reused"),
        ({"key": K[1], "recovery": K[1]}, "key_reused"),
    ],
)
def test_a_key_is_never_installed_twice(members: dict[str, Any], reason: str) -> None:
    bad = _event("rotate", 1, None, A, [A], **members)
    assert _resolve(bad).refused == {_address(bad): reason}


def test_a_key_the_chain_used_before_is_refused_later_too() -> None:
    first = _event("rotate", 1, None, A, [A], key=K[1])
    back = _event("rotate", 2, _address(first), K[1], [K[1]], key=A)
    assert _resolve(first, back).refused == {_address(back): "key_reused"}


def test_only_the_recovery_key_changes_the_recovery_key() -> None:
    first = _event("rotate", 1, None, A, [A], key=K[1], recovery=K[5])
    by_current = _event("rotate", 2, _address(first), K[1], [K[1]], key=K[2], recovery=K[4])
    by_recovery = _event("recover", 2, _address(first), K[5], [K[1]], key=K[3], recovery=K[4])
    history = _resolve(first, by_current, by_recovery)
    assert history.refused == {_address(by_current): "unauthorized_recovery_change"}
    assert history.state.recovery == K[4]


def test_an_event_must_vouch_for_the_key_it_removes() -> None:
    bad = _event("rotate", 1, None, A, [K[3]], key=K[1])
    assert _resolve(bad).refused == {_address(bad): "missing_vouch"}


def test_a_keyless_revocation_leaves_nothing_to_vouch_for() -> None:
    first = _event("rotate", 1, None, A, [A], key=K[1], recovery=K[5])
    revoke = _event("revoke", 2, _address(first), K[5], [K[1]])
    recover = _event("recover", 3, _address(revoke), K[5], [], key=K[2])
    history = _resolve(first, revoke, recover)
    assert history.chain == tuple(map(_address, (first, revoke, recover)))
    assert history.state.key == K[2]


def test_wrong_seq_prior_refused_and_missing_prior() -> None:
    first = _event("rotate", 1, None, A, [A], key=K[1])
    skipped = _event("rotate", 3, _address(first), K[1], [K[1]], key=K[2])
    after_skipped = _event("rotate", 4, _address(skipped), K[2], [K[2]], key=K[3])
    orphan = _event("rotate", 5, "f" * 64, K[3], [K[3]], key=K[4])
    history = _resolve(first, skipped, after_skipped, orphan)
    assert history.refused == {_address(skipped): "bad_seq", _address(after_skipped): "prior_refused"}
    assert history.waiting == {_address(orphan)}


def test_a_rotated_out_key_signs_only_what_its_removal_vouches_for_whatever_the_date() -> None:
    kept = sorted(canonical.sha256_hex(f"kept {i}".encode()) for i in range(3))
    first = _event("rotate", 1, None, A, [], key=K[1])
    first["vouches"] = [vouching.vouch(A, kept).as_json()]
    history = _resolve(first)
    pages = {(_address(first), A): {0: vouching.page(kept, 0)[0]}}
    assert key_verdict(history, A, kept[0], pages) == "valid"
    assert key_verdict(history, A, canonical.sha256_hex(b"backdated"), pages) == "void"
    assert key_verdict(history, A, kept[0], {}) == "undecided"  # until the pages are held


def test_events_of_another_author_are_ignored() -> None:
    other = {**_event("rotate", 1, None, A, [A], key=K[1]), "author_id": K[5]}
    assert _resolve(other).chain == ()


# ---- the vectors' story ------------------------------------------------------------------------------------------

DOCUMENT: dict[str, Any] = json.loads(make.VECTORS.read_text("ascii"))
VECTORS = {vector["name"]: vector for vector in DOCUMENT["records"]}


def test_the_vectors_story_in_every_order() -> None:
    author = DOCUMENT["keys"]["A0"]["did"]
    names = ["rotate_by_current", "rotate_by_next", "revoke_by_recovery", "recover"]
    items = [(VECTORS[n]["hash"], VECTORS[n]["record"]) for n in names]
    results = {
        (h.chain, h.state, frozenset(h.refused.items()), h.losing_keys)
        for h in (resolve(author, order) for order in permutations(items))
    }
    assert len(results) == 1
    history = resolve(author, items)
    assert history.chain == (VECTORS["rotate_by_current"]["hash"], VECTORS["recover"]["hash"])
    assert history.state.key == DOCUMENT["keys"]["A4"]["did"]
    assert history.losing_keys == {DOCUMENT["keys"]["A2"]["did"]}
    page = VECTORS["vouch_page"]["record"]
    pages = {(page["event"], page["subject"]): {page["page"]: page["versions"]}}
    for name in ("space", "member_add", "admin_add", "host", "member_remove"):
        assert key_verdict(history, author, VECTORS[name]["version"], pages) == "valid"
    assert key_verdict(history, author, "2" * 64, pages) == "void"  # any other record of A0: not in the set
    assert key_verdict(history, DOCUMENT["keys"]["A2"]["did"], "2" * 64, pages) == "void"
    assert key_verdict(history, DOCUMENT["keys"]["A1"]["did"], VECTORS["entry_by_rotated_key"]["version"], pages) == (
        "undecided"  # recover vouches for A1's two records: decided once its page is held
    )
    for name in ("vouch_page", "vouch_page_of_recover"):
        page = VECTORS[name]["record"]
        pages[(page["event"], page["subject"])] = {page["page"]: page["versions"]}
    for order in permutations(items):  # the published verdicts, whatever order the events came in
        again = resolve(author, order)
        for item in DOCUMENT["key_history"]["verdicts"]:
            version = VECTORS[item["record"]]["version"]
            assert key_verdict(again, item["signing_key"], version, pages) == item["verdict"], item


# ---- random histories --------------------------------------------------------------------------------------------

KINDS = ("rotate", "revoke", "recover")


@st.composite
def histories(draw: st.DrawFn) -> list[dict[str, Any]]:
    """Up to 12 events on random parents. Signers are mostly ones the parent's state allows (its key, its recovery
    key, its committed next key), so chains grow and fork; the rest, and wrong seqs or vouches, are refused."""
    events: list[dict[str, Any]] = []
    states: dict[str | None, key_history.KeyState] = {None: key_history.initial_state(A)}
    for _ in range(draw(st.integers(0, 12))):
        parent_address = draw(st.sampled_from(sorted(states, key=str)))
        parent = None if parent_address is None else next(e for e in events if _address(e) == parent_address)
        state = states[parent_address]
        seq = 1 if parent is None else parent["seq"] + draw(st.sampled_from([1, 1, 1, 1, 2]))
        committed = [k for k in K if state.next == commitment(k)]
        signer = draw(
            st.sampled_from([k for k in (state.key, state.recovery, *committed) if k] + [draw(st.sampled_from(K))])
        )
        kind = draw(st.sampled_from(KINDS))
        key = signer if signer in committed else draw(st.sampled_from(K if kind != "revoke" else [None, *K]))
        members = {
            "key": key,
            "next": draw(st.sampled_from([None, *map(commitment, K)])),
            "recovery": draw(st.sampled_from([None, None, *K])),
        }
        vouched = draw(st.lists(st.sampled_from(K), max_size=2))
        if state.key is not None and draw(st.integers(0, 9)):
            vouched.append(state.key)
        event = _event(kind, seq, parent_address, signer, vouched, **members)
        events.append(event)
        if seq == (1 if parent is None else parent["seq"] + 1) and key_history.refusal(state, event) is None:
            states[_address(event)] = key_history.apply(state, event)
    return events


@given(histories(), st.randoms(use_true_random=False))
def test_random_histories_are_decided_the_same_in_every_order(events: list[dict[str, Any]], rnd: Any) -> None:
    items = [(_address(e), e) for e in events]
    history = resolve(A, items)
    shuffled = list(items)
    rnd.shuffle(shuffled)
    again = resolve(A, shuffled)
    assert (again.chain, again.state, again.refused, again.waiting, again.losing_keys, again.kept) == (
        history.chain,
        history.state,
        history.refused,
        history.waiting,
        history.losing_keys,
        history.kept,
    )
    assert again.removed_by == history.removed_by
    # what a node keeps is bounded by the chain: at most two events per place of it
    assert set(history.chain) <= history.kept and len(history.kept) <= 2 * len(history.chain)
    # and keeping only that loses nothing: the same events, resolved alone, give the same chain and state
    alone = resolve(A, [(a, e) for a, e in items if a in history.kept])
    assert (alone.chain, alone.state) == (history.chain, history.state)
    # every step of the chain is allowed in its parent's state and the best allowed sibling; the end has no child
    state = key_history.initial_state(A)
    parent: str | None = None
    for address in [*history.chain, None]:
        siblings = [(a, e) for a, e in items if e.get("prior") == parent and e["seq"] == (
            1 if parent is None else history.events[parent]["seq"] + 1)]  # fmt: skip
        allowed = [(key_history.ROLE_RANK[str(key_history.role_of(state, e))], a) for a, e in siblings
                   if key_history.refusal(state, e) is None]  # fmt: skip
        if address is None:
            assert not allowed
            break
        assert min(allowed)[1] == address
        state = key_history.apply(state, history.events[address])
        parent = address
    assert state == history.state
    for key in history.losing_keys:
        assert key_verdict(history, key, "3" * 64, {}) in ("void", "undecided")
        assert key not in history.state.used


# ---- key order and the newest agent document (docs/format-v3.md 3.6, 3.8) ----------------------------------------


def test_key_order_follows_the_winning_chain_and_leaves_out_a_losing_branch() -> None:
    first = _event("rotate", 1, None, A, [A], key=K[1], recovery=K[5])
    second = _event("rotate", 2, _address(first), K[1], [K[1]], key=K[2])
    thief = _event("rotate", 2, _address(first), K[1], [K[1]], key=K[3])  # a fork of rank current
    recover = _event("recover", 2, _address(first), K[5], [K[1]], key=K[4])  # recovery outranks both
    history = _resolve(first, second, thief, recover)
    assert key_history.key_order(history) == {A: 0, K[1]: 1, K[4]: 2}
    assert key_history.key_order(_resolve()) == {A: 0}


def test_the_newest_document_is_by_the_later_key_and_a_void_one_never_wins() -> None:
    order = {A: 0, K[1]: 1}
    owners_old = key_history.document_rank(order, A, 1_000, "aa", "valid")
    owners_new = key_history.document_rank(order, K[1], 500, "bb", "valid")  # older date, later key: it wins
    thiefs = key_history.document_rank(order, A, 9_999_999, "cc", "void")  # forward-dated, revoked key
    vouched = key_history.document_rank(order, A, 2_000, "dd", "valid")
    unknown = key_history.document_rank(order, K[3], 9_999_999, "ee", "valid")  # outside the chain
    assert max([owners_old, owners_new, thiefs, vouched, unknown]) == owners_new
    assert max([owners_old, thiefs, vouched]) == vouched  # one key: (created_at, hash)
    assert max([owners_old, thiefs]) == owners_old
    assert unknown < owners_old
