"""node/store/sealing.py: the signing-key cache, checks of author-signed records, the hash-retry loop, the crypto
threads."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from identity import keys, records
from node.agents import service as agents
from node.errors import Conflict, Forbidden, InvalidInput
from node.service import Node
from node.store.sealing import (
    MAX_FUTURE_SKEW_MS,
    MAX_HASH_RETRIES,
    OWN_KEY,
    HashTaken,
    agent_signs_own_records,
    record_error,
    sign_and_check,
    until_hash_free,
)
from tests.conftest import AgentCreds, FakeClock
from tests.node.api_helpers import entry_record, self_signer


def unsigned_entry(key: keys.SigningKey, created_ms: int, content: str = "sealed here") -> dict[str, Any]:
    """The fields of an entry record by `key`'s agent, before signing."""
    record = entry_record(key, content, created_ms=created_ms)
    del record["signature"]
    return record


def test_sign_and_check_makes_a_record_any_node_accepts() -> None:
    key = keys.SigningKey.generate()
    record, record_hash, decoded = sign_and_check(unsigned_entry(key, 1_700_000_000_000), key)
    assert records.verify(record) == record_hash
    assert decoded.author_id == key.did and decoded.content == "sealed here"


def test_sign_and_check_refuses_a_record_breaking_a_rule() -> None:
    key = keys.SigningKey.generate()
    bad = unsigned_entry(key, 1_700_000_000_000) | {"confidence": 2.0}
    with pytest.raises(InvalidInput) as caught:
        sign_and_check(bad, key)
    assert caught.value.code.startswith("record_") and caught.value.field == "$.confidence"


def test_record_error_names_the_field_under_its_prefix() -> None:
    exc = records.RecordError("malformed", "bad", field="$.links[0].target")
    error = record_error(exc, "$.record")
    assert (error.field, error.code, str(error)) == ("$.record.links[0].target", "record_malformed", "bad")
    assert record_error(exc).field == "$.links[0].target"


def test_agent_signs_own_records_is_one_error_with_a_reason() -> None:
    with pytest.raises(InvalidInput) as caught:
        agent_signs_own_records()
    assert (caught.value.code, str(caught.value)) == ("agent_signs_own_records", OWN_KEY)
    with pytest.raises(InvalidInput, match="only links"):
        agent_signs_own_records("only links")


async def test_signing_keys_are_cached_until_forgotten(node: Node, make_agent: Any) -> None:
    kept: AgentCreds = await make_agent("kept")
    signer = await self_signer(node, "own")
    assert (await node.sealing.signer(kept.agent_id)).did == kept.agent_id
    assert await node.sealing.signing_key(signer.agent_id) is None
    with pytest.raises(InvalidInput) as caught:
        await node.sealing.signer(signer.agent_id)
    assert caught.value.code == "agent_signs_own_records"

    # An agent registered after its absence was cached is found only once the cache forgets it.
    later = keys.SigningKey.generate()
    assert await node.sealing.signing_key(later.did) is None
    record = agents.identity_record(later, "Later", "", node.node_id)
    await node.db.write(
        lambda c: agents.register(c, name="later", key=later, keep_key=True, record=record, now_ms=node.now_ms())
    )
    assert await node.sealing.signing_key(later.did) is None
    node.sealing.forget(later.did)
    assert (await node.sealing.signer(later.did)).did == later.did


async def test_check_signed_checks_kind_rules_author_and_clock(node: Node, clock: FakeClock) -> None:
    alice, bob = await self_signer(node, "alice"), await self_signer(node, "bob")
    record = entry_record(alice.key, "mine", created_ms=node.now_ms())
    sealed_record, record_hash, decoded = node.sealing.check_signed(record, "entry", alice.agent_id)
    assert sealed_record is record and record_hash == records.compute_hash(record)
    assert decoded.content == "mine"

    with pytest.raises(InvalidInput) as wrong_kind:
        node.sealing.check_signed(record, "link", alice.agent_id)
    assert (wrong_kind.value.code, wrong_kind.value.field) == ("record_malformed", "$.record.kind")
    with pytest.raises(Forbidden) as not_author:
        node.sealing.check_signed(record, "entry", bob.agent_id)
    assert not_author.value.field == "$.record.author_id"
    tampered = dict(record, content="not what was signed")
    with pytest.raises(InvalidInput) as bad_signature:
        node.sealing.check_signed(tampered, "entry", alice.agent_id)
    assert bad_signature.value.code.startswith("record_")
    assert bad_signature.value.field is not None and bad_signature.value.field.startswith("$.record")

    ahead = entry_record(alice.key, "from the future", created_ms=node.now_ms() + MAX_FUTURE_SKEW_MS + 1)
    with pytest.raises(InvalidInput) as skew:
        node.sealing.check_signed(ahead, "entry", alice.agent_id)
    assert (skew.value.code, skew.value.field) == ("clock_skew", "$.record.created_at")
    clock.advance(1)  # the same record is fine once the node's clock has caught up
    assert node.sealing.check_signed(ahead, "entry", alice.agent_id)[1] == records.compute_hash(ahead)


async def test_until_hash_free_reseals_between_tries_and_gives_up_with_409() -> None:
    tries: list[int] = []
    resealed: list[list[Any]] = []

    async def write() -> str:
        tries.append(len(tries))
        if len(tries) < 3:
            raise HashTaken([f"taken {len(tries)}"])
        return "stored"

    async def reseal(taken: list[Any]) -> None:
        resealed.append(taken)

    assert await until_hash_free(write, reseal, "entry") == "stored"
    assert resealed == [["taken 1"], ["taken 2"]]

    async def always_taken() -> str:
        raise HashTaken(["again"])

    resealed.clear()
    with pytest.raises(Conflict) as caught:
        await until_hash_free(always_taken, reseal, "message")
    assert caught.value.code == "hash_taken"
    assert str(caught.value) == "could not find a free created_at for this message; retry"
    assert len(resealed) == MAX_HASH_RETRIES


async def test_off_loop_runs_one_record_inline_and_several_on_the_crypto_threads(node: Node) -> None:
    def thread_name() -> str:
        return threading.current_thread().name

    assert await node.sealing.off_loop(1, thread_name) == threading.current_thread().name
    assert (await node.sealing.off_loop(2, thread_name)).startswith("bbs-crypto")
    node.sealing.close()  # stops the threads; the next batch starts them again
    assert (await node.sealing.off_loop(5, thread_name)).startswith("bbs-crypto")
