"""Ed25519 keys, did:key ids, signatures and key files (`identity.keys`).

The did:key of the all-zero seed is computed here independently of `identity.keys`, straight from
the multicodec / multibase specifications: varint multicodec `ed25519-pub` (0xed 0x01) + the raw
32-byte public key, base58btc-encoded (Bitcoin alphabet, one '1' per leading zero byte), multibase
prefix 'z', after `did:key:`.
"""

from __future__ import annotations

import base64

import pytest
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from hypothesis import example, given
from hypothesis import strategies as st

from identity import keys
from identity.keys import (
    KeyError_,
    SigningKey,
    b58decode,
    b58encode,
    b64u,
    b64u_decode,
    did_from_public_key,
    is_did,
    public_key_bytes,
    public_key_from_did,
    verify,
)

ZERO_SEED = bytes(32)
# Ed25519 public key of the all-zero seed (RFC 8032 key generation; a widely published value).
ZERO_SEED_PUBLIC_HEX = "3b6a27bcceb6a42d62a3a8d02a6f0d73653215771de243a63ac048a18b59da29"
ZERO_SEED_DID = "did:key:z6MkiTBz1ymuepAQ4HEHYSF1H8quG5GLVVQR3djdX3mDooWp"

seeds = st.binary(min_size=32, max_size=32)


# ---------------------------------------------------------------------------------------------
# An independent did:key computation (no code from identity.keys)
# ---------------------------------------------------------------------------------------------

BITCOIN_ALPHABET = "123456789ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz"


def reference_base58btc(data: bytes) -> str:
    """Base58btc by long division over the byte array (the draft-msporny-base58 algorithm)."""
    zeros = 0
    while zeros < len(data) and data[zeros] == 0:
        zeros += 1
    digits: list[int] = []  # base-58 digits, least significant first
    for byte in data[zeros:]:
        carry = byte
        for i, digit in enumerate(digits):
            carry += digit * 256
            digits[i] = carry % 58
            carry //= 58
        while carry:
            digits.append(carry % 58)
            carry //= 58
    return "1" * zeros + "".join(BITCOIN_ALPHABET[d] for d in reversed(digits))


def reference_did_key(raw_public_key: bytes) -> str:
    """did:key of a raw Ed25519 public key, from the multicodec table (ed25519-pub = 0xed, varint 0xed 0x01)."""
    code = 0xED
    varint = bytes([(code & 0x7F) | 0x80, code >> 7])  # unsigned LEB128 of 0xed
    assert varint == b"\xed\x01"
    return "did:key:" + "z" + reference_base58btc(varint + raw_public_key)


def raw_public(seed: bytes) -> bytes:
    """Raw public key straight from `cryptography`, bypassing identity.keys."""
    return (
        Ed25519PrivateKey.from_private_bytes(seed)
        .public_key()
        .public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    )


def test_zero_seed_public_key_is_the_published_one() -> None:
    assert raw_public(ZERO_SEED).hex() == ZERO_SEED_PUBLIC_HEX


def test_zero_seed_did_matches_independent_computation() -> None:
    independent = reference_did_key(bytes.fromhex(ZERO_SEED_PUBLIC_HEX))
    assert independent == ZERO_SEED_DID
    key = SigningKey.from_seed(ZERO_SEED)
    assert key.did == independent
    assert did_from_public_key(key.public_key) == independent


@given(seeds)
@example(ZERO_SEED)
@example(b"\xff" * 32)
def test_did_matches_independent_computation_for_any_seed(seed: bytes) -> None:
    assert SigningKey.from_seed(seed).did == reference_did_key(raw_public(seed))


@given(seeds)
def test_did_key_round_trip(seed: bytes) -> None:
    key = SigningKey.from_seed(seed)
    assert key.seed == seed
    assert key.did.startswith("did:key:z6Mk")  # every Ed25519 did:key starts so
    assert len(key.did) == 56  # and has this length (docs/canonical.md says so)
    assert is_did(key.did)
    recovered = public_key_from_did(key.did)
    assert public_key_bytes(recovered) == raw_public(seed)
    assert did_from_public_key(recovered) == key.did


def test_generate_gives_distinct_valid_keys() -> None:
    a, b = SigningKey.generate(), SigningKey.generate()
    assert a.did != b.did
    assert is_did(a.did) and is_did(b.did)
    assert len(a.seed) == 32


def test_repr_does_not_show_the_seed() -> None:
    key = SigningKey.from_seed(ZERO_SEED)
    text = repr(key)
    assert key.did in text
    assert b64u(key.seed) not in text and key.seed.hex() not in text


# ---------------------------------------------------------------------------------------------
# base58
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("data", "text"),
    [
        (b"", ""),
        (b"\x00", "1"),
        (b"\x00\x00\x00", "111"),
        (b"\x00\x00\x01", "112"),
        (b"\x39", "z"),
        (b"\x3a", "21"),
        (b"Hello World!", "2NEpo7TZRRrLZSi2U"),  # draft-msporny-base58 test vectors
        (
            b"The quick brown fox jumps over the lazy dog.",
            "USm3fpXnKG5EUBx2ndxBDMPVciP5hGey2Jh4NDv6gmeo1LkMeiKrLJUUBk6Z",
        ),
        (bytes.fromhex("0000287fb4cd"), "11233QC4"),
    ],
)
def test_b58_vectors(data: bytes, text: str) -> None:
    assert b58encode(data) == text
    assert b58decode(text) == data
    assert reference_base58btc(data) == text


@given(st.binary(max_size=64))
@example(b"\x00\x00\x00\xff")
@example(b"\x00" * 10)
def test_b58_round_trip(data: bytes) -> None:
    text = b58encode(data)
    assert b58decode(text) == data
    assert text == reference_base58btc(data)
    leading = len(data) - len(data.lstrip(b"\x00"))
    assert text[:leading] == "1" * leading


@given(st.lists(st.binary(max_size=8), max_size=4).map(lambda parts: b"\x00".join(parts)))
def test_b58_round_trip_with_embedded_zeros(data: bytes) -> None:
    assert b58decode(b58encode(data)) == data


@pytest.mark.parametrize("text", ["0", "O", "I", "l", "abc0", "+", " ", "z z", "\u0661"])
def test_b58decode_refuses_characters_outside_the_alphabet(text: str) -> None:
    with pytest.raises(KeyError_):
        b58decode(text)


# ---------------------------------------------------------------------------------------------
# invalid dids
# ---------------------------------------------------------------------------------------------

_ZERO_MULTIKEY = b"\xed\x01" + bytes.fromhex(ZERO_SEED_PUBLIC_HEX)

INVALID_DIDS = [
    "",
    "did:key:",
    "did:key:z",
    ZERO_SEED_DID.replace("did:key:", "did:web:"),
    ZERO_SEED_DID.replace("did:key:", "DID:KEY:"),
    ZERO_SEED_DID.replace("did:key:", "did:key: "),
    ZERO_SEED_DID[len("did:key:") :],  # bare multibase
    "did:key:m" + base64.b64encode(_ZERO_MULTIKEY).decode().rstrip("="),  # base64 multibase, not base58btc
    "did:key:" + reference_base58btc(_ZERO_MULTIKEY),  # missing multibase 'z'
    ZERO_SEED_DID[:-1] + "0",  # bad base58 characters
    ZERO_SEED_DID[:-1] + "l",
    ZERO_SEED_DID[:-1] + "O",
    ZERO_SEED_DID[:-1] + "I",
    ZERO_SEED_DID + " ",
    ZERO_SEED_DID + "\n",
    "did:key:z" + reference_base58btc(b"\xe7\x01" + b"\x02" * 33),  # secp256k1-pub multicodec
    "did:key:z" + reference_base58btc(b"\xec\x01" + bytes(32)),  # x25519-pub multicodec
    "did:key:z" + reference_base58btc(b"\x12\x00" + bytes(32)),  # not a key codec at all
    "did:key:z" + reference_base58btc(b"\xed" + bytes.fromhex(ZERO_SEED_PUBLIC_HEX)),  # truncated varint
    "did:key:z" + reference_base58btc(_ZERO_MULTIKEY[:-1]),  # wrong length: 31-byte key
    "did:key:z" + reference_base58btc(_ZERO_MULTIKEY + b"\x00"),  # wrong length: 33-byte key
    "did:key:z" + reference_base58btc(b"\xed\x01"),  # no key at all
    "did:key:z1" + ZERO_SEED_DID[len("did:key:z") :],  # leading zero byte: a non-canonical encoding
    ZERO_SEED_DID + "1" * 80,  # absurdly long
]


@pytest.mark.parametrize("did", INVALID_DIDS)
def test_invalid_dids_are_refused(did: str) -> None:
    with pytest.raises(KeyError_):
        public_key_from_did(did)
    assert is_did(did) is False


@pytest.mark.parametrize("value", [None, 42, b"did:key:z6Mk", ["did:key:z6Mk"]])
def test_non_string_dids_are_refused(value: object) -> None:
    with pytest.raises(KeyError_):
        public_key_from_did(value)  # type: ignore[arg-type]
    assert is_did(value) is False  # type: ignore[arg-type]


# ---------------------------------------------------------------------------------------------
# sign / verify
# ---------------------------------------------------------------------------------------------


@given(seeds, st.binary(max_size=256))
def test_sign_then_verify(seed: bytes, message: bytes) -> None:
    key = SigningKey.from_seed(seed)
    signature = key.sign(message)
    assert len(signature) == 86 and "=" not in signature  # 64 bytes, unpadded base64url
    assert set(signature) <= set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")
    assert len(b64u_decode(signature)) == 64
    assert verify(key.did, message, signature)
    assert key.sign(message) == signature  # Ed25519 is deterministic


@given(seeds, st.binary(max_size=2048))
def test_signature_is_the_one_cryptography_makes(seed: bytes, message: bytes) -> None:
    """`sign` goes through libsodium; the bytes are OpenSSL's for every key and message (Ed25519 is deterministic)."""
    openssl = Ed25519PrivateKey.from_private_bytes(seed).sign(message)
    assert b64u_decode(SigningKey.from_seed(seed).sign(message)) == openssl


def test_signature_matches_rfc8032_test_vector_2() -> None:
    """RFC 8032 section 7.1, TEST 2: a one-byte message."""
    key = SigningKey.from_seed(bytes.fromhex("4ccd089b28ff96da9db6c346ec114e0f5b8a319f35aba624da8cf6ed4fb8a6fb"))
    expected = (
        "92a009a9f0d4cab8720e820b5f642540a2b27b5416503f8fb3762223ebdb69da"
        "085ac1e43e15996e458f3613d0f11d8c387b2eaeb4302aeeb00d291612bb0c00"
    )
    assert b64u_decode(key.sign(bytes.fromhex("72"))).hex() == expected
    assert public_key_bytes(key.public_key).hex() == "3d4017c3e843895a92b70aa74d1b7ebc9c982ccf2ec4968cc0cd55f12af4660c"


@given(seeds, st.binary(min_size=1, max_size=64), st.data())
def test_verify_refuses_a_tampered_message(seed: bytes, message: bytes, data: st.DataObject) -> None:
    key = SigningKey.from_seed(seed)
    signature = key.sign(message)
    index = data.draw(st.integers(0, len(message) - 1))
    flip = data.draw(st.integers(1, 255))
    tampered = message[:index] + bytes([message[index] ^ flip]) + message[index + 1 :]
    assert not verify(key.did, tampered, signature)
    assert not verify(key.did, message + b"\x00", signature)
    assert not verify(key.did, message[:-1], signature)


def test_verify_refuses_a_signature_by_another_key() -> None:
    alice, bob = SigningKey.from_seed(ZERO_SEED), SigningKey.from_seed(b"\x01" * 32)
    signature = bob.sign(b"hello")
    assert verify(bob.did, b"hello", signature)
    assert not verify(alice.did, b"hello", signature)


@given(seeds, st.binary(min_size=64, max_size=64))
def test_verify_refuses_random_signatures(seed: bytes, junk: bytes) -> None:
    assert not verify(SigningKey.from_seed(seed).did, b"message", b64u(junk))


def test_verify_refuses_a_tampered_signature() -> None:
    key = SigningKey.from_seed(ZERO_SEED)
    raw = bytearray(b64u_decode(key.sign(b"hello")))
    for index in (0, 31, 32, 63):
        bad = bytearray(raw)
        bad[index] ^= 0x01
        assert not verify(key.did, b"hello", b64u(bytes(bad)))


@pytest.mark.parametrize(
    "signature",
    [
        "",
        "a",  # impossible base64 length
        "!!!!",
        "@" * 86,
        b64u(bytes(63)),  # wrong length
        b64u(bytes(65)),
        b64u(bytes(32)),
        b64u(bytes(128)),
    ],
)
def test_verify_refuses_malformed_signatures(signature: str) -> None:
    assert verify(ZERO_SEED_DID, b"hello", signature) is False


def test_verify_refuses_wrong_length_even_with_a_valid_prefix() -> None:
    key = SigningKey.from_seed(ZERO_SEED)
    raw = b64u_decode(key.sign(b"hello"))
    assert not verify(key.did, b"hello", b64u(raw + b"\x00"))
    assert not verify(key.did, b"hello", b64u(raw[:-1]))


@pytest.mark.parametrize("did", INVALID_DIDS[:6])
def test_verify_refuses_invalid_dids(did: str) -> None:
    key = SigningKey.from_seed(ZERO_SEED)
    assert verify(did, b"hello", key.sign(b"hello")) is False


def _respellings(signature: str) -> list[str]:
    """Other spellings of the same 64 signature bytes: padded, standard alphabet, non-zero pad bits."""
    last = BASE64URL.index(signature[-1])
    return [
        signature + "==",
        signature.replace("-", "+").replace("_", "/"),
        signature[:-1] + BASE64URL[last ^ 0b01],
        signature[:10] + "!!!!" + signature[10:],
        signature[:43] + "\n" + signature[43:] + "\n ",
    ]


BASE64URL = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"


def test_verify_accepts_only_the_canonical_signature_spelling() -> None:
    key = SigningKey.from_seed(ZERO_SEED)
    # pick a message whose signature contains '-' or '_' so the alphabet respelling differs
    message = next(m for m in (bytes([i]) for i in range(256)) if set(key.sign(m)) & {"-", "_"})
    signature = key.sign(message)
    for other in _respellings(signature):
        assert other != signature
        assert not verify(key.did, message, other), other


def _openssl_verdict(did: str, message: bytes, raw: bytes) -> bool:
    """What `cryptography` alone says: the definition of an accepted signature."""
    try:
        public_key_from_did(did).verify(raw, message)
    except InvalidSignature:
        return False
    return True


# The identity point as a public key: small order, so R = identity, S = 0 satisfies OpenSSL's equation for
# every message. libsodium refuses such keys; the verdict must still be OpenSSL's.
IDENTITY_POINT = bytes([1]) + bytes(31)


def test_a_signature_libsodium_refuses_gets_openssls_verdict() -> None:
    did = keys.did_from_public_key(Ed25519PublicKey.from_public_bytes(IDENTITY_POINT))
    raw = IDENTITY_POINT + bytes(32)
    assert not keys._sodium_verifies(did, raw, b"any message")  # the fast path under test
    assert _openssl_verdict(did, b"any message", raw)
    assert verify(did, b"any message", b64u(raw))


@given(seeds, st.binary(max_size=128), st.data())
def test_verify_agrees_with_cryptography_on_signatures_and_their_corruptions(
    seed: bytes, message: bytes, data: st.DataObject
) -> None:
    key = SigningKey.from_seed(seed)
    raw = bytearray(b64u_decode(key.sign(message)))
    if data.draw(st.booleans()):
        raw[data.draw(st.integers(0, 63))] ^= data.draw(st.integers(1, 255))
    assert verify(key.did, message, b64u(bytes(raw))) == _openssl_verdict(key.did, message, bytes(raw))


# ---------------------------------------------------------------------------------------------
# base64url helpers
# ---------------------------------------------------------------------------------------------


@given(st.binary(max_size=100))
def test_b64u_round_trip(data: bytes) -> None:
    text = b64u(data)
    assert "=" not in text
    assert b64u_decode(text) == data
    assert text == base64.urlsafe_b64encode(data).decode().rstrip("=")


@pytest.mark.parametrize("text", ["a", "abcde", "A===="])
def test_b64u_decode_refuses_malformed_input(text: str) -> None:
    with pytest.raises(KeyError_):
        b64u_decode(text)
