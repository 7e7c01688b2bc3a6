"""node.agents.recovery: a node-kept agent's revocation and recovery by the node's agent recovery key
(`POST /v1/agents/{id}/revocation`, `/recovery`), and the refusals of key events signed by the wrong key
(`POST /v1/agents/{id}/key-events`), on a real aiohttp server over a real SQLite node with real Ed25519 keys."""

from __future__ import annotations

import asyncio
import stat
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp.test_utils import TestClient

from identity import keys, records
from node.agents import recovery_file
from node.agents import service as agents
from node.agents import store as agent_store
from node.agents.key_events import kept_rotations, put_back_unless_committed
from node.federation.store import store_epoch
from node.service import Node
from node.store.conn import ConnectionLost
from node.store.db import Database
from node.store.key_fence import SETTLE_AFTER_MS, KeyFence
from tests.conftest import AgentCreds, FakeClock
from tests.node.agents.test_key_events import post_entry, post_signed, record_body, rotation, signed, submit
from tests.node.api_helpers import SelfSigner, count, entry_record, get_json, hash_of, post, problem, self_signer


async def change(client: TestClient, path: str, headers: dict[str, str], body: dict[str, Any], status: int) -> Any:
    resp = await client.post(path, json=body, headers=headers)
    data = await resp.json(content_type=None)
    assert resp.status == status, data
    return data


def recovery_key(node: Node) -> keys.SigningKey:
    key = recovery_file.load(node.data.root / recovery_file.FILE_NAME)
    assert key is not None
    return key


async def test_the_first_rotation_of_a_node_kept_key_sets_the_nodes_recovery_key(
    client: TestClient, node: Node, admin_headers: dict[str, str], make_agent: Callable[[str], Awaitable[AgentCreds]]
) -> None:
    creds = await make_agent("keeper")
    path = node.data.root / recovery_file.FILE_NAME
    assert not path.exists()  # made on first use
    first = await change(client, f"/v1/agents/{creds.agent_id}/signing-key", admin_headers, {}, 201)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert first["key_history"]["recovery"] == recovery_key(node).did != node.node_id  # not the node key
    second = await change(client, f"/v1/agents/{creds.agent_id}/signing-key", admin_headers, {}, 201)
    assert second["key_history"]["recovery"] == recovery_key(node).did  # unchanged
    events = second["key_history"]["events"]
    assert [e["seq"] for e in events] == [1, 2]
    bodies = [await record_body(node, e["address"]) for e in events]
    assert "recovery" in bodies[0] and "recovery" not in bodies[1]


async def test_revoking_a_node_kept_key_vouches_for_what_the_log_holds_and_voids_the_rest(
    client: TestClient, node: Node, admin_headers: dict[str, str], make_agent: Callable[[str], Awaitable[AgentCreds]]
) -> None:
    creds = await make_agent("keeper")
    await change(client, f"/v1/agents/{creds.agent_id}/signing-key", admin_headers, {}, 201)
    stolen = await node.db.read(lambda c: agents.signing_key(c, creds.agent_id))
    assert stolen is not None
    await post_entry(client, creds, "by the owner, before the theft")
    path = f"/v1/agents/{creds.agent_id}/revocation"
    before = await count(node)
    plan = await change(client, path, admin_headers, {"dry_run": True}, 200)
    assert plan["event"] is None and plan["signing_key"] is None and await count(node) == before
    assert plan["vouched"] == 1 and plan["removed_key"] == stolen.did and plan["role"] == "recovery"
    problem(await change(client, path, admin_headers, {"key": creds.agent_id}, 409), 409, "key_not_current", "key")
    assert await count(node) == before
    done = await change(client, path, admin_headers, {"key": stolen.did}, 201)
    assert done["signer"] == recovery_key(node).did and done["vouched"] == 1
    assert done["key_history"]["current_key"] == done["signing_key"] != stolen.did
    event = await record_body(node, done["event"])
    assert event["event"] == "revoke" and event["signing_key"] == recovery_key(node).did
    # the thief's record by the stolen key, dated before the theft, is refused; the owner posts with the new key
    backdated = signed(
        {
            **_unsigned(entry_record(stolen, "backdated", created_ms=node.now_ms() - 60_000)),
            "author_id": creds.agent_id,
        },
        stolen,
    )
    problem(await post_signed(client, creds, backdated, 422), 422, "not_current_key", "$.record.signing_key")
    after = await post_entry(client, creds, "by the owner, after the revocation")
    assert (await record_body(node, after["record_hash"]))["signing_key"] == done["signing_key"]
    resp = await client.post(path, json={}, headers=creds.headers)
    assert resp.status == 403  # admin only


def _unsigned(record: dict[str, Any]) -> dict[str, Any]:
    return records.unsigned(record)


async def test_revoking_an_agent_without_a_recovery_key_is_signed_by_its_current_key_and_sets_one(
    client: TestClient, node: Node, admin_headers: dict[str, str], make_agent: Callable[[str], Awaitable[AgentCreds]]
) -> None:
    creds = await make_agent("keeper")
    done = await change(client, f"/v1/agents/{creds.agent_id}/revocation", admin_headers, {}, 201)
    assert done["role"] == "current" and done["signer"] == creds.agent_id
    assert done["key_history"]["recovery"] == recovery_key(node).did
    again = await change(client, f"/v1/agents/{creds.agent_id}/revocation", admin_headers, {}, 201)
    assert again["role"] == "recovery" and again["removed_key"] == done["signing_key"]


async def test_recovery_replaces_a_thiefs_rotation_and_voids_the_thiefs_key(
    client: TestClient, node: Node, admin_headers: dict[str, str], make_agent: Callable[[str], Awaitable[AgentCreds]]
) -> None:
    creds = await make_agent("keeper")
    first = await change(client, f"/v1/agents/{creds.agent_id}/signing-key", admin_headers, {}, 201)
    kept = await node.db.read(lambda c: agents.signing_key(c, creds.agent_id))
    assert kept is not None and kept.did == first["signing_key"]
    # a thief with a copy of the kept key rotates the identity to its own key (rank `current`, allowed)
    thief = keys.SigningKey.generate()
    theft = rotation(creds.agent_id, kept, thief, [], seq=2, prior=first["event"], created_ms=node.now_ms())
    await submit(client, _as_signer(creds, kept), theft, [], 201)
    by_thief = signed({**_unsigned(entry_record(thief, "the thief's", created_ms=node.now_ms())),
                       "author_id": creds.agent_id}, thief)  # fmt: skip
    await post_signed(client, creds, by_thief, 201)
    path = f"/v1/agents/{creds.agent_id}/revocation"
    problem(await change(client, path, admin_headers, {}, 409), 409, "key_not_current")
    recovered = await change(client, f"/v1/agents/{creds.agent_id}/recovery", admin_headers, {}, 201)
    assert recovered["event_kind"] == "recover" and recovered["replaced_events"] == 1
    assert recovered["removed_key"] == kept.did and recovered["role"] == "recovery"
    history = recovered["key_history"]
    assert history["current_key"] == recovered["signing_key"]
    in_chain = {e["address"]: e["in_chain"] for e in history["events"]}
    assert in_chain[hash_of(theft)] is False and in_chain[recovered["event"]] is True
    again = signed({**_unsigned(entry_record(thief, "the thief again", created_ms=node.now_ms())),
                    "author_id": creds.agent_id}, thief)  # fmt: skip
    problem(await post_signed(client, creds, again, 422), 422, "not_current_key", "$.record.signing_key")
    after = await post_entry(client, creds, "the owner, recovered")
    assert (await record_body(node, after["record_hash"]))["signing_key"] == recovered["signing_key"]


def _as_signer(creds: AgentCreds, key: keys.SigningKey) -> SelfSigner:
    return SelfSigner(creds, key)


async def test_recovery_needs_the_nodes_recovery_key_in_the_history(
    client: TestClient, node: Node, admin_headers: dict[str, str], make_agent: Callable[[str], Awaitable[AgentCreds]]
) -> None:
    creds = await make_agent("keeper")  # never rotated: no recovery key in its history
    before = await count(node)
    data = await change(client, f"/v1/agents/{creds.agent_id}/recovery", admin_headers, {}, 409)
    problem(data, 409, "no_recovery_key")
    who = await self_signer(node, "rover")
    problem(await change(client, f"/v1/agents/{who.agent_id}/recovery", admin_headers, {}, 409), 409, "key_not_kept")
    problem(await change(client, "/v1/agents/nobody/revocation", admin_headers, {}, 404), 404, "agent_not_found")
    problem(await change(client, f"/v1/agents/{creds.agent_id}/recovery", admin_headers, {"x": 1}, 422), 422,
            "validation_error")  # fmt: skip
    assert await count(node) == before + 1  # the self-signer's identity document


# ---- refusals of key events signed by the wrong key (POST /v1/agents/{id}/key-events) ---------------------------


async def test_key_events_signed_by_the_wrong_key_are_refused_and_store_nothing(
    client: TestClient, node: Node, clock: FakeClock
) -> None:
    who = await self_signer(node, "rover")
    now = int(clock() * 1000)
    recovery, new, stranger = keys.SigningKey.generate(), keys.SigningKey.generate(), keys.SigningKey.generate()
    # a rotation not signed by the current key
    by_stranger = rotation(who.agent_id, stranger, new, [], created_ms=now)
    before = await count(node)
    problem(await submit(client, who, by_stranger, [], 422), 422, "unauthorized_key_event", "$.record")
    assert await count(node) == before
    # the first rotation sets a recovery key
    first = {**_unsigned(rotation(who.agent_id, who.key, new, [], created_ms=now)), "recovery": recovery.did}
    first = signed(first, who.key)
    await submit(client, who, first, [], 201)
    before = await count(node)

    def event(kind: str, signer: keys.SigningKey, installs: keys.SigningKey, prior: str | None, seq: int) -> Any:
        body = {**_unsigned(rotation(who.agent_id, signer, installs, [], seq=seq, prior=prior, created_ms=now)),
                "event": kind}  # fmt: skip
        subject = new.did if prior is not None else who.agent_id
        body["vouches"] = [{**body["vouches"][0], "subject": subject}]
        return signed(body, signer)

    fresh = keys.SigningKey.generate()
    cases = [
        ("revoke by a key that is not the recovery key", event("revoke", stranger, fresh, hash_of(first), 2)),
        ("recover by the current key", event("recover", new, fresh, hash_of(first), 2)),
        ("recover by a stranger", event("recover", stranger, fresh, None, 1)),
        ("recovery key changed by the current key",
         signed({**_unsigned(event("rotate", new, fresh, hash_of(first), 2)), "recovery": stranger.did}, new)),
    ]  # fmt: skip
    for what, record in cases:
        problem(await submit(client, who, record, [], 422), 422, "unauthorized_key_event", "$.record")
        assert await count(node) == before, what
    history = (await get_json(client, f"/v1/agents/{who.agent_id}", who))["key_history"]
    assert history["current_key"] == new.did and history["recovery"] == recovery.did
    # the recovery key's own revoke is accepted: the refusals above were for the signer alone
    good = event("revoke", recovery, fresh, hash_of(first), 2)
    out = await submit(client, who, good, [], 201)
    assert out["key_history"]["current_key"] == fresh.did and out["key_history"]["recovery"] == recovery.did


async def test_revoke_and_recover_refuse_a_database_restored_from_before_a_rotation(
    client: TestClient, node: Node, admin_headers: dict[str, str], make_agent: Callable[[str], Awaitable[AgentCreds]]
) -> None:
    """The key fence lists the key a rotation took out; a database that keeps it again (restored from before the
    rotation) does not recover from it: building on it would void the newer key's records."""
    creds = await make_agent("keeper")
    await change(client, f"/v1/agents/{creds.agent_id}/signing-key", admin_headers, {}, 201)  # sets the recovery key
    middle = await node.db.read(lambda c: agents.signing_key(c, creds.agent_id))
    assert middle is not None
    await change(client, f"/v1/agents/{creds.agent_id}/revocation", admin_headers, {}, 201)  # fences `middle`
    fenced = [r["retired"] for r in node.sealing.key_fence.rotations() if r["identity"] == creds.agent_id]
    assert fenced == [creds.agent_id, middle.did]
    await node.db.write(lambda c: agent_store.set_key_seed_txn(c, creds.agent_id, middle.seed))  # as a restore would
    node.sealing.forget(creds.agent_id)
    before = await count(node)
    data = await change(client, f"/v1/agents/{creds.agent_id}/recovery", admin_headers, {"dry_run": True}, 409)
    problem(data, 409, "signing_key_rotated_out")
    problem(await change(client, f"/v1/agents/{creds.agent_id}/recovery", admin_headers, {}, 409), 409,
            "signing_key_rotated_out")  # fmt: skip
    problem(await change(client, f"/v1/agents/{creds.agent_id}/revocation", admin_headers, {}, 409), 409,
            "key_not_current")  # fmt: skip
    assert await count(node) == before


async def test_the_rotations_another_process_would_learn_are_those_leading_to_the_kept_key(
    client: TestClient, node: Node, admin_headers: dict[str, str], make_agent: Callable[[str], Awaitable[AgentCreds]]
) -> None:
    """What `Node._foreign_write_txn` hands the key fence (record 92), on this run's store: the node's own rotation
    of a kept key, not a thief's rotation after it, nor anything of an agent never rotated."""
    creds = await make_agent("keeper")
    await make_agent("never-rotated")
    first = await change(client, f"/v1/agents/{creds.agent_id}/signing-key", admin_headers, {}, 201)
    kept = await node.db.read(lambda c: agents.signing_key(c, creds.agent_id))
    assert kept is not None
    assert await node.db.read(agent_store.kept_with_key_events) == [(creds.agent_id, kept.seed)]

    async def learned() -> list[tuple[str, str, str, str]]:
        node_key = node.node_keys.signer.keys[-1].did
        return await node.db.write(lambda c: kept_rotations(c, node.sealing.authority, node.node_id, node_key))

    ours = (creds.agent_id, creds.agent_id, first["signing_key"], first["event"])
    assert await learned() == [ours]
    thief = keys.SigningKey.generate()
    theft = rotation(creds.agent_id, kept, thief, [], seq=2, prior=first["event"], created_ms=node.now_ms())
    await submit(client, _as_signer(creds, kept), theft, [], 201)
    assert await learned() == [ours]  # the thief's rotation took out the kept key: fencing it would refuse recovery


async def test_a_failed_rotation_takes_its_fence_entry_out_only_when_the_database_lacks_its_event(
    client: TestClient, node: Node, admin_headers: dict[str, str], make_agent: Callable[[str], Awaitable[AgentCreds]]
) -> None:
    """`put_back_unless_committed`, on this run's store: a write reported failed may have committed, so the fence
    entry goes only when the log lacks its key event, and is marked committed when the log holds it; when the answer
    cannot be trusted (a cancelled wait, a connection lost on PostgreSQL) or read, it stays unmarked, for
    `NodeKeys.settle` to decide later."""
    creds = await make_agent("keeper")
    done = await change(client, f"/v1/agents/{creds.agent_id}/signing-key", admin_headers, {}, 201)
    fence = node.sealing.key_fence
    assert [r["committed"] for r in fence.rotations() if r["event"] == done["event"]] == ["1"]  # marked on success

    def unmarked(event: str) -> dict[str, str]:
        """An entry as a rotation's job writes it before its commit (its commit not known yet)."""
        new = keys.SigningKey.generate().did
        return fence.record(creds.agent_id, done["signing_key"], new, event, "x", 0)

    failed = RuntimeError("the COMMIT's answer was lost")
    held = unmarked(done["event"])
    await put_back_unless_committed(node.db, fence, [held], failed)
    assert held not in fence.rotations() and {**held, "committed": "1"} in fence.rotations()  # in the log: marked
    never = unmarked("e" * 64)
    for untrusted in (asyncio.CancelledError(), ConnectionLost("server closed the connection unexpectedly")):
        await put_back_unless_committed(node.db, fence, [never], untrusted)
        assert never in fence.rotations()  # unmarked, left to settle
    await put_back_unless_committed(node.db, fence, [], failed)  # the job failed before writing the fence
    await put_back_unless_committed(node.db, fence, [never], failed)
    assert never not in fence.rotations()  # not in the log: taken out
    again = unmarked("f" * 64)
    closed = Database(node.db.pg_url or node.db.path)
    closed.close()  # a database that cannot be asked
    await put_back_unless_committed(closed, fence, [again], failed)
    assert again in fence.rotations()
    assert KeyFence(fence.path).rotations() == fence.rotations()  # the file says the same


async def test_an_entry_whose_commit_was_never_known_is_settled_while_serving(
    client: TestClient,
    node: Node,
    admin_headers: dict[str, str],
    make_agent: Callable[[str], Awaitable[AgentCreds]],
    clock: FakeClock,
) -> None:
    """A fence entry left unmarked (its rotation's wait cancelled, its connection lost at COMMIT) refuses the key it
    names, saying so; `NodeKeys.settle` (every 30 s while serving, node/web/background.py) forgets it a minute on
    when its event is not in the log, and the agent's writes go again; one whose event is in the log is marked."""
    creds = await make_agent("keeper")
    fence = node.sealing.key_fence
    epoch = await node.db.read(store_epoch)
    fence.record(creds.agent_id, creds.agent_id, keys.SigningKey.generate().did, "c" * 64, epoch, node.now_ms())
    refused = await post(client, creds, 409, content="while the rotation's commit is unknown")
    assert refused["code"] == "signing_key_rotated_out" and "being rotated out" in refused["detail"], refused
    await node.node_keys.settle()
    assert len(fence.rotations()) == 1  # not a minute yet: it may be committing in another process
    clock.advance(SETTLE_AFTER_MS / 1000 + 1)
    await node.node_keys.settle()
    assert fence.rotations() == [] and not fence.unsettled()
    await post(client, creds, content="the rotation never committed: the key signs again")

    done = await change(client, f"/v1/agents/{creds.agent_id}/signing-key", admin_headers, {}, 201)
    fence.put_back(fence.rotations()[-1])  # as if the mark after the commit were lost
    fence.record(creds.agent_id, creds.agent_id, done["signing_key"], done["event"], epoch, node.now_ms())
    assert fence.unsettled()
    await node.node_keys.settle()
    assert [r["committed"] for r in fence.rotations()] == ["1"]
