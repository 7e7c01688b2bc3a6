"""A rotated agent's task lease and its re-signed entry reaching a peer (issue 36; docs/format-v3.md 3.6): two real
nodes on loopback, real keys. Node A keeps the agent's key and rotates it; the agent's task events after that are
signed by the new key (`signing_key`), the lease A grants as the task's home node is honoured, and the agent
re-signs an entry of its first key. B pulls from A and answers the same: the same records, the same task and lease,
the same entry shown (by the new key), no equivocation, the same digest.
"""

from __future__ import annotations

import json
import sqlite3
from typing import Any

import msgspec

from identity import canonical, records
from node.agents import service as agents
from node.spaces.sight import OPERATOR
from tests.sync.conftest import PeerNode
from tests.sync.test_rotation import kinds
from wire.api import SignedSubmission
from wire.workflows import DeclareTask, LeaseIn


async def body_of(peer: PeerNode, record_hash: str) -> dict[str, Any]:
    def run(conn: sqlite3.Connection) -> bytes:
        return bytes(conn.execute("SELECT body FROM records WHERE hash = ?", (record_hash,)).fetchone()[0])

    return dict(json.loads(await peer.node.db.read(run)))


async def shown(peer: PeerNode, record_hash: str) -> tuple[str, bool]:
    """(signature shown, equivocated) of an entry address on `peer`."""
    out = await peer.node.db.read(
        lambda c: c.execute(
            "SELECT signature, EXISTS (SELECT 1 FROM equivocations q WHERE q.hash = e.record_hash)"
            " FROM entries e WHERE record_hash = ?",
            (record_hash,),
        ).fetchone()
    )
    return str(out[0]), bool(out[1])


async def test_a_rotated_agents_lease_and_re_signed_entry_reach_b_with_the_same_answers(make_peer) -> None:  # type: ignore[no-untyped-def]
    a, b = await make_peer("a"), await make_peer("b")
    await a.add_peer(b)
    await b.add_peer(a)
    writer = await a.agent()
    first = await a.post(writer, "said by the first key")
    await a.node.workflows.declare(writer, DeclareTask(key="t-before", title="declared by the first key"))
    async with a.session.post(f"{a.url}/v1/agents/{writer}/signing-key", headers=a.admin) as resp:
        rotated = await resp.json()
        assert resp.status == 201, rotated
    new_key = await a.node.db.read(lambda c: agents.signing_key(c, writer))
    assert new_key is not None and new_key.did == rotated["signing_key"]

    # task events after the rotation: signed by the new key; the lease A grants as home node is honoured
    _, created = await a.node.workflows.declare(writer, DeclareTask(key="t-after", title="declared after"))
    assert created
    leased, granted = await a.node.workflows.lease(writer, "t-after", LeaseIn())
    assert granted and leased.lease is not None and leased.lease.holder == writer
    again, _ = await a.node.workflows.lease(writer, "t-before", LeaseIn())
    assert again.lease is not None and again.lease.holder == writer
    declared = [
        r for r in (await kinds(a))["task_event"] if r.get("task_key") == "t-after" and r["author_id"] == writer
    ]
    assert declared and all(r["signing_key"] == new_key.did for r in declared)

    # the entry of the first key, re-signed by the new key: the same address, shown by the new key, no equivocation
    old = await body_of(a, first)
    body = {**records.unsigned(old), "signing_key": new_key.did}
    resigned = {**body, "signature": new_key.sign(canonical.canonical_bytes(body))}
    assert records.compute_hash(resigned) == first
    entry, _ = await a.node.entries.post(writer, SignedSubmission(record=resigned), None)
    assert entry.record_hash == first
    assert await shown(a, first) == (resigned["signature"], False)

    report = await b.puller().pull_once(a.config)
    outcomes = [o.outcome for o in report.outcomes]
    assert set(outcomes) == {"saved"}, outcomes
    assert await kinds(a) == await kinds(b)  # the same records, byte for byte: both versions of the entry
    assert await shown(b, first) == (resigned["signature"], False)
    for key in ("t-before", "t-after"):
        on_a, on_b = await a.node.workflows.task(key, OPERATOR), await b.node.workflows.task(key, OPERATOR)
        assert on_b.lease is not None and on_b.lease.holder == writer
        assert (on_a.status, on_a.lease) == (on_b.status, on_b.lease), (key, msgspec.to_builtins(on_b))
    assert await a.digest() == await b.digest()
    overflow = await b.node.db.read(
        lambda c: c.execute("SELECT overflow FROM peers WHERE node_id = ?", (a.node.node_id,)).fetchone()[0]
    )
    assert overflow == 0
    assert await b.node.db.read(lambda c: c.execute("SELECT count(*) FROM equivocations").fetchone()[0]) == 0
    # pulling again changes nothing
    assert [o.outcome for o in (await b.puller().pull_once(a.config)).outcomes] == []
    assert await a.digest() == await b.digest()
