"""node.workflows.graph: the task graph's nodes and edges, and its DOT and Mermaid drawings."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from aiohttp.test_utils import TestClient

from node.service import Node
from node.spaces.sight import OPERATOR
from node.workflows import graph
from tests.conftest import AgentCreds, FakeClock
from tests.node.workflows.helpers import SEED_PLAN, declare, lease
from wire.workflows import Graph, GraphEdge, GraphNode

MakeAgent = Callable[[str], Awaitable[AgentCreds]]


async def built(node: Node, limit: int = 100) -> Graph:
    now = node.now_ms()
    return await node.db.read(lambda c: graph.build(c, now, limit, OPERATOR))


async def test_the_seed_plan_as_a_graph(
    client: TestClient, node: Node, make_agent: MakeAgent, clock: FakeClock
) -> None:
    alice = await make_agent("alice")
    for task in SEED_PLAN:
        await declare(client, alice, task)
    await declare(client, alice, {"key": "dropped", "status": "cancelled"})
    await declare(client, alice, {"key": "broken", "status": "failed", "depends_on": ["never-declared"]})
    status, _ = await lease(client, alice, "doctor-pass")
    assert status == 201
    g = await built(node)
    states = {n.key: (n.state, n.lease_holder) for n in g.nodes}
    assert states == {
        "import-contract": ("done", None),
        "scan-repo": ("done", None),
        "doctor-pass": ("leased", alice.agent_id),
        "write-adr": ("ready", None),
        "publish-digest": ("blocked", None),
        "dropped": ("cancelled", None),
        "broken": ("failed", None),
    }
    assert [(e.from_key, e.to_key) for e in g.edges if e.to_key == "publish-digest"] == [
        ("doctor-pass", "publish-digest"),
        ("write-adr", "publish-digest"),
    ]
    assert g.missing == ["never-declared"] and not g.truncated
    [dangling] = [e for e in g.edges if e.from_key == "never-declared"]
    assert dangling.from_id is None and dangling.to_id == next(n.id for n in g.nodes if n.key == "broken")
    clock.advance(3600)  # the lease lapses: ready again
    assert {n.key: n.state for n in (await built(node)).nodes}["doctor-pass"] == "ready"


async def test_a_graph_past_its_limit_says_so(client: TestClient, node: Node, make_agent: MakeAgent) -> None:
    alice = await make_agent("alice")
    for i in range(4):
        await declare(client, alice, {"key": f"t{i}", "depends_on": [f"t{i - 1}"] if i else []})
    g = await built(node, limit=2)
    assert [n.key for n in g.nodes] == ["t0", "t1"] and g.truncated
    assert [(e.from_key, e.to_key) for e in g.edges] == [("t0", "t1")]
    empty = await built(node, limit=0)
    assert (empty.nodes, empty.edges, empty.truncated) == ([], [], True)


def drawn() -> Graph:
    nodes = [
        GraphNode(id=1, key="a", title='Say "hi"\n<now> & later', state="done", lease_holder=None),
        GraphNode(id=2, key="b", title="b", state="blocked", lease_holder=None),
    ]
    edges = [
        GraphEdge(type="precedes", from_key="a", to_key="b", from_id=1, to_id=2),
        GraphEdge(type="precedes", from_key="x", to_key="b", from_id=None, to_id=2),
        GraphEdge(type="precedes", from_key="far", to_key="b", from_id=9, to_id=2),  # past the node limit
    ]
    return Graph(nodes=nodes, edges=edges, missing=["x"], truncated=True)


def test_dot() -> None:
    text = graph.to_dot(drawn())
    assert text.startswith("digraph tasks {\n  rankdir=LR;\n") and text.endswith("}\n")
    assert '  "a" [label="a\\nSay \\"hi\\"\\n<now> & later\\n[done]", fillcolor="#c8e6c9"];' in text
    assert '  "b" [label="b\\n[blocked]", fillcolor="#eeeeee"];' in text  # the title is the key: said once
    assert '  "x" [label="x\\n[not declared]", style=dashed];' in text
    assert '  "a" -> "b";' in text and '  "x" -> "b";' in text


def test_mermaid() -> None:
    text = graph.to_mermaid(drawn())
    lines = text.splitlines()
    assert lines[0] == "flowchart LR"
    assert '  t1["a: Say #quot;hi#quot;\n#lt;now#gt; #amp; later"]:::done' in text
    assert '  t2["b"]:::blocked' in lines
    assert '  m0["x (not declared)"]:::missing' in lines
    assert {"  t1 --> t2", "  m0 --> t2", "  t9 --> t2"} <= set(lines)
    assert "  classDef missing stroke-dasharray: 5 5" in lines
    assert "  classDef leased fill:#bbdefb" in lines
