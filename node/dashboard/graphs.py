"""Graph drawings for the dashboard: laid out on the server with networkx, rendered as plain SVG.

The browser receives a finished picture: no layout code and no third-party script runs in the page.
Every node of a drawing is an `<a>` (keyboard focusable, with an `href` into the dashboard) holding a
`g.node`; every edge is a `path.edge` with a `data-type`. Text is escaped; nothing from a record is
ever placed in an attribute that could carry markup or script. networkx is imported by the functions that use it:
its import costs every start of a node (and every `bbs` command) about 0.3 s of CPU, for a page few open.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING
from xml.sax import saxutils

from wire.api import EntryOut, LinkOut

if TYPE_CHECKING:
    import networkx as nx

# Characters XML 1.0 does not allow at all (agents may post them: JSON and the API accept them); one of them
# makes the whole SVG unreadable, so each is drawn as U+FFFD.
_NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")


def escape(text: str) -> str:
    """Text for an SVG element: XML-escaped, and characters XML cannot hold replaced."""
    return saxutils.escape(_NOT_XML.sub("\ufffd", text))


def quoteattr(text: str) -> str:
    """A quoted SVG attribute value, likewise."""
    return saxutils.quoteattr(_NOT_XML.sub("\ufffd", text))


MAX_GRAPH_NODES = 150  # more than this is unreadable at any width; the drawing says it was cut
WIDTH, HEIGHT = 800, 560
BOX_W, BOX_H = 120, 34
COLUMN_W, ROW_H = 170, 56
PAD_X, PAD_Y = 96, 40  # room for labels, which are centred under their node

LINK_COLOURS = {
    "supports": "#2e7d32",
    "contradicts": "#d32f2f",
    "supersedes": "#7b1fa2",
    "responds_to": "#1565c0",
    "derived_from": "#00838f",
    "depends_on": "#ef6c00",
    "same_as": "#546e7a",
    "retracted_by": "#616161",
}
ENTRY_FILLS = {
    "finding": "#bbdefb",
    "question": "#fff59d",
    "synthesis": "#c8e6c9",
    "contradiction": "#ffcdd2",
    "task": "#ffe0b2",
}
TASK_FILLS = {
    "done": "#c8e6c9",
    "ready": "#bbdefb",
    "leased": "#fff59d",
    "blocked": "#eeeeee",
    "failed": "#ffcdd2",
    "cancelled": "#f5f5f5",
}
# Dash patterns make the two "negative" link types distinguishable without colour.
_DASHES = {"contradicts": "6 3", "retracted_by": "2 3"}


@dataclass
class DrawnNode:
    """One node of a drawing: its key, label, tooltip, link target and look."""

    key: str
    label: str
    title: str
    href: str | None
    fill: str
    classes: list[str] = field(default_factory=list)
    radius: float = 14.0  # circles; a box's half width is BOX_W / 2
    shape: str = "circle"  # or "box" (tasks)


@dataclass
class DrawnEdge:
    """A directed edge of a drawing."""

    source: str
    target: str
    kind: str
    title: str


def _short(text: str, n: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= n else text[: n - 1] + "…"


def neighbourhood_svg(
    focus: str, entries: Sequence[EntryOut], links: Sequence[LinkOut], names: dict[str, str], truncated: bool = False
) -> str:
    """Draw an entry's neighbourhood: a force layout, links coloured by type, retractions and contradictions marked.

    `focus` is the record hash of the entry the page is about; links whose other end has not arrived
    (or is hidden, e.g. synthetic) are drawn to a hollow "pending" node.
    """
    import networkx as nx

    by_hash = {e.record_hash: e for e in entries}
    graph = nx.MultiDiGraph()
    graph.add_node(focus)
    for link in links:
        graph.add_edge(link.source, link.target, key=link.id, link=link)
    kept = _nearest(graph, focus, MAX_GRAPH_NODES)
    cut = truncated or len(kept) < graph.number_of_nodes()
    graph = graph.subgraph(kept).copy()

    nodes: list[DrawnNode] = []
    for key in graph.nodes:
        entry = by_hash.get(key)
        if entry is None:
            title = f"entry {key[:12]}… has not arrived or is hidden"
            nodes.append(DrawnNode(key, "pending", title, None, "#ffffff", ["pending"]))
            continue
        classes = [f"type-{entry.entry_type}"]
        if entry.retracted:
            classes.append("retracted")
        if entry.superseded:
            classes.append("superseded")
        if key == focus:
            classes.append("focus")
        author = names.get(entry.author_id, entry.author_id[-8:])
        flags = "".join(f" [{c}]" for c in ("retracted", "superseded") if c in classes)
        nodes.append(
            DrawnNode(
                key,
                f"#{entry.id} {_short(entry.content, 22)}",
                f"#{entry.id} {entry.entry_type}/{entry.performative} by {author}{flags}: {_short(entry.content, 200)}",
                f"#/entry/{entry.id}",
                ENTRY_FILLS.get(entry.entry_type, "#eeeeee"),
                classes,
                20.0 if key == focus else 14.0,
            )
        )
    edges = [
        DrawnEdge(u, v, data["link"].link_type, f"{data['link'].link_type}: {data['link'].annotation}".rstrip(": "))
        for u, v, data in graph.edges(data=True)
    ]
    positions = _force_layout(graph, focus)
    note = f"showing {len(kept)} nearest entries; the neighbourhood is larger" if cut else ""
    return render_svg(nodes, edges, positions, LINK_COLOURS, label="Neighbourhood graph", note=note)


def _nearest(graph: nx.MultiDiGraph, focus: str, limit: int) -> list[str]:
    """The focus and the nodes closest to it (breadth first, ignoring direction), at most `limit`."""
    import networkx as nx

    order = [focus]
    for _, node in nx.bfs_edges(graph.to_undirected(as_view=True), focus):
        if len(order) >= limit:
            break
        order.append(node)
    seen = set(order)
    # Nodes not connected to the focus (possible when a traversal was cut) fill any remaining room.
    order.extend([n for n in graph.nodes if n not in seen][: max(0, limit - len(order))])
    return order


def _force_layout(graph: nx.MultiDiGraph, focus: str) -> dict[str, tuple[float, float]]:
    if graph.number_of_nodes() == 1:
        return {focus: (WIDTH / 2, HEIGHT / 2)}
    # A seed derived from the focus makes the drawing of the same neighbourhood stable between refreshes.
    seed = int.from_bytes(hashlib.sha256(focus.encode()).digest()[:4], "big")
    import networkx as nx

    raw = nx.spring_layout(nx.Graph(graph), seed=seed, iterations=80)
    return _fit({n: (float(p[0]), float(p[1])) for n, p in raw.items()}, (WIDTH, HEIGHT), (PAD_X, PAD_Y))


def _fit(
    raw: dict[str, tuple[float, float]], size: tuple[float, float], pad: tuple[float, float]
) -> dict[str, tuple[float, float]]:
    """Scale layout coordinates into a box of `size`, `pad` from its edges (a single value is centred)."""
    (width, height), (pad_x, pad_y) = size, pad
    xs = [p[0] for p in raw.values()]
    ys = [p[1] for p in raw.values()]
    span_x = (max(xs) - min(xs)) or 1.0
    span_y = (max(ys) - min(ys)) or 1.0
    out = {}
    for n, (x, y) in raw.items():
        px = pad_x + (x - min(xs)) / span_x * (width - 2 * pad_x) if len(set(xs)) > 1 else width / 2
        py = pad_y + (y - min(ys)) / span_y * (height - 2 * pad_y - 16) if len(set(ys)) > 1 else height / 2
        out[n] = (px, py)
    return out


def dag_layout(graph: nx.DiGraph) -> tuple[dict[str, tuple[float, float]], tuple[float, float]]:
    """Layered layout of a DAG: one column per topological generation, prerequisites to the left.

    A task nothing depends on through a chain sits just left of its first dependant (so an undeclared
    prerequisite is drawn next to the task waiting on it), and each column is ordered by the mean row of
    its predecessors to keep edges from crossing. Returns positions and the drawing's size.
    """
    import networkx as nx

    column = {n: i for i, gen in enumerate(nx.topological_generations(graph)) for n in gen}
    if not column:
        return {}, (WIDTH, 200)
    for n in graph:
        if graph.in_degree(n) == 0 and graph.out_degree(n) > 0:
            column[n] = max(column[n], min(column[s] for s in graph.successors(n)) - 1)
    n_cols = max(column.values()) + 1
    columns: list[list[str]] = [[] for _ in range(n_cols)]
    for n in sorted(column):
        columns[column[n]].append(n)
    row: dict[str, float] = {}
    for nodes in columns:

        def weight(n: str) -> tuple[float, str]:
            preds = [row[p] for p in graph.predecessors(n) if p in row]
            return (sum(preds) / len(preds) if preds else float("inf"), n)

        nodes.sort(key=weight)
        row.update({n: float(i) for i, n in enumerate(nodes)})
    width = max(WIDTH, COLUMN_W * n_cols + 40)
    height = max(200, ROW_H * max(len(c) for c in columns) + 80)
    pos = {}
    for col, nodes in enumerate(columns):
        x = width / 2 if n_cols == 1 else 20 + BOX_W / 2 + col * (width - 40 - BOX_W) / (n_cols - 1)
        top = (height - ROW_H * (len(nodes) - 1)) / 2
        for i, n in enumerate(nodes):
            pos[n] = (x, top + i * ROW_H)
    return pos, (width, height)


def task_dag_svg(
    tasks: Sequence[tuple[str, str, str, str]], edges: Sequence[tuple[str, str]], missing: Sequence[str], note: str = ""
) -> str:
    """Draw the task graph as a DAG: `tasks` are (key, label, title, state); `edges` run prerequisite -> task.

    Keys in `missing` are prerequisites nobody has declared yet (drawn dashed). If the edges hold a cycle
    (declarations from several authors can create one), the cycle's tasks are drawn in one extra column.
    """
    import networkx as nx

    graph = nx.DiGraph()
    graph.add_nodes_from(k for k, *_ in tasks)
    graph.add_nodes_from(missing)
    graph.add_edges_from(edges)
    if not nx.is_directed_acyclic_graph(graph):
        cyclic = {n for comp in nx.strongly_connected_components(graph) if len(comp) > 1 for n in comp}
        acyclic = graph.subgraph(n for n in graph if n not in cyclic).copy()
        acyclic.add_nodes_from(cyclic)  # isolated: they land in the first generation, marked below
        positions, size = dag_layout(acyclic)
        note = (note + "; " if note else "") + "cycle in dependencies: " + ", ".join(sorted(cyclic))[:80]
    else:
        positions, size = dag_layout(graph)
    nodes = [
        DrawnNode(key, label, title, None, TASK_FILLS.get(state, "#eeeeee"), [f"task-{state}"], shape="box")
        for key, label, title, state in tasks
    ]
    nodes += [
        DrawnNode(k, f"{k} (not declared)", f"{k}: a prerequisite no one has declared", None, "#ffffff",
                  ["pending"], shape="box")
        for k in missing
    ]  # fmt: skip
    drawn = [DrawnEdge(u, v, "precedes", f"{u} precedes {v}") for u, v in edges]
    return render_svg(
        nodes, drawn, positions, {"precedes": "#455a64"}, label="Task graph", note=note, size=size, legend=False
    )


def render_svg(
    nodes: Iterable[DrawnNode],
    edges: Iterable[DrawnEdge],
    positions: dict[str, tuple[float, float]],
    colours: dict[str, str],
    *,
    label: str,
    note: str = "",
    size: tuple[float, float] = (WIDTH, HEIGHT),
    legend: bool = True,
) -> str:
    """Render laid-out nodes and edges as a standalone SVG document (arrows, legend, tooltips)."""
    node_list = list(nodes)
    shapes = {n.key: n for n in node_list}
    edge_list = list(edges)
    used = sorted({e.kind for e in edge_list})
    width, height = size
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width:g} {height:g}" role="group"'
        f' aria-label={quoteattr(label)} class="graph">',
        "<defs>",
    ]
    for kind in used:
        colour = colours.get(kind, "#555555")
        out.append(
            f'<marker id="arrow-{kind}" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" markerHeight="7"'
            f' orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z" fill="{colour}"/></marker>'
        )
    out.append("</defs>")
    out.append('<g class="edges">')
    pair_count: dict[tuple[str, str], int] = {}
    for edge in edge_list:
        if edge.source not in positions or edge.target not in positions:
            continue
        pair = (min(edge.source, edge.target), max(edge.source, edge.target))
        index = pair_count.get(pair, 0)
        pair_count[pair] = index + 1
        out.append(_edge_path(edge, positions, shapes, colours, index))
    out.append("</g>")
    out.append('<g class="nodes">')
    for node in node_list:
        x, y = positions[node.key]
        out.append(_node_markup(node, x, y))
    out.append("</g>")
    if legend:
        out.append(_legend(used, colours))
    if note:
        out.append(f'<text class="note" x="{width - 8:g}" y="{height - 8:g}" text-anchor="end">{escape(note)}</text>')
    out.append("</svg>")
    return "".join(out)


def _reach(node: DrawnNode | None, ux: float, uy: float) -> float:
    """Distance from a node's centre to its outline in direction (ux, uy)."""
    if node is None:
        return 14.0
    if node.shape == "box":
        hw, hh = BOX_W / 2, BOX_H / 2
        return min(hw / abs(ux) if ux else float("inf"), hh / abs(uy) if uy else float("inf"))
    return node.radius


def _edge_path(
    edge: DrawnEdge,
    positions: dict[str, tuple[float, float]],
    shapes: dict[str, DrawnNode],
    colours: dict[str, str],
    index: int,
) -> str:
    (x1, y1), (x2, y2) = positions[edge.source], positions[edge.target]
    colour = colours.get(edge.kind, "#555555")
    dash = _DASHES.get(edge.kind)
    dash_attr = f' stroke-dasharray="{dash}"' if dash else ""
    width = 2.5 if edge.kind == "contradicts" else 1.6
    if edge.source == edge.target:  # a self-loop: a small arc above the node
        r = _reach(shapes.get(edge.source), 0.0, 1.0)
        d = f"M{x1 - 6:.1f},{y1 - r:.1f} a10,10 0 1,1 12,0"
    else:
        dx, dy = x2 - x1, y2 - y1
        length = max((dx * dx + dy * dy) ** 0.5, 1e-6)
        ux, uy = dx / length, dy / length
        rs, rt = _reach(shapes.get(edge.source), ux, uy), _reach(shapes.get(edge.target), ux, uy) + 2
        sx, sy = x1 + ux * rs, y1 + uy * rs
        tx, ty = x2 - ux * rt, y2 - uy * rt
        # Parallel edges between one pair bow out alternately so each stays visible.
        bend = 0.0 if index == 0 else 18.0 * ((index + 1) // 2) * (1 if index % 2 else -1)
        cx, cy = (sx + tx) / 2 - uy * bend, (sy + ty) / 2 + ux * bend
        d = f"M{sx:.1f},{sy:.1f} Q{cx:.1f},{cy:.1f} {tx:.1f},{ty:.1f}"
    return (
        f'<path class="edge edge-{edge.kind}" data-type="{edge.kind}" d="{d}" fill="none" stroke="{colour}"'
        f' stroke-width="{width}"{dash_attr} marker-end="url(#arrow-{edge.kind})"><title>{escape(edge.title)}</title>'
        "</path>"
    )


def _node_markup(node: DrawnNode, x: float, y: float) -> str:
    classes = " ".join(["node", *node.classes])
    stroke_dash = ' stroke-dasharray="4 3"' if {"superseded", "pending"} & set(node.classes) else ""
    stroke = "#d32f2f" if "type-contradiction" in node.classes else "#37474f"
    stroke_width = 3 if "focus" in node.classes else 1.5
    opacity = ' opacity="0.55"' if "retracted" in node.classes else ""
    parts = [
        f'<g class="{classes}" data-key={quoteattr(node.key)} transform="translate({x:.1f},{y:.1f})"{opacity}>',
        f"<title>{escape(node.title)}</title>",
    ]
    if node.shape == "box":
        parts.append(
            f'<rect x="{-BOX_W / 2:g}" y="{-BOX_H / 2:g}" width="{BOX_W}" height="{BOX_H}" rx="6" fill="{node.fill}"'
            f' stroke="{stroke}" stroke-width="{stroke_width}"{stroke_dash}/>'
            f'<text y="4" text-anchor="middle">{escape(_short(node.label, 20))}</text>'
        )
    else:
        parts.append(
            f'<circle r="{node.radius:g}" fill="{node.fill}" stroke="{stroke}"'
            f' stroke-width="{stroke_width}"{stroke_dash}/>'
        )
        if "retracted" in node.classes:
            r = node.radius * 0.7
            strike = f"M{-r:.1f},{-r:.1f} L{r:.1f},{r:.1f}"
            parts.append(f'<path class="strike" d="{strike}" stroke="#b71c1c" stroke-width="3"/>')
        parts.append(f'<text y="{node.radius + 13:g}" text-anchor="middle">{escape(node.label)}</text>')
    parts.append("</g>")
    inner = "".join(parts)
    if node.href is None:
        return inner
    return f"<a href={quoteattr(node.href)} aria-label={quoteattr(node.title[:120])}>{inner}</a>"


def _legend(kinds: Sequence[str], colours: dict[str, str]) -> str:
    rows = ['<g class="legend" transform="translate(8,14)">']
    for i, kind in enumerate(kinds):
        y = i * 16
        dash = _DASHES.get(kind)
        dash_attr = f' stroke-dasharray="{dash}"' if dash else ""
        rows.append(
            f'<line x1="0" y1="{y}" x2="22" y2="{y}" stroke="{colours.get(kind, "#555555")}" stroke-width="2.5"'
            f"{dash_attr}/>"
            f'<text x="28" y="{y + 4}">{escape(kind)}</text>'
        )
    rows.append("</g>")
    return "".join(rows)
