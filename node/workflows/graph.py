"""The task graph as nodes and `precedes` edges, and its Graphviz DOT and Mermaid renderings."""

from __future__ import annotations

import sqlite3

from node.spaces.sight import Sight
from node.store.conn import Conn
from node.workflows import scope
from node.workflows.store import tasks as task_store
from node.workflows.tasks import check_space, lease_live
from wire.unsigned import DONE_STATUSES
from wire.workflows import Graph, GraphEdge, GraphNode

_DOT_FILL = {
    "done": "#c8e6c9",
    "ready": "#fff9c4",
    "leased": "#bbdefb",
    "blocked": "#eeeeee",
    "failed": "#ffcdd2",
    "cancelled": "#f5f5f5",
}


def state_of(row: sqlite3.Row, now_ms: int) -> str:
    """Where a task stands for drawing: done, leased, ready, blocked, failed or cancelled."""
    status = row["status"]
    if status in DONE_STATUSES:
        return "done"
    if status in ("failed", "cancelled"):
        return str(status)
    if lease_live(row, now_ms):
        return "leased"
    return "ready" if row["unmet"] == 0 else "blocked"


def build(conn: Conn, now_ms: int, limit: int, sight: Sight, space: str | None = None) -> Graph:
    """Up to `limit` tasks that `sight` sees (of `space` only, when given: 404 `unknown_space` for one it does not
    see) in id order with the edges into them; dependency keys resolve to ids where declared."""
    check_space(sight, space)
    rows = task_store.graph_tasks(conn, limit, sight, space)
    truncated = len(rows) > limit
    rows = rows[:limit]
    nodes = []
    for r in rows:
        state = state_of(r, now_ms)
        nodes.append(
            GraphNode(
                id=r["id"],
                key=scope.key_of(r["key"]),
                title=r["title"],
                state=state,
                lease_holder=r["lease_holder"] if state == "leased" else None,
                identity=r["identity"] or "",
                space=r["space"],
            )
        )
    last_id = rows[-1]["id"] if rows else 0
    edges = [
        GraphEdge(type="precedes", from_key=scope.key_of(e[0]), to_key=scope.key_of(e[1]), from_id=e[2], to_id=e[3])
        for e in task_store.graph_edges(conn, last_id, sight, space)
    ]
    missing = sorted({e.from_key for e in edges if e.from_id is None})
    return Graph(nodes=nodes, edges=edges, missing=missing, truncated=truncated)


def drawn_name(n: GraphNode) -> str:
    """A node's name in DOT and its label in both texts: the key of a public task, `key@<space's first 12>` for a task
    of a space, so a reader of a space that reuses a public key sees two nodes, not one."""
    return n.key if n.space is None else f"{n.key}@{n.space[:12]}"


def _dot_string(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def to_dot(g: Graph) -> str:
    """Graphviz DOT: one node per task (filled by state), dashed nodes for prerequisites not yet declared."""
    lines = ["digraph tasks {", "  rankdir=LR;", '  node [shape=box, style="rounded,filled", fontname="Helvetica"];']
    names = {n.id: drawn_name(n) for n in g.nodes}
    for n in g.nodes:
        name = names[n.id]
        label = f"{name}\n{n.title}\n[{n.state}]" if n.title != n.key else f"{name}\n[{n.state}]"
        fill = _dot_string(_DOT_FILL[n.state])
        lines.append(f"  {_dot_string(name)} [label={_dot_string(label)}, fillcolor={fill}];")
    for key in g.missing:
        lines.append(f"  {_dot_string(key)} [label={_dot_string(key + chr(10) + '[not declared]')}, style=dashed];")
    for e in g.edges:
        source = names.get(e.from_id, e.from_key) if e.from_id is not None else e.from_key
        lines.append(f"  {_dot_string(source)} -> {_dot_string(names.get(e.to_id, e.to_key))};")
    lines.append("}")
    return "\n".join(lines) + "\n"


def _mermaid_label(text: str) -> str:
    return '"' + text.replace("&", "#amp;").replace('"', "#quot;").replace("<", "#lt;").replace(">", "#gt;") + '"'


def to_mermaid(g: Graph) -> str:
    """A Mermaid flowchart: tasks as t<id>, undeclared prerequisites as m<n>, classes by state."""
    lines = ["flowchart LR"]
    missing = {key: f"m{i}" for i, key in enumerate(g.missing)}
    for n in g.nodes:
        name = drawn_name(n)
        lines.append(f"  t{n.id}[{_mermaid_label(name + ': ' + n.title if n.title != n.key else name)}]:::{n.state}")
    for key in g.missing:
        lines.append(f"  {missing[key]}[{_mermaid_label(key + ' (not declared)')}]:::missing")
    for e in g.edges:
        # nodes by id, so one key in two spaces is two nodes; a prerequisite past the node limit is still drawn
        lines.append(f"  {missing[e.from_key] if e.from_id is None else f't{e.from_id}'} --> t{e.to_id}")
    for state, fill in sorted(_DOT_FILL.items()):
        lines.append(f"  classDef {state} fill:{fill}")
    lines.append("  classDef missing stroke-dasharray: 5 5")
    return "\n".join(lines) + "\n"
