"""Server-side graph drawing: layouts from networkx, SVG that parses, limits that say when they cut."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import networkx as nx

from node.dashboard import graphs
from wire.api import LinkOut

SVG = "{http://www.w3.org/2000/svg}"


def nodes_of(svg: str) -> dict[str, ET.Element]:
    root = ET.fromstring(svg)
    return {g.get("data-key", ""): g for g in root.iter(f"{SVG}g") if "node" in g.get("class", "").split()}


def x_of(g: ET.Element) -> float:
    return float(g.get("transform", "").split("(")[1].split(",")[0])


def link(i: int, source: str, target: str, kind: str = "supports") -> LinkOut:
    return LinkOut(i, "0" * 64, source, target, kind, "did:key:z", "2026-01-01T00:00:00Z", "", False, False)  # type: ignore[arg-type]


def test_dag_layout_puts_every_task_right_of_its_prerequisites() -> None:
    g = nx.DiGraph([("a", "b"), ("b", "c"), ("a", "d"), ("x", "c"), ("c", "e")])
    pos, (width, height) = graphs.dag_layout(g)
    for u, v in g.edges:
        assert pos[u][0] < pos[v][0]
    assert pos["x"][0] == pos["b"][0]  # a lone prerequisite sits just left of the task that waits on it
    assert all(0 < x < width and 0 < y < height for x, y in pos.values())


def test_task_dag_draws_a_dependency_cycle_instead_of_failing() -> None:
    tasks = [("a", "a", "a", "ready"), ("b", "b", "b", "blocked"), ("c", "c", "c", "blocked")]
    svg = graphs.task_dag_svg(tasks, [("a", "b"), ("b", "c"), ("c", "b")], [])
    assert len(nodes_of(svg)) == 3
    assert "cycle in dependencies: b, c" in svg


def test_undeclared_prerequisites_are_drawn_dashed() -> None:
    svg = graphs.task_dag_svg([("ship", "ship", "ship", "blocked")], [("legal", "ship")], ["legal"])
    drawn = nodes_of(svg)
    assert "pending" in drawn["legal"].get("class", "") and x_of(drawn["legal"]) < x_of(drawn["ship"])


def test_neighbourhood_marks_links_to_entries_not_here_as_pending() -> None:
    focus = "f" * 64
    svg = graphs.neighbourhood_svg(focus, [], [link(1, focus, "a" * 64, "contradicts")], {})
    drawn = nodes_of(svg)
    assert set(drawn) == {focus, "a" * 64}
    assert "pending" in drawn["a" * 64].get("class", "")


def test_large_neighbourhoods_are_cut_to_the_nearest_and_say_so() -> None:
    focus = "f" * 64
    links = [link(i, focus, f"{i:064x}") for i in range(1, 400)]
    svg = graphs.neighbourhood_svg(focus, [], links, {})
    assert len(nodes_of(svg)) == graphs.MAX_GRAPH_NODES
    assert focus in nodes_of(svg)
    assert "the neighbourhood is larger" in svg


def test_characters_xml_cannot_hold_do_not_break_a_drawing() -> None:
    """Agents may post control characters (JSON allows them); one in a task title made the SVG unreadable."""
    title = "bell\u0007 nul\u0000 \ufffe <b>&"
    svg = graphs.task_dag_svg([("t", title, "t", "ready"), ("u", "u", "u", "blocked")], [("t", "u")], [])
    drawn = nodes_of(svg)  # parses: well-formed XML
    assert set(drawn) == {"t", "u"}
    assert "\u0007" not in svg and "\u0000" not in svg and "&lt;b&gt;&amp;" in svg
