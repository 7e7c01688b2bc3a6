"""Hosting records over REST on a real aiohttp server (issue 38; docs/spaces.md, "Which nodes host a space"): the
owner and admins name and remove a space's hosting nodes, the node of creation hosts implicitly, the `space_hosts`
projection follows the chains and survives `bbs rebuild`, and every bad input is a 4xx problem with nothing stored."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient

from identity import canonical, keys, records
from node.features import LOG
from node.service import Node
from node.spaces import store
from node.spaces.service import nonce
from node.store import db, projections
from tests.conftest import AgentCreds
from tests.node.api_helpers import self_signer
from tests.node.spaces.test_routes import MakeAgent, call, record_count

NODE_B = keys.SigningKey.from_seed(b"\x0b" * 32).did
NODE_C = keys.SigningKey.from_seed(b"\x0c" * 32).did


async def hosts_of(client: TestClient, space: str, who: AgentCreds) -> list[str]:
    shown = await call(client, "GET", f"/v1/spaces/{space}", who, 200)
    out: list[str] = shown["hosts"]
    return out


async def host_records(node: Node, space: str) -> list[dict[str, Any]]:
    rows = await node.db.read(
        lambda c: c.execute("SELECT body FROM records WHERE kind = 'space_host' ORDER BY seq").fetchall()
    )
    return [r for r in (json.loads(bytes(row[0])) for row in rows) if r["space"] == space]


async def test_the_owner_and_admins_name_hosts_and_take_them_away(
    client: TestClient, node: Node, make_agent: MakeAgent
) -> None:
    owner, admin, writer = await make_agent("owner"), await make_agent("admin"), await make_agent("writer")
    space = (await call(client, "POST", "/v1/spaces", owner, 201, {"name": "family"}))["space_id"]
    # a node-kept owner's space: its creation node is named by a signed record the node made with the creation
    assert await hosts_of(client, space, owner) == [node.node_id]
    assert [(r["node"], r["role"], r["seq"], r["author_id"]) for r in await host_records(node, space)] == [
        (node.node_id, "host", 1, owner.agent_id)
    ]
    members = f"/v1/spaces/{space}/members"
    await call(client, "POST", members, owner, 201, {"agent_id": admin.agent_id, "role": "admin"})
    await call(client, "POST", members, owner, 201, {"agent_id": writer.agent_id, "role": "writer"})
    hosts = f"/v1/spaces/{space}/hosts"
    named = await call(client, "POST", hosts, admin, 201, {"node": NODE_B, "role": "host"})
    assert named["created"] and named["address"]
    assert await hosts_of(client, space, writer) == sorted([node.node_id, NODE_B])  # every member sees the hosts
    again = await call(client, "POST", hosts, owner, 200, {"node": NODE_B, "role": "host"})
    assert again == {"space_id": space, "address": None, "created": False}  # no change: nothing signed
    await call(client, "DELETE", f"{hosts}/{NODE_B}", owner, 201)
    assert await hosts_of(client, space, owner) == [node.node_id]
    assert not (await call(client, "DELETE", f"{hosts}/{NODE_B}", owner, 200))["created"]
    await call(client, "POST", hosts, owner, 201, {"node": NODE_B, "role": "host"})  # a third record of its chain
    chain_b = [(r["role"], r["seq"]) for r in await host_records(node, space) if r["node"] == NODE_B]
    assert chain_b == [("host", 1), ("none", 2), ("host", 3)]
    await call(client, "DELETE", f"{hosts}/{node.node_id}", admin, 201)  # even the creation node, by the admins' word
    assert await hosts_of(client, space, owner) == [NODE_B]


async def test_a_self_signing_owners_node_hosts_implicitly_until_a_chain_names_it(
    client: TestClient, node: Node
) -> None:
    who = await self_signer(node, "rover")
    creation = records.sign(
        {
            "kind": "space",
            "schema_version": canonical.SCHEMA_VERSION,
            "author_id": who.agent_id,
            "created_at": canonical.now_created_at(),
            "name": "rover's",
            "description": "",
            "nonce": nonce(),
        },
        who.key,
    )
    space = (await call(client, "POST", "/v1/spaces", who.creds, 201, {"record": creation}))["space_id"]
    assert await hosts_of(client, space, who.creds) == [node.node_id]  # created here: implicit
    assert await host_records(node, space) == []

    def signed(node_id: str, role: str, seq: int, prior: str | None = None) -> dict[str, Any]:
        unsigned: dict[str, Any] = {
            "kind": "space_host",
            "schema_version": canonical.SCHEMA_VERSION,
            "author_id": who.agent_id,
            "created_at": canonical.now_created_at(),
            "space": space,
            "node": node_id,
            "role": role,
            "seq": seq,
        }
        if prior is not None:
            unsigned["prior"] = prior
        return records.sign(unsigned, who.key)

    hosts = f"/v1/spaces/{space}/hosts"
    first = signed(NODE_C, "host", 1)
    made = await call(client, "POST", hosts, who.creds, 201, {"record": first})
    assert made["address"] == records.compute_hash(first)
    assert not (await call(client, "POST", hosts, who.creds, 200, {"record": first}))["created"]  # idempotent
    assert await hosts_of(client, space, who.creds) == sorted([node.node_id, NODE_C])
    here = signed(node.node_id, "host", 1)
    await call(client, "POST", hosts, who.creds, 201, {"record": here})
    await call(
        client, "POST", hosts, who.creds, 201, {"record": signed(node.node_id, "none", 2, records.compute_hash(here))}
    )
    assert await hosts_of(client, space, who.creds) == [NODE_C]  # its chain ends in none: the implicit rule yields
    fork = signed(NODE_C, "none", 2, "f" * 64)
    problem = await call(client, "POST", hosts, who.creds, 409, {"record": fork})
    assert problem["code"] == "unknown_prior"


async def test_every_bad_hosting_input_is_a_problem_and_stores_nothing(
    client: TestClient, node: Node, make_agent: MakeAgent
) -> None:
    owner, reader, eve = await make_agent("owner"), await make_agent("reader"), await make_agent("eve")
    space = (await call(client, "POST", "/v1/spaces", owner, 201, {"name": "family"}))["space_id"]
    await call(
        client, "POST", f"/v1/spaces/{space}/members", owner, 201, {"agent_id": reader.agent_id, "role": "reader"}
    )
    member_record = (await host_records(node, space))[0]
    before = await record_count(node)
    hosts = f"/v1/spaces/{space}/hosts"
    cases: list[tuple[str, str, AgentCreds, Any, int, str, str | None]] = [
        ("POST", hosts, owner, {"node": "node-b", "role": "host"}, 422, "validation_error", "$.node"),
        ("POST", hosts, owner, {"role": "host"}, 422, "validation_error", "$.node"),
        ("POST", hosts, owner, {"node": NODE_B}, 422, "validation_error", "$.role"),
        ("POST", hosts, owner, {"node": NODE_B, "role": "relay"}, 422, "validation_error", "$.role"),
        ("POST", hosts, owner, {"node": NODE_B, "role": "host", "why": 1}, 422, "validation_error", "$.why"),
        ("POST", hosts, owner, {"node": NODE_B, "record": member_record}, 422, "validation_error", "$.node"),
        (
            "POST",
            hosts,
            owner,
            {"record": {"kind": "space_member", "space": space}},
            422,
            "record_malformed",
            "$.record.kind",
        ),
        (
            "POST",
            hosts,
            owner,
            {"record": {**member_record, "space": "1" * 64}},
            422,
            "space_mismatch",
            "$.record.space",
        ),
        ("POST", hosts, owner, {"record": {**member_record, "node": NODE_B}}, 422, "record_bad_signature", None),
        ("POST", hosts, reader, {"node": NODE_B, "role": "host"}, 403, "not_a_space_admin", None),
        ("POST", hosts, eve, {"node": NODE_B, "role": "host"}, 404, "unknown_space", "space_id"),
        (
            "POST",
            f"/v1/spaces/{'0' * 64}/hosts",
            owner,
            {"node": NODE_B, "role": "host"},
            404,
            "unknown_space",
            "space_id",
        ),
        ("DELETE", f"{hosts}/{node.node_id}", reader, None, 403, "not_a_space_admin", None),
        ("DELETE", f"{hosts}/{node.node_id}", eve, None, 404, "unknown_space", "space_id"),
        ("DELETE", f"{hosts}/not-a-node", owner, None, 422, "validation_error", "node_id"),
        ("POST", "/v1/spaces/nope/hosts", owner, {"node": NODE_B, "role": "host"}, 404, "unknown_space", "space_id"),
    ]
    for method, path, who, body, status, code, field in cases:
        problem = await call(client, method, path, who, status, body)
        assert problem["code"] == code, (method, path, body, problem)
        if field is not None:
            assert problem["field"] == field, (method, path, body, problem)
    assert await record_count(node) == before
    assert await hosts_of(client, space, owner) == [node.node_id]


async def test_rebuild_gives_the_same_hosts(node: Node, make_agent: MakeAgent) -> None:
    owner = await make_agent("owner")
    one = await node.spaces.create(owner.agent_id, "one", "")
    two = await node.spaces.create(owner.agent_id, "two", "")
    await node.spaces.set_host(owner.agent_id, one.space_id, NODE_B, "host")
    await node.spaces.set_host(owner.agent_id, two.space_id, node.node_id, "none")

    def rebuilt(conn: Any) -> tuple[list[tuple[object, ...]], list[tuple[object, ...]]]:
        before = sorted(tuple(r) for r in projections.snapshot(conn)["space_hosts"])
        projections.rebuild(conn)
        return before, sorted(tuple(r) for r in projections.snapshot(conn)["space_hosts"])

    before, after = await node.db.write(rebuilt)
    assert before == after == sorted([(one.space_id, node.node_id), (one.space_id, NODE_B)])
    assert await node.db.read(lambda c: store.hosted_by(c, NODE_B)) == {one.space_id}
    assert await node.db.read(lambda c: store.hosted_by(c, node.node_id)) == {one.space_id}


@pytest.mark.sqlite_only(reason="migration 0036 is a SQLite migration; PostgreSQL starts from the baseline")
def test_the_migration_makes_the_node_of_creation_host_the_spaces_created_here(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """0036 on a database of before it: a space created here (its creation's origin `local`) is hosted by this
    node; one that came from elsewhere by nobody named (no `space_host` record was taken before)."""
    conn = db.connect(tmp_path / "node.sqlite", log=LOG)
    every = db.migrations()
    monkeypatch.setattr(db, "migrations", lambda: [m for m in every if m[0] < 36])
    db.migrate(conn)
    monkeypatch.setattr(db, "migrations", lambda: every)
    here, there = "a" * 64, "b" * 64
    with db.transaction(conn, immediate=True):
        conn.execute("INSERT INTO node_meta (key, value) VALUES ('node_id', ?)", (NODE_C,))
        for seq, (space, origin) in enumerate([(here, "local"), (there, NODE_B)], start=1):
            conn.execute(
                "INSERT INTO records (hash, version, kind, author_id, created_at, created_ms, scope, origin,"
                " received_ms, body) VALUES (?, ?, 'space', 'did:key:zowner', '2026-01-01T00:00:00Z', 0, 'local',"
                " ?, 0, x'7b7d')",
                (space, space, origin),
            )
            conn.execute(
                "INSERT INTO space_records (seq, space_id, kind, author_id) VALUES (?, ?, 'space', 'did:key:zowner')",
                (seq, space),
            )
            conn.execute(
                "INSERT INTO spaces (space_id, owner, name, description, created_at)"
                " VALUES (?, 'did:key:zowner', 'n', '', '2026-01-01T00:00:00Z')",
                (space,),
            )
    assert db.migrate(conn) >= 36
    assert [tuple(r) for r in conn.execute("SELECT space_id, node_id FROM space_hosts")] == [(here, NODE_C)]
    conn.close()


@pytest.mark.sqlite_only(reason="migration 0037 is a SQLite migration; PostgreSQL starts from the baseline")
def test_the_migration_federates_a_spaces_records_but_its_tasks_and_what_was_signed_local(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """0037 on a database of before it: each record's space is filled in; a space's records stored `local` by part 1
    become federated, but for its task events, the node's own records in it (twin notices) and an entry its author
    signed `local`; public records keep theirs."""
    conn = db.connect(tmp_path / "node.sqlite", log=LOG)
    every = db.migrations()
    monkeypatch.setattr(db, "migrations", lambda: [m for m in every if m[0] < 37])
    db.migrate(conn)
    monkeypatch.setattr(db, "migrations", lambda: every)
    space = "c" * 64
    rows = [  # (hash, kind, author, scope, body)
        ("01", "space", "did:key:zowner", "local", {"kind": "space"}),
        ("02", "entry", "did:key:zowner", "local", {"kind": "entry", "space": space, "scope": "federation"}),
        ("03", "entry", "did:key:zowner", "local", {"kind": "entry", "space": space, "scope": "local"}),
        ("04", "task_event", "did:key:zowner", "local", {"kind": "task_event", "space": space}),
        ("05", "entry", NODE_C, "local", {"kind": "entry", "space": space, "scope": "federation"}),
        ("06", "entry", "did:key:zowner", "federation", {"kind": "entry", "scope": "federation"}),
    ]
    with db.transaction(conn, immediate=True):
        conn.execute("INSERT INTO node_meta (key, value) VALUES ('node_id', ?)", (NODE_C,))
        for record_hash, kind, author, scope, body in rows:
            conn.execute(
                "INSERT INTO records (hash, version, kind, author_id, created_at, created_ms, scope, origin,"
                " received_ms, body) VALUES (?, ?, ?, ?, '2026-01-01T00:00:00Z', 0, ?, 'local', 0, ?)",
                (record_hash, record_hash, kind, author, scope, json.dumps(body).encode()),
            )
    assert db.migrate(conn) >= 37
    got = [tuple(r) for r in conn.execute("SELECT hash, space, scope FROM records ORDER BY hash")]
    assert got == [
        ("01", "01", "federation"),  # a creation is its own space
        ("02", space, "federation"),
        ("03", space, "local"),  # signed local by its author
        ("04", space, "local"),  # a task event of a space stays on its node
        ("05", space, "local"),  # the node's own (a twin notice)
        ("06", None, "federation"),
    ]
    conn.close()
