"""Membership and visibility on a node are a function of the records it holds, not of their order (issue 37): the
same signed membership records, submitted to fresh nodes in different valid orders (each chain in its order, the
chains interleaved differently), give every node the same roles and the same readers, and the reference model
(`identity.spaces.resolve`) agrees."""

from __future__ import annotations

import random
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from identity import canonical, keys, records, spaces, vouching
from identity.space_rules import may_read
from node.agents import service as agents
from node.ops.datadir import initialise
from node.service import Node
from node.spaces import store
from node.spaces.service import nonce

ORDERS = 6


def _signed(key: keys.SigningKey, second: int, **fields: Any) -> dict[str, Any]:
    body = {"schema_version": canonical.SCHEMA_VERSION, "author_id": key.did,
            "created_at": f"2026-12-01T10:00:{second:02d}Z", **fields}  # fmt: skip
    return records.sign(body, key)


def _chain(
    key: keys.SigningKey, space: str, kind: str, member: str, roles: list[str], start: int
) -> list[dict[str, Any]]:
    """One member's chain of `kind`: each record after the one before it; a lowering vouches for no post."""
    order = spaces.CHAIN_ROLE_ORDER[kind]
    out: list[dict[str, Any]] = []
    previous = "none"
    for i, role in enumerate(roles):
        fields: dict[str, Any] = {"kind": kind, "space": space, "member": member, "role": role, "seq": i + 1}
        if out:
            fields["prior"] = records.compute_hash(out[-1])
        if order[role] < order[previous]:
            fields["vouches"] = [vouching.vouch(member, []).as_json()]
        out.append(_signed(key, start + i, **fields))
        previous = role
    return out


def _interleaved(chains: list[list[dict[str, Any]]], rnd: random.Random) -> list[dict[str, Any]]:
    """The chains' records in a random order that keeps each chain's own order."""
    queues = [list(chain) for chain in chains]
    out = []
    while any(queues):
        queue = rnd.choice([q for q in queues if q])
        out.append(queue.pop(0))
    return out


async def test_the_same_records_in_every_order_give_the_same_members_and_readers(
    tmp_path: Path, node_store: Callable[[], str | None]
) -> None:
    owner = keys.SigningKey.generate()  # a self-signing agent, registered on each node below
    b, c, d = (keys.SigningKey.generate().did for _ in range(3))
    creation = _signed(owner, 0, kind="space", name="family", description="", nonce=nonce())
    space = records.compute_hash(creation)
    chains = [
        _chain(owner, space, "space_member", b, ["writer", "reader", "none"], 10),
        _chain(owner, space, "space_member", c, ["reader", "writer"], 20),
        _chain(owner, space, "space_admin", c, ["admin", "none"], 30),
        _chain(owner, space, "space_member", d, ["writer"], 40),
    ]
    every = [creation, *(r for chain in chains for r in chain)]
    held = [spaces.Held(records.compute_hash(r), records.compute_hash(r), r) for r in every]
    expected = spaces.resolve(held, spaces.key_verdicts({}, {})).spaces[space].roles
    everyone = [owner.did, b, c, d]
    outcomes = []
    rnd = random.Random(37)
    for n in range(ORDERS):
        async with owners_node(tmp_path / f"node-{n}", owner, node_store()) as node:
            for record in [creation, *_interleaved(chains, rnd)]:
                await node.spaces.submit(owner.did, record)
            roles = dict(await node.db.read(lambda conn: store.roles(conn, space)))
            readers = {a: space in await node.spaces.readable(a) for a in everyone}
        outcomes.append((roles, readers))
    assert all(outcome == outcomes[0] for outcome in outcomes)
    roles, readers = outcomes[0]
    assert roles == expected
    assert readers == {a: may_read(expected.get(a)) for a in everyone}
    assert (roles.get(b), roles.get(c), roles.get(d)) == (None, "writer", "writer")  # removed; admin then not; writer


@asynccontextmanager
async def owners_node(data: Path, owner: keys.SigningKey, store_url: str | None = None) -> AsyncIterator[Node]:
    """A fresh node in `data` (its database at `store_url`: `node_store`) with the self-signing agent of `owner`
    registered on it, closed on leaving."""
    initialise(data, store_url)
    node = Node(data)
    node.open()
    try:
        await register(node, owner)
        yield node
    finally:
        node.close()


async def register(node: Node, key: keys.SigningKey) -> None:
    """Register on `node` the self-signing agent of `key` (the node keeps no key for it)."""
    record = agents.identity_record(key, "Owner", "", node.node_id)
    await node.db.write(
        lambda c: agents.register(c, name="owner", key=key, keep_key=False, record=record, now_ms=node.now_ms())
    )
