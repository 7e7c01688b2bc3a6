"""Dashboard reads for agent workflows: the task board and its DAG drawing, and the bus's projects.

Tasks and edges come from the workflows service (`Workflows.graph`); the board adds what the graph
leaves out (lease expiry, holder names). Bus messages themselves are read by the page from
`GET /v1/agent-workflows/messages`.
"""

from __future__ import annotations

import asyncio

import msgspec
from aiohttp import web

from node.dashboard import graphs, store
from node.spaces.store import sight_of
from node.store.conn import Conn
from node.web.appkeys import NODE
from node.web.auth import principal
from node.web.http import Route, json_response
from node.workflows.graph import drawn_name
from wire.time import format_ms
from wire.workflows import GraphQuery

MAX_DRAWN_TASKS = 300


class TaskRow(msgspec.Struct):
    """A task as the board shows it."""

    id: int
    key: str
    title: str
    state: str
    depends_on: list[str]
    lease_holder: str | None
    holder_name: str | None
    lease_expires_at: str | None
    space: str | None = None  # the task's space (one the viewer reads); None: public


class TaskBoard(msgspec.Struct):
    tasks: list[TaskRow]
    missing: list[str]
    truncated: bool
    counts: dict[str, int]


class Project(msgspec.Struct):
    project: str | None
    messages: int
    last_at: str


class ProjectList(msgspec.Struct):
    projects: list[Project]


async def _board(request: web.Request) -> tuple[TaskBoard, list[tuple[str, str]]]:
    node = request.app[NODE]
    # the signed-in agent's tasks: public ones and those of its spaces (the operator: every space)
    g = await node.workflows.graph(GraphQuery(limit=MAX_DRAWN_TASKS), principal(request).agent_id)
    ids = [n.id for n in g.nodes]

    holders = sorted({n.lease_holder for n in g.nodes if n.lease_holder})

    def extra(conn: Conn) -> tuple[dict[int, str | None], dict[str, str]]:
        return store.lease_expiry(conn, ids), store.display_names(conn, holders)

    expiry, names = await node.db.read(extra)
    deps: dict[int, list[str]] = {}
    for e in g.edges:
        deps.setdefault(e.to_id, []).append(e.from_key)
    rows = [
        TaskRow(
            id=n.id,
            key=n.key,
            title=n.title,
            state=n.state,
            depends_on=deps.get(n.id, []),
            lease_holder=n.lease_holder,
            holder_name=names.get(n.lease_holder) if n.lease_holder else None,
            lease_expires_at=expiry.get(n.id) if n.state == "leased" else None,
            space=n.space,
        )
        for n in g.nodes
    ]
    counts: dict[str, int] = {}
    for r in rows:
        counts[r.state] = counts.get(r.state, 0) + 1
    board = TaskBoard(tasks=rows, missing=g.missing, truncated=g.truncated, counts=counts)
    drawn = {n.id: drawn_name(n) for n in g.nodes}  # one key in two spaces: two nodes of the drawing
    return board, [
        (e.from_key if e.from_id is None else drawn.get(e.from_id, e.from_key), drawn.get(e.to_id, e.to_key))
        for e in g.edges
    ]


async def task_board(request: web.Request) -> web.Response:
    board, _ = await _board(request)
    return json_response(board)


async def task_graph(request: web.Request) -> web.Response:
    board, edges = await _board(request)
    tasks = []
    for t in board.tasks:
        who = f" held by {t.holder_name or t.lease_holder} until {t.lease_expires_at}" if t.state == "leased" else ""
        name = t.key if t.space is None else f"{t.key}@{t.space[:12]}"  # as drawn_name names it
        tasks.append((name, name, f"{name}: {t.title} [{t.state}]{who}", t.state))
    note = f"first {MAX_DRAWN_TASKS} tasks only" if board.truncated else ""
    svg = await asyncio.to_thread(graphs.task_dag_svg, tasks, edges, board.missing, note)
    return web.Response(text=svg, content_type="image/svg+xml", headers={"Cache-Control": "no-store"})


async def projects(request: web.Request) -> web.Response:
    viewer = principal(request).agent_id

    def run(conn: Conn) -> ProjectList:
        rows = store.bus_projects(conn, sight_of(conn, viewer))
        return ProjectList([Project(p, n, format_ms(last_ms)) for p, n, last_ms in rows])

    return json_response(await request.app[NODE].db.read(run))


ROUTES: list[Route] = [
    Route("GET", "/dashboard/api/tasks", task_board, "Tasks with state, holder and lease expiry", "any"),
    Route("GET", "/dashboard/api/tasks/graph.svg", task_graph, "The task DAG as SVG", "any"),
    Route("GET", "/dashboard/api/bus/projects", projects, "Bus projects with message counts", "any"),
]
