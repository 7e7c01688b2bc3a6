"""sync.auth: RFC 9421 signatures on sync requests, verified against configured peers, never replayed."""

from __future__ import annotations

import pytest

from identity import keys
from sync import auth

PEER = keys.SigningKey.generate()
URL = "http://node.example:8080/v1/sync/fetch?x=1"
BODY = b'{"type":"fetch","hashes":[]}'


class Clock:
    def __init__(self, now: float = 1_767_323_045.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def refused(
    verifier: auth.PeerVerifier, headers: dict[str, str], *, method: str = "POST", url: str = URL,
    body: bytes | None = BODY, allowed: frozenset[str] = frozenset({PEER.did}),
) -> auth.PeerAuthError:  # fmt: skip
    with pytest.raises(auth.PeerAuthError) as info:
        verifier.verify(method, url, headers, body, allowed)
    return info.value


def test_a_signed_request_names_its_peer() -> None:
    clock = Clock()
    headers = auth.sign_headers(PEER, "POST", URL, BODY, now=clock.now)
    assert {"Signature", "Signature-Input", "Content-Digest"} <= set(headers)
    assert 'tag="bbs-sync"' in headers["Signature-Input"] and f'keyid="{PEER.did}"' in headers["Signature-Input"]
    assert auth.PeerVerifier(clock).verify("POST", URL, headers, BODY, frozenset({PEER.did})) == PEER.did
    get = auth.sign_headers(PEER, "get", URL, now=clock.now)  # method in any case; no body, no digest
    assert "Content-Digest" not in get
    assert auth.PeerVerifier(clock).verify("GET", URL, get, None, frozenset({PEER.did})) == PEER.did


def test_unsigned_and_unknown_keys() -> None:
    verifier = auth.PeerVerifier(Clock())
    err = refused(verifier, {})
    assert (err.code, err.status) == ("signature_required", 401)
    headers = auth.sign_headers(PEER, "POST", URL, BODY, now=verifier.clock())
    err = refused(verifier, headers, allowed=frozenset())
    assert (err.code, err.status) == ("unknown_peer", 403)


@pytest.mark.parametrize(
    ("change", "value"),
    [
        ("method", "PUT"),
        ("url", "http://node.example:8080/v1/sync/fetch?x=2"),
        ("url", "http://other.example:8080/v1/sync/fetch?x=1"),
        ("url", "http://node.example:8080/v1/sync/changes?x=1"),
        ("body", b'{"type":"fetch","hashes":["a"]}'),
    ],
)
def test_anything_signed_that_changes_breaks_the_signature(change: str, value: object) -> None:
    verifier = auth.PeerVerifier(Clock())
    headers = auth.sign_headers(PEER, "POST", URL, BODY, now=verifier.clock())
    err = refused(verifier, headers, **{change: value})  # type: ignore[arg-type]
    assert (err.code, err.status) == ("bad_signature", 401)


def test_the_scheme_is_not_signed() -> None:
    """A TLS-terminating proxy changes the scheme the node sees; path, query and authority are what count."""
    verifier = auth.PeerVerifier(Clock())
    headers = auth.sign_headers(PEER, "POST", URL, BODY, now=verifier.clock())
    assert verifier.verify("POST", URL.replace("http:", "https:"), headers, BODY, frozenset({PEER.did})) == PEER.did


def test_a_body_must_be_covered_by_the_digest() -> None:
    verifier = auth.PeerVerifier(Clock())
    headers = auth.sign_headers(PEER, "POST", URL, None, now=verifier.clock())  # signed without a body
    assert refused(verifier, headers).code == "bad_signature"


def test_signatures_expire_and_may_not_come_from_the_future() -> None:
    clock = Clock()
    verifier = auth.PeerVerifier(clock)
    old = auth.sign_headers(PEER, "POST", URL, BODY, now=clock.now - auth.MAX_AGE_S - 1)
    assert refused(verifier, old).code == "stale_request"
    ahead = auth.sign_headers(PEER, "POST", URL, BODY, now=clock.now + auth.MAX_SKEW_S + 60)
    assert refused(verifier, ahead).code == "stale_request"
    almost = auth.sign_headers(PEER, "POST", URL, BODY, now=clock.now - auth.MAX_AGE_S + 1)
    assert verifier.verify("POST", URL, almost, BODY, frozenset({PEER.did})) == PEER.did


def test_a_request_is_accepted_once() -> None:
    clock = Clock()
    verifier = auth.PeerVerifier(clock)
    headers = auth.sign_headers(PEER, "POST", URL, BODY, now=clock.now)
    verifier.verify("POST", URL, headers, BODY, frozenset({PEER.did}))
    assert refused(verifier, headers).code == "replayed_request"
    other = auth.PeerVerifier(clock)  # another node (or a restart) has its own memory
    assert other.verify("POST", URL, headers, BODY, frozenset({PEER.did})) == PEER.did


def test_a_replay_after_its_window_is_stale() -> None:
    clock = Clock()
    verifier = auth.PeerVerifier(clock)
    headers = auth.sign_headers(PEER, "GET", URL, now=clock.now)
    verifier.verify("GET", URL, headers, None, frozenset({PEER.did}))
    clock.now += auth.MAX_AGE_S + auth.MAX_SKEW_S + 1
    assert refused(verifier, headers, method="GET", body=None).code == "stale_request"


def test_peer_auth_error() -> None:
    err = auth.PeerAuthError("unknown_peer", "not a peer", 403)
    assert (err.code, err.detail, err.status, str(err)) == ("unknown_peer", "not a peer", 403, "not a peer")
    assert auth.PeerAuthError("x", "y").status == 401


def test_a_peers_clock_offset_from_the_date_of_its_answer_and_the_advice_beyond_the_window() -> None:
    now = 1_767_323_045.3
    assert auth.clock_offset("Fri, 02 Jan 2026 03:04:05 GMT", now) == 0.2  # the middle of the second it names
    assert auth.clock_offset("Fri, 02 Jan 2026 03:14:05 GMT", now) == 600.2
    for bad in (None, "", "yesterday", "Fri, 02 Jan 2026 03:04:05"):  # no zone: not a Date an answer carries
        assert auth.clock_offset(bad, now) is None
    assert auth.clock_advice(None) is None and auth.clock_advice(auth.MAX_SKEW_S) is None
    ahead, behind = auth.clock_advice(600.2), auth.clock_advice(-90)
    assert ahead is not None and "600 s ahead of this node's" in ahead and "NTP" in ahead
    assert behind is not None and "90 s behind this node's" in behind and "stale_request" in behind


def test_keyid_names_the_signing_key_after_a_rotation_and_is_bare_before() -> None:
    clock = Clock()
    verifier = auth.PeerVerifier(clock=clock)
    bare = auth.sign_headers(PEER, "POST", URL, BODY, now=clock.now)
    assert f'keyid="{PEER.did}"' in bare["Signature-Input"]
    assert verifier.verify_signed("POST", URL, bare, BODY, frozenset({PEER.did})) == (PEER.did, PEER.did)
    new = keys.SigningKey.generate()
    named = auth.sign_headers(new, "POST", URL, BODY, now=clock.now, node_id=PEER.did)
    assert f'keyid="{PEER.did}#{new.did}"' in named["Signature-Input"]
    assert verifier.verify_signed("POST", URL, named, BODY, frozenset({PEER.did})) == (PEER.did, new.did)
    # the node part must be a peer; the key part must have signed
    assert refused(verifier, named, allowed=frozenset({new.did})).code == "unknown_peer"
    thief = keys.SigningKey.generate()
    forged = auth.sign_headers(thief, "POST", URL, BODY, now=clock.now, node_id=PEER.did)
    forged["Signature-Input"] = forged["Signature-Input"].replace(f"#{thief.did}", f"#{new.did}")
    assert refused(verifier, forged).code == "bad_signature"  # the key named is not the one that signed


async def test_the_node_signer_picks_the_key_each_peer_holds() -> None:
    first, second = keys.SigningKey.generate(), keys.SigningKey.generate()
    told: list[str] = []

    async def holder(peer: str) -> None:
        told.append(peer)

    clock = Clock(100.0)
    signer = auth.NodeSigner(first.did, [first, second], on_holder=holder, clock=clock)
    assert signer.did == first.did and signer.for_peer("p") is second  # the newest first
    assert signer.refused("p", second, "unknown_node_key")  # p has not pulled the rotation
    assert signer.for_peer("p") is first
    await signer.accepted("p", first)
    assert told == [] and signer.holders == set()
    clock.now += auth.RETRY_NEWEST_S + 1
    assert signer.for_peer("p") is second  # asked with the newest again
    assert signer.refused("p", second, "unknown_peer")  # a release before node key rotation answers so
    assert signer.for_peer("p") is first
    assert signer.refused("p", first, "rotated_node_key")  # p pulled the rotation meanwhile
    assert signer.for_peer("p") is second
    assert not signer.refused("p", second, "stale_boot")  # nothing about keys: no other key helps
    await signer.accepted("p", second)
    assert told == ["p"] and signer.holders == {"p"}
    assert signer.for_peer("p") is second
    alone = auth.NodeSigner.single(first)
    assert alone.for_peer("p") is first and not alone.refused("p", first, "unknown_node_key")
    blocked = auth.NodeSigner(first.did, [first], blocked="restored from before a rotation")
    with pytest.raises(auth.NodeKeyRotatedOut):
        blocked.for_peer("p")
