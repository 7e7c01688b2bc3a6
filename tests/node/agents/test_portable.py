"""An identity moves: exported from node A, imported on node B, posts on B signed by the agent, and A
verifies the entry after pulling it from B."""

from __future__ import annotations

import json
import os
import stat
import subprocess

import pytest

from agent import identity_file
from agent.client import BBSClientError, Client
from identity import keys, records
from node.agents import portable
from node.agents import service as agents
from node.errors import InvalidInput
from node.service import Node
from tests.agent.conftest import BBS
from tests.sync.conftest import PeerNode, make_peer  # noqa: F401  (fixture)

pytestmark = pytest.mark.slow


def bbs(*args: str, env: dict[str, str] | None = None) -> str:
    done = subprocess.run([*BBS, *args], capture_output=True, text=True, env={**os.environ, **(env or {})})
    assert done.returncode == 0, done.stderr
    return done.stdout


async def test_identity_moves_between_nodes_and_keeps_verifiable_authorship(make_peer, tmp_path) -> None:  # type: ignore[no-untyped-def]  # noqa: F811
    a: PeerNode = await make_peer("a")
    b: PeerNode = await make_peer("b")
    await a.add_peer(b)
    await b.add_peer(a)
    created = await a.node.agents.create("research", "Research")
    home_post = await a.post(created.agent_id, "Written at home on node A")

    out = tmp_path / "research.id"
    secret = {"BBS_PASSPHRASE": "moving day"}
    bbs("agent", "export", "research", "--data", str(a.node.data.root), "--out", str(out),
        "--passphrase-env", "BBS_PASSPHRASE", env=secret)  # fmt: skip
    assert stat.S_IMODE(out.stat().st_mode) == 0o600
    imported = json.loads(
        bbs(
            "agent",
            "import",
            str(out),
            "--data",
            str(b.node.data.root),
            "--passphrase-env",
            "BBS_PASSPHRASE",
            "--json",
            env=secret,
        )
    )
    assert imported["agent_id"] == created.agent_id
    ident = identity_file.load(out, "moving day")

    # on B the agent proves its key (no API key from A, none from B either) and signs its own records
    async with Client(b.url, signing_key=ident.key) as agent_on_b:
        entry = await agent_on_b.post("Written on node B by the same agent", tags=["travel"])
        link = await agent_on_b.link(str(entry.id), home_post, "supports")
    assert entry.author_id == created.agent_id and link.author_id == created.agent_id

    # B cannot sign for it: without the agent's key a plain post is refused
    async with Client(b.url, api_key=imported["api_key"]) as keyless:
        with pytest.raises(BBSClientError) as err:
            await keyless.post("B cannot sign this")
        assert err.value.code == "agent_signs_own_records"

    # the entry verifies with nothing but the record
    q = "SELECT body FROM records WHERE hash = ?"
    body_b = await b.node.db.read(lambda c: bytes(c.execute(q, (entry.record_hash,)).fetchone()[0]))
    record_hash, decoded = records.check(json.loads(body_b))
    assert record_hash == entry.record_hash and decoded.author_id == created.agent_id

    # node A pulls from B, verifying before it stores, and holds the same bytes
    report = await a.puller().pull_once(b.config)
    assert {o.hash: o.outcome for o in report.outcomes}.get(entry.record_hash) == "saved"
    body_a = await a.node.db.read(lambda c: bytes(c.execute(q, (entry.record_hash,)).fetchone()[0]))
    assert body_a == body_b
    async with Client(a.url, api_key=created.api_key) as at_home:
        seen = await at_home.get_entry(entry.record_hash, _with_links())
    assert seen.entries[0].author_id == created.agent_id
    assert any(link_out.origin_hash == link.origin_hash for link_out in seen.links)


def _with_links():  # type: ignore[no-untyped-def]
    from wire.api import ReadQuery

    return ReadQuery(hops=1)


async def test_an_imported_identity_document_meets_the_submission_rules(node: Node) -> None:
    """`bbs agent import` is a submission: a display name holding a NUL is refused and nothing is registered."""
    key = keys.SigningKey.generate()
    record = agents.identity_record(key, "Ann\x00", "", node.node_id)
    with pytest.raises(InvalidInput) as caught:
        await portable.import_identity(node, "ann", key, record)
    assert (caught.value.code, caught.value.field) == ("nul_character", "$.display_name")
    assert await node.db.read(lambda c: c.execute("SELECT count(*) FROM local_agents").fetchone()[0]) == 0
