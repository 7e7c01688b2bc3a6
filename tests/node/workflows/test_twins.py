"""node/workflows/twins.py: one key first-declared on two partitioned nodes, then synced both ways (real nodes,
real pulls): both resolve the key to the same twin, and the later twin's declarer and holder are told once."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

from tests.node.workflows.helpers import WF
from tests.node.workflows.test_federation import agent_key, call, pair, pull
from tests.sync.conftest import PeerNode
from wire.time import parse_ms

MakePeer = Callable[..., Awaitable[PeerNode]]


async def twin_notices(peer: PeerNode) -> list[Any]:
    """The task-twin notice entries a node holds."""
    return await peer.node.db.read(
        lambda c: c.execute(
            "SELECT e.author_id, e.performative, e.metadata FROM entries e JOIN entry_tags t ON t.entry_id = e.id"
            " WHERE t.tag = 'task-twin'"
        ).fetchall()
    )


async def inbox(peer: PeerNode, token: str) -> list[dict[str, Any]]:
    status, page = await call(peer, "GET", "/v1/inbox?mark_delivered=true", token)
    assert status == 200, page
    return list(page["notifications"])


async def test_partitioned_first_declarations_become_twins_and_the_later_ones_holders_are_told(
    make_peer: MakePeer,
) -> None:
    a, b = await pair(make_peer)  # peers, but nothing pulled yet: a partition
    boss_a_id, boss_a = await agent_key(a, "boss-a")
    worker_a_id, worker_a = await agent_key(a, "worker-a")
    boss_b_id, boss_b = await agent_key(b, "boss-b")
    worker_b_id, worker_b = await agent_key(b, "worker-b")
    seen: dict[str, dict[str, Any]] = {}
    for peer, boss, worker in ((a, boss_a, worker_a), (b, boss_b, worker_b)):
        status, declared = await call(peer, "POST", f"{WF}/tasks", boss, {"key": "index"})
        assert status == 201 and declared["home_node"] == peer.node_id and declared["twins"] == []
        status, leased = await call(peer, "POST", f"{WF}/tasks/index/lease", worker, {"seconds": 600})
        assert status == 201, leased  # each node is the home node in its own view: two live leases
        seen[peer.name] = leased
    first, later = sorted(seen.values(), key=lambda t: (parse_ms(t["created_at"]), t["identity"]))
    winner, loser = (a, b) if first["home_node"] == a.node_id else (b, a)
    later_people = {boss_b_id, worker_b_id} if loser is b else {boss_a_id, worker_a_id}
    earlier_people = {boss_a_id, worker_a_id} if loser is b else {boss_b_id, worker_b_id}

    await pull(b, a)
    await pull(a, b)
    reads = []
    for peer, token in ((a, boss_a), (b, boss_b)):
        status, task = await call(peer, "GET", f"{WF}/tasks/index", token)
        assert status == 200
        reads.append(task)
    # both nodes resolve the key to the earliest first declaration and list the same later twin
    assert reads[0]["identity"] == reads[1]["identity"] == first["identity"]
    assert reads[0]["home_node"] == reads[1]["home_node"] == winner.node_id
    assert reads[0]["twins"] == reads[1]["twins"]
    (twin,) = reads[0]["twins"]
    assert twin["identity"] == later["identity"] and twin["twin_of"] == first["identity"]
    assert twin["home_node"] == loser.node_id and twin["declared_by"] in later_people
    assert twin["holders"] == [later["lease"]["holder"]]
    # two live leases, on two identities: the task's own (granted by its home) and the twin's
    assert reads[0]["lease"]["lease_id"] == first["lease"]["lease_id"]
    assert twin["lease"]["lease_id"] == later["lease"]["lease_id"]
    for peer, token in ((a, boss_a), (b, boss_b)):
        _, graph = await call(peer, "GET", f"{WF}/graph", token)
        assert [(n["key"], n["identity"]) for n in graph["nodes"]] == [("index", first["identity"])]

    await loser.node.workflows.notice_twins()  # the background round may have done it already
    assert await loser.node.workflows.notice_twins() == 0  # checked once
    notices = await twin_notices(loser)
    assert len(notices) == 1 and notices[0]["author_id"] == loser.node_id and notices[0]["performative"] == "request"
    # a crash before the queue row was cleared, or a rebuild, checks the key again: the same record, not a second
    await loser.node.db.write(lambda c: c.execute("INSERT INTO task_home_moves (task_key) VALUES ('index')"))
    await loser.node.workflows.notice_twins()
    assert len(await twin_notices(loser)) == 1
    await pull(winner, loser)
    await pull(loser, winner)
    assert len(await twin_notices(winner)) == 1  # synced like any entry; the winner signs none of its own

    tokens = {boss_a_id: boss_a, worker_a_id: worker_a, boss_b_id: boss_b, worker_b_id: worker_b}
    # the twin's holder cannot finish the key's task under its twin lease: the key's home node decides
    loser_worker = worker_b if loser is b else worker_a
    body = {"lease": later["lease"]["lease_id"]}
    status, refused = await call(loser, "POST", f"{WF}/tasks/index/complete", loser_worker, body)
    assert status == 409 and refused["code"] == "lease_held", refused
    for agent in later_people:
        (told,) = await inbox(loser, tokens[agent])  # exactly once, at tier 1, on its own node
        assert told["tier"] == 1 and told["directed_to_me"] and "task-twin" in told["tags"]
        assert await inbox(loser, tokens[agent]) == []
    for agent in earlier_people:
        assert await inbox(winner, tokens[agent]) == []  # the earlier twin's people lost nothing


async def test_a_node_that_only_declared_a_title_of_the_later_twin_signs_no_notice(make_peer: MakePeer) -> None:
    """A third node sees the later declaration first, declares a title there (no authority needed), then the
    earlier one: the key's home moves on it too, but it never acted as home, so it tells no one."""
    a, b = await pair(make_peer)
    c = await make_peer("c")
    for one, other in ((a, c), (b, c), (c, a), (c, b)):
        await one.add_peer(other)
    _, boss_a = await agent_key(a, "boss-a")
    _, boss_b = await agent_key(b, "boss-b")
    _, worker_b = await agent_key(b, "worker-b")
    _, planner = await agent_key(c, "planner")
    assert (await call(a, "POST", f"{WF}/tasks", boss_a, {"key": "index"}))[0] == 201
    assert (await call(b, "POST", f"{WF}/tasks", boss_b, {"key": "index"}))[0] == 201
    assert (await call(b, "POST", f"{WF}/tasks/index/lease", worker_b, {}))[0] == 201
    _, on_a = await call(a, "GET", f"{WF}/tasks/index", boss_a)
    _, on_b = await call(b, "GET", f"{WF}/tasks/index", boss_b)
    earlier, later = sorted((on_a, on_b), key=lambda t: (parse_ms(t["created_at"]), t["identity"]))
    winner, loser = (a, b) if earlier is on_a else (b, a)
    await pull(c, loser)
    status, retitled = await call(c, "POST", f"{WF}/tasks", planner, {"key": "index", "title": "Rebuild the index"})
    assert status == 200 and retitled["home_node"] == loser.node_id
    await pull(c, winner)
    _, task = await call(c, "GET", f"{WF}/tasks/index", planner)
    assert task["home_node"] == winner.node_id and task["identity"] == earlier["identity"]
    assert [t["identity"] for t in task["twins"]] == ([later["identity"]] if loser is b else [])
    await c.node.workflows.notice_twins()
    assert await twin_notices(c) == []


async def replay_everything(into: PeerNode, source: PeerNode) -> None:
    """A replayed sync round: forget the cursor into `source`'s feed and pull all of it again."""
    await into.node.db.write(
        lambda c: c.execute("UPDATE peers SET cursor_seq = 0 WHERE node_id = ?", (source.node_id,))
    )
    await pull(into, source)


async def test_the_declarer_of_a_later_first_declaration_nobody_leased_is_told_once_on_its_node(
    make_peer: MakePeer,
) -> None:
    a, b = await pair(make_peer)  # a partition: each first-declares the key, nobody leases it
    boss_a_id, boss_a = await agent_key(a, "boss-a")
    boss_b_id, boss_b = await agent_key(b, "boss-b")
    declared = {}
    for peer, boss in ((a, boss_a), (b, boss_b)):
        status, task = await call(peer, "POST", f"{WF}/tasks", boss, {"key": "index"})
        assert status == 201 and task["home_node"] == peer.node_id
        declared[peer.name] = task
    first, later = sorted(declared.values(), key=lambda t: (parse_ms(t["created_at"]), t["identity"]))
    winner, loser = (a, b) if first["home_node"] == a.node_id else (b, a)
    later_boss, earlier_boss = (
        ((boss_b_id, boss_b), (boss_a_id, boss_a)) if loser is b else ((boss_a_id, boss_a), (boss_b_id, boss_b))
    )

    await pull(b, a)
    await pull(a, b)
    for peer, token in ((a, boss_a), (b, boss_b)):
        _, task = await call(peer, "GET", f"{WF}/tasks/index", token)
        # the key resolves to the earliest declaration; an unleased twin is no task of its own to list
        assert task["identity"] == first["identity"] and task["home_node"] == winner.node_id
        assert task["twins"] == [] and task["lease"] is None

    await loser.node.workflows.notice_twins()  # the background round may have done it already
    assert await loser.node.workflows.notice_twins() == 0
    assert await winner.node.workflows.notice_twins() == 0
    (notice,) = await twin_notices(loser)
    assert notice["author_id"] == loser.node_id and notice["performative"] == "request"
    meta = json.loads(notice["metadata"])
    assert meta == {
        "task_key": "index",
        "identity": later["identity"],
        "twin_of": first["identity"],
        "home_node": winner.node_id,
    }
    assert await twin_notices(winner) == []  # the earlier declaration's node signs none

    # a replayed or re-synced round, a re-check after a crash: the same record or nothing, never a second
    await loser.node.db.write(lambda c: c.execute("INSERT INTO task_home_moves (task_key) VALUES ('index')"))
    await winner.node.db.write(lambda c: c.execute("INSERT INTO task_home_moves (task_key) VALUES ('index')"))
    for one, other in ((loser, winner), (winner, loser)):
        await replay_everything(one, other)
        await one.node.workflows.notice_twins()
    assert len(await twin_notices(loser)) == 1
    assert len(await twin_notices(winner)) == 1  # the loser's notice, synced like any entry

    (told,) = await inbox(loser, later_boss[1])  # exactly once, at tier 1, on the node it posted to
    assert told["tier"] == 1 and told["directed_to_me"] and "task-twin" in told["tags"]
    assert await inbox(loser, later_boss[1]) == []
    assert await inbox(winner, earlier_boss[1]) == []  # the earlier declarer lost nothing


async def test_a_third_node_that_saw_the_unleased_later_declaration_first_signs_no_notice(make_peer: MakePeer) -> None:
    """A third node first holds the later declaration (from its node) and declares a title there: its first
    declaration of the key came from a peer, so when the earlier one arrives it tells no one; the later
    declaration's own node does, once."""
    a, b = await pair(make_peer)
    c = await make_peer("c")
    for one, other in ((a, c), (b, c), (c, a), (c, b)):
        await one.add_peer(other)
    _, boss_a = await agent_key(a, "boss-a")
    _, boss_b = await agent_key(b, "boss-b")
    _, planner = await agent_key(c, "planner")
    assert (await call(a, "POST", f"{WF}/tasks", boss_a, {"key": "index"}))[0] == 201
    assert (await call(b, "POST", f"{WF}/tasks", boss_b, {"key": "index"}))[0] == 201
    _, on_a = await call(a, "GET", f"{WF}/tasks/index", boss_a)
    _, on_b = await call(b, "GET", f"{WF}/tasks/index", boss_b)
    earlier, later = sorted((on_a, on_b), key=lambda t: (parse_ms(t["created_at"]), t["identity"]))
    winner, loser = (a, b) if earlier is on_a else (b, a)
    await pull(c, loser)
    status, retitled = await call(c, "POST", f"{WF}/tasks", planner, {"key": "index", "title": "Rebuild the index"})
    assert status == 200 and retitled["home_node"] == loser.node_id
    await pull(c, winner)
    _, task = await call(c, "GET", f"{WF}/tasks/index", planner)
    assert task["home_node"] == winner.node_id and task["identity"] == earlier["identity"] and task["twins"] == []
    await c.node.workflows.notice_twins()
    assert await twin_notices(c) == []
    await pull(loser, winner)
    await loser.node.workflows.notice_twins()
    await pull(c, loser)
    (notice,) = await twin_notices(c)  # the loser's, synced; c signed none of its own
    assert notice["author_id"] == loser.node_id
    assert json.loads(notice["metadata"])["identity"] == later["identity"]
