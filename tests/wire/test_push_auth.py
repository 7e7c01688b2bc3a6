"""Push signatures: a push verifies once, for the node that signed it; other tags, keys, bodies are refused."""

from __future__ import annotations

import time

import pytest

from identity import keys
from sync.auth import sign_headers
from wire.push_auth import PushAuthError, PushVerifier, sign_push

URL = "http://127.0.0.1:9000/push"


def test_a_push_verifies_once() -> None:
    key = keys.SigningKey.generate()
    headers = sign_push(key, URL, b"{}")
    verifier = PushVerifier(key.did)
    verifier.verify("POST", URL, headers, b"{}")
    with pytest.raises(PushAuthError) as caught:
        verifier.verify("POST", URL, headers, b"{}")
    assert caught.value.code == "replayed_push"


@pytest.mark.parametrize("what", ["other node", "body changed", "sync tag", "stale", "unsigned", "other url"])
def test_bad_pushes_are_refused(what: str) -> None:
    key = keys.SigningKey.generate()
    body, url = b'{"a":1}', URL
    headers = sign_push(key, URL, body)
    expected = key.did
    if what == "other node":
        expected = keys.SigningKey.generate().did
    elif what == "body changed":
        body = b'{"a":2}'
    elif what == "sync tag":
        headers = sign_headers(key, "POST", URL, body)
    elif what == "stale":
        headers = sign_push(key, URL, body, now=time.time() - 3600)
    elif what == "unsigned":
        headers = {}
    else:
        url = "http://127.0.0.1:9001/push"
    with pytest.raises(PushAuthError):
        PushVerifier(expected).verify("POST", url, headers, body)


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:9000/push",
        "https://Agent.Example/p/a?x=1&y=2",
        "http://h:80/",
        "https://h:8443",
        "http://[::1]:9/p",
    ],
)
def test_the_signer_matches_the_library_to_the_byte(url: str) -> None:
    """sign_push builds the signature base itself (speed); http-message-signatures' signer is the oracle."""
    from wire.push_auth import library_sign

    key = keys.SigningKey.generate()
    ours = sign_push(key, url, b'{"x":1}', now=1_700_000_000, nonce="n" * 22)
    assert ours == library_sign(key, url, b'{"x":1}', 1_700_000_000, "n" * 22)
