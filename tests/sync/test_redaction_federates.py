"""Redactions federate (issue 39; docs/sync.md, "Redaction"): real nodes on loopback, each with its own SQLite file.
A redaction made on A reaches B by its pull and B drops the body; a node partitioned during the redaction converges
after the heal; a node that keeps serving the body (the redaction not applied) cannot bring it back; a redaction of
a space's post goes to the space's hosts only; after it, the nodes' digests are equal and reconciliation asks for
nothing."""

from __future__ import annotations

from typing import Any

from node.redaction import store as redaction_store
from tests.sync.conftest import PeerNode
from tests.sync.test_space_hosting import federation, space_versions


async def holds(peer: PeerNode, address: str) -> bool:
    sql = "SELECT count(*) FROM records WHERE hash = ?"
    return bool(await peer.node.db.read(lambda c: c.execute(sql, (address,)).fetchone()[0]))


async def tombstone_of(peer: PeerNode, address: str) -> str | None:
    """The redaction address of `address`'s tombstone on `peer`, or None."""
    rows = await peer.node.db.read(lambda c: redaction_store.tombstones(c, [address]))
    return rows[0].redaction if rows else None


async def peered(make_peer: Any, *names: str) -> list[PeerNode]:
    """Nodes peered with each other, each way."""
    nodes = [await make_peer(name) for name in names]
    for one in nodes:
        for other in nodes:
            if one is not other:
                await one.add_peer(other)
    return nodes


async def test_a_redaction_on_a_reaches_b_which_drops_the_body_and_answers_the_tombstone(make_peer: Any) -> None:
    a, b = await peered(make_peer, "a", "b")
    author = await a.agent("author")
    secret = await a.post(author, "the api key is hunter2")
    kept = await a.post(author, "an ordinary note")
    await b.puller().pull_once(a.config)
    assert await holds(b, secret)
    out = await a.node.redactions.redact(author, secret, "leaked")
    await b.puller().pull_once(a.config)
    assert not await holds(b, secret) and await holds(b, kept)
    assert await tombstone_of(b, secret) == out.redaction
    async with b.session.get(f"{b.url}/v1/entries/{secret}", headers=b.admin) as resp:
        body = await resp.json()
        assert resp.status == 200 and body["entries"] == [], body
        (tombstone,) = body["redacted"]
        assert (tombstone["hash"], tombstone["redaction"]) == (secret, out.redaction)
        assert "hunter2" not in await resp.text()
    # the redaction record stands for the redacted version: equal digests, and reconciliation asks for nothing
    assert await a.digest() == await b.digest()
    assert (await b.puller().reconcile(a.config)).need == 0
    assert (await a.puller().reconcile(b.config)).need == 0


async def test_a_partitioned_node_converges_after_the_heal_and_a_stale_node_cannot_bring_the_body_back(
    make_peer: Any,
) -> None:
    a, b, c = await peered(make_peer, "a", "b", "c")
    author = await a.agent("author")
    secret = await a.post(author, "personal data of a neighbour")
    for peer in (b, c):
        await peer.puller().pull_once(a.config)
        assert await holds(peer, secret)
    # C is cut off while A redacts; B takes the redaction
    await a.node.redactions.redact(author, secret, None)
    await b.puller().pull_once(a.config)
    assert not await holds(b, secret) and await holds(c, secret)
    # C, holding the body with the redaction not applied, keeps serving it: B refuses it from the feed, fetch and
    # reconciliation alike, never stores it and never asks for it again
    await b.puller().pull_once(c.config)
    outcomes, _missing = await b.puller().fetch_into_store(c.config, [secret])
    assert all(o.outcome == "void" for o in outcomes)
    report = await b.puller().reconcile(c.config)
    assert (report.need, report.outcomes) == (1, [])  # C's body: a version B refused, never fetched
    assert not await holds(b, secret) and await tombstone_of(b, secret) is not None
    # the heal: C pulls from B alone (not from the redacting node) and drops the body
    await c.puller().pull_once(b.config)
    assert not await holds(c, secret) and await tombstone_of(c, secret) is not None
    assert await a.digest() == await b.digest() == await c.digest()
    for one, other in ((a, c), (c, a), (b, c)):
        assert (await one.puller().reconcile(other.config)).need == 0


async def test_a_node_whose_redaction_row_is_gone_cannot_bring_the_body_back(make_peer: Any) -> None:
    """A hostile copy: B's log holds the body again and its redaction rows are deleted (what a peer that ignores
    redactions serves). A, which redacted, and C, which took the redaction, refuse what B serves."""
    a, b, c = await peered(make_peer, "a", "b", "c")
    author = await a.agent("author")
    secret = await a.post(author, "a secret that must not come back")
    await b.puller().pull_once(a.config)
    body = await b.node.db.read(
        lambda conn: conn.execute(
            "SELECT hash, version, kind, author_id, created_at, created_ms, scope, received_ms, body FROM records"
            " WHERE hash = ?",
            (secret,),
        ).fetchone()
    )
    await a.node.redactions.redact(author, secret, None)
    await b.puller().pull_once(a.config)
    await c.puller().pull_once(a.config)
    assert not await holds(b, secret) and not await holds(c, secret)

    def hostile(conn: Any) -> None:  # B forgets the redaction and puts the body back into its log
        conn.execute("DELETE FROM redactions")
        conn.execute("DELETE FROM tombstones")
        conn.execute("DELETE FROM refused_versions")
        conn.execute(
            "INSERT INTO records (hash, version, kind, author_id, created_at, created_ms, scope, origin, received_ms,"
            " body) VALUES (?, ?, ?, ?, ?, ?, ?, 'hostile', ?, ?)",
            tuple(body),
        )

    await b.node.db.write(hostile)
    assert await holds(b, secret)
    for peer in (a, c):
        await peer.puller().pull_once(b.config)
        await peer.puller().reconcile(b.config)
        outcomes, _missing = await peer.puller().fetch_into_store(b.config, [secret])
        assert all(o.outcome == "void" for o in outcomes)
        assert not await holds(peer, secret) and await tombstone_of(peer, secret) is not None
        # each body B served was refused and shows in B's `void` counter on the peer (`bbs peers`)
        voided = await peer.node.db.read(
            lambda conn: conn.execute("SELECT void FROM peers WHERE node_id = ?", (b.node_id,)).fetchone()[0]
        )
        # read ids first (decision 70): A held the body and remembers its version refused, so the feed's id of it is
        # not fetched: only the explicit fetch's copy; C never held it (the redaction came first, naming the address
        # only), so the feed's id is fetched once, refused and remembered, then the explicit fetch's copy
        assert voided == (1 if peer is a else 2)
    assert await a.digest() == await c.digest()


async def test_a_redaction_arriving_before_its_target_refuses_the_body_when_it_comes(make_peer: Any) -> None:
    a, b, c = await peered(make_peer, "a", "b", "c")
    author = await a.agent("author")
    secret = await a.post(author, "redacted before it travelled")
    await b.puller().pull_once(a.config)  # B holds the body and never learns of the redaction
    out = await a.node.redactions.redact(author, secret, None)
    await c.puller().pull_once(a.config)  # C: the redaction, and no body (A holds none to serve)
    assert await holds(c, out.redaction) and not await holds(c, secret) and await tombstone_of(c, secret) is None
    await c.puller().pull_once(b.config)  # then B serves the body: refused, only the tombstone kept
    assert not await holds(c, secret) and await tombstone_of(c, secret) == out.redaction
    assert await a.digest() == await c.digest()


async def test_a_redaction_of_a_spaces_post_goes_to_its_hosts_only(make_peer: Any) -> None:
    a, b, c, space, owner = await federation(make_peer)
    await b.puller().pull_once(a.config)
    await c.puller().pull_once(a.config)
    sql = "SELECT hash FROM records WHERE kind = 'entry' AND space = ?"
    posts = await a.node.db.read(lambda conn: [str(r[0]) for r in conn.execute(sql, (space,))])
    target = posts[0]
    out = await a.node.redactions.redact(owner, target, "moderated")  # the owner moderates the space
    assert out.redaction in await space_versions(a, space)  # tagged with the space: served to its hosts only
    await b.puller().pull_once(a.config)
    await c.puller().pull_once(a.config)
    assert not await holds(b, target) and await tombstone_of(b, target) == out.redaction
    assert not await holds(c, out.redaction)  # C does not host the space: not even the redaction reaches it
    assert (await c.puller().reconcile(a.config)).need == 0
    per_space = [await p.sync.store.digest(space=space) for p in (a, b)]
    assert (per_space[0].count, per_space[0].sha256) == (per_space[1].count, per_space[1].sha256)
    assert await a.digest() == await b.digest() == await c.digest()
    assert (await b.puller().reconcile(a.config)).need == 0


async def test_a_redaction_of_a_local_record_stays_on_its_node(make_peer: Any) -> None:
    a, b = await peered(make_peer, "a", "b")
    author = await a.agent("author")
    local = await a.post(author, "a note for this node alone", scope="local")
    out = await a.node.redactions.redact(author, local, None)
    sql = "SELECT scope FROM records WHERE hash = ?"
    assert await a.node.db.read(lambda c: c.execute(sql, (out.redaction,)).fetchone()[0]) == "local"
    await b.puller().pull_once(a.config)
    assert not await holds(b, out.redaction) and await a.digest() == await b.digest()


async def space_post(peer: PeerNode, space: str) -> str:
    sql = "SELECT hash FROM records WHERE kind = 'entry' AND space = ? ORDER BY seq LIMIT 1"
    address: str = await peer.node.db.read(lambda conn: conn.execute(sql, (space,)).fetchone()[0])
    return address


async def test_an_admins_redaction_holds_on_a_host_whatever_order_its_promotion_arrives_in(make_peer: Any) -> None:
    """An admin redacts a writer's post: a host that takes the promotion and the redaction in one batch drops the
    body, and so does one that takes the redaction before the promotion (the promotion decides it again)."""
    a, b, c, space, owner = await federation(make_peer)
    await a.node.spaces.set_host(owner, space, c.node_id, "host")
    await b.puller().pull_once(a.config)
    await c.puller().pull_once(a.config)
    target = await space_post(a, space)
    assert await holds(b, target) and await holds(c, target)
    moderator = await a.agent("moderator")
    await a.node.spaces.set_role(owner, space, moderator, "admin")
    promotion = await space_versions(a, space) - await space_versions(c, space)  # its records (non-entries: address)
    out = await a.node.redactions.redact(moderator, target, "off topic")
    await b.puller().pull_once(a.config)  # one batch: the promotion, then the redaction
    assert not await holds(b, target) and await tombstone_of(b, target) == out.redaction
    # C: the redaction alone first (fetched by address), then the promotion
    outcomes, _missing = await c.puller().fetch_into_store(a.config, [out.redaction])
    assert [o.outcome for o in outcomes] == ["saved"] and await holds(c, target)
    await c.puller().fetch_into_store(a.config, sorted(promotion))
    assert not await holds(c, target) and await tombstone_of(c, target) == out.redaction
    per_space = [await p.sync.store.digest(space=space) for p in (a, b, c)]
    assert len({(d.count, d.sha256) for d in per_space}) == 1
