"""Fan-out of a run of new entries, in one statement, against the matching rule written out in Python.

A subscription matches an entry when each of its dimensions is empty or holds one of the entry's values (OR
within a dimension, AND across them), a `directed` one only entries directed to its agent, never the agent's
own entries; an agent is notified once per entry, naming its first matching subscription. Entries directed to
a local agent notify it whatever it subscribes to (tier 1 for a request), and that wins over a subscription.
"""

from __future__ import annotations

import random
import sqlite3
from typing import TypeVar

import pytest

from identity.keys import SigningKey
from identity.schema import EntryType, Performative
from node.service import Node
from tests.conftest import AgentCreds
from wire.api import PostEntry, SubscriptionIn

TAGS = ["alpha", "beta", "gamma", "délta"]
TYPES: list[EntryType] = ["finding", "question", "synthesis"]
PERFORMATIVES: list[Performative] = ["inform", "request", "propose"]

S = TypeVar("S", bound=str)
STRANGER = SigningKey.generate().did  # an agent not registered on the node: never notified here
Expected = dict[tuple[str, int], tuple[int, str, int | None]]  # (agent, entry) -> (tier, reason, subscription)


def sample(rng: random.Random, values: list[S], most: int) -> list[S]:
    return sorted(rng.sample(values, rng.randint(0, most)))


def expected(
    subs: list[tuple[int, str, SubscriptionIn]], entries: list[tuple[int, str, PostEntry]], local: set[str]
) -> Expected:
    out: Expected = {}
    for entry_id, author, body in entries:
        for agent in body.directed_to:
            if agent in local and agent != author:
                request = body.performative == "request"
                out[(agent, entry_id)] = (1, "directed_request", None) if request else (2, "directed", None)
        for sub_id, agent, sub in sorted(subs, key=lambda s: s[0]):
            if agent == author or (agent, entry_id) in out:
                continue
            if (
                (not sub.tags or set(sub.tags) & set(body.tags))
                and (not sub.entry_types or body.entry_type in sub.entry_types)
                and (not sub.performatives or body.performative in sub.performatives)
                and (not sub.authors or author in sub.authors)
                and (not sub.directed or agent in body.directed_to)
            ):
                out[(agent, entry_id)] = (2, "subscription", sub_id)
    return out


@pytest.mark.parametrize("seed", range(6))
async def test_a_run_notifies_exactly_whom_the_rule_names(
    node: Node, make_agent_direct: list[AgentCreds], seed: int
) -> None:
    rng = random.Random(seed)
    agents = make_agent_direct
    ids = [a.agent_id for a in agents]
    subs: list[tuple[int, str, SubscriptionIn]] = []
    for agent in ids:
        for _ in range(rng.randint(0, 3)):
            sub = SubscriptionIn(
                tags=sample(rng, TAGS, 2),
                entry_types=sample(rng, TYPES, 1),
                performatives=sample(rng, PERFORMATIVES, 1),
                authors=sample(rng, ids, 1),
                directed=rng.random() < 0.2,
            )
            out, created = await node.inbox.subscribe(agent, sub)
            if created:
                subs.append((out.id, agent, sub))
    entries: list[tuple[int, str, PostEntry]] = []
    for n in range(8):
        author = rng.choice(ids)
        bodies = [
            PostEntry(
                entry_type=rng.choice(TYPES),
                performative=rng.choice(PERFORMATIVES),
                content=f"entry {seed}.{n}.{i}",
                tags=sample(rng, TAGS, 3),
                directed_to=sample(rng, [*ids, STRANGER], 2),
            )
            for i in range(rng.randint(1, 6))
        ]
        posted = await node.entries.post_batch(author, list(bodies))  # one run: one fan-out statement
        entries += [(entry.id, author, body) for (entry, _), body in zip(posted, bodies, strict=True)]

    def stored(conn: sqlite3.Connection) -> Expected:
        rows = conn.execute("SELECT agent_id, entry_id, tier, reason, subscription_id FROM notifications")
        return {(r[0], r[1]): (r[2], r[3], r[4]) for r in rows}

    assert await node.db.read(stored) == expected(subs, entries, set(ids))


@pytest.fixture
async def make_agent_direct(node: Node) -> list[AgentCreds]:
    """Five agents whose keys the node keeps (made through the service layer: no server needed)."""
    made = [await node.agents.create(f"fan{i}", None) for i in range(5)]
    return [AgentCreds(m.name, m.agent_id, m.api_key) for m in made]
