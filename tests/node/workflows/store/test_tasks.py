"""node.workflows.store.tasks: tasks written and found, dependencies and their unmet counts, the ready set, the
cycle check and the graph's rows."""

from __future__ import annotations

import pytest

from identity import keys
from node.entries.queries import seen_by
from node.spaces.sight import OPERATOR, PUBLIC, Sight
from node.store.conn import POSTGRESQL, Conn
from node.workflows.store import tasks
from tests.node.workflows.store.helpers import T0, Store, append, declare, pg_scans, task_row


async def store(db: Store, *rows: tasks.TaskRow) -> None:
    def write(conn: Conn) -> None:
        for row in rows:
            tasks.upsert_task_txn(conn, row)

    await db.write(write)


async def depend(db: Store, key: str, deps: list[str]) -> None:
    """Give `key` the dependencies `deps` and recount it, as the fold does."""

    def write(conn: Conn) -> None:
        tasks.replace_deps_txn(conn, key, deps)
        tasks.recount_task_txn(conn, key)

    await db.write(write)


async def unmet(db: Store, key: str) -> int:
    return int((await db.read(lambda c: c.execute("SELECT unmet FROM tasks WHERE key = ?", (key,)).fetchone()))[0])


async def test_a_task_is_written_then_updated_in_place_and_found_by_id_or_key(db: Store) -> None:
    await store(db, task_row(5, "build"))
    await store(db, task_row(9, "build", status="done"))  # the same key again: updated, its id kept
    by_id = await db.read(lambda c: tasks.task_by(c, "id", 5))
    assert by_id is not None and by_id["key"] == "build" and by_id["status"] == "done" and by_id["open"] == 0
    by_key = await db.read(lambda c: tasks.task_by(c, "key", "build"))
    assert by_key is not None and tuple(by_key) == tuple(by_id)
    found = await db.read(lambda c: tasks.task_by_key(c, "build"))
    assert found is not None and tuple(found) == tuple(by_id)
    assert await db.read(lambda c: tasks.task_by(c, "id", 9)) is None
    assert await db.read(lambda c: tasks.task_by_key(c, "missing")) is None
    assert await db.read(lambda c: tasks.home_node(c, "build")) == "did:key:home"
    assert await db.read(lambda c: tasks.home_node(c, "missing")) is None
    with pytest.raises(ValueError, match="by id or key"):
        await db.read(lambda c: tasks.task_by(c, "title", "Build"))


async def test_unmet_counts_missing_and_unfinished_dependencies(db: Store) -> None:
    await store(db, task_row(1, "a"), task_row(2, "b"))
    await depend(db, "b", ["a", "later"])
    assert await unmet(db, "b") == 2  # `later` is not declared yet: it counts
    assert await db.read(lambda c: tasks.waiting_on(c, "b")) == ["a", "later"]
    await store(db, task_row(1, "a", status="done"))
    await db.write(lambda c: tasks.recount_dependents_txn(c, "a"))
    assert await unmet(db, "b") == 1
    await store(db, task_row(3, "later", status="completed"))
    assert await unmet(db, "b") == 1  # counts move only when recounted
    await db.write(lambda c: tasks.recount_dependents_txn(c, "later"))
    assert await unmet(db, "b") == 0 and await db.read(lambda c: tasks.waiting_on(c, "b")) == []
    await depend(db, "b", ["c"])  # replaced, not added to
    assert await unmet(db, "b") == 1 and await db.read(lambda c: tasks.waiting_on(c, "b")) == ["c"]


async def test_the_ready_set_is_open_unblocked_and_unleased_tasks_a_page_at_a_time(db: Store) -> None:
    now = T0 + 60_000
    await store(
        db,
        task_row(1, "a"),
        task_row(2, "b", status="done"),
        task_row(3, "c", lease_hash="l1", lease_holder="did:key:w", lease_expires_ms=now + 1),  # live lease
        task_row(4, "d", lease_hash="l2", lease_holder="did:key:w", lease_expires_ms=now),  # lapsed at `now`
        task_row(5, "e"),
        task_row(6, "f"),
    )
    await depend(db, "e", ["missing"])

    async def ready(limit: int, after: int | None = None) -> list[str]:
        return [r["key"] for r in await db.read(lambda c: tasks.ready_rows(c, now, limit, after, OPERATOR))]

    assert await ready(10) == ["a", "d", "f"]
    assert await ready(1) == ["a", "d"]  # a page and one more
    assert await ready(10, after=1) == ["d", "f"]


async def test_ready_is_one_index_range(db: Store) -> None:
    await store(db, task_row(1, "x"))
    for sight in (OPERATOR, PUBLIC, Sight(frozenset({"a" * 64, "b" * 64}))):  # the read rule filters the range
        if db.engine == POSTGRESQL:  # no INDEXED BY there: the partial index must be one the planner can use
            ready = tasks.READY_SQL_PG.format(sight=seen_by(db.conn, sight, "space"))

            def scans_of(c: Conn, sql: str = ready) -> list[tuple[str, str | None]]:
                return pg_scans(c, sql, (-1, T0, None, None, 101))

            scans = await db.read(scans_of)
            assert scans == [("tasks", "tasks_startable")]
            continue
        sql = "EXPLAIN QUERY PLAN " + tasks.READY_SQL.format(sight=sight.sql("space"))

        def plan_of(c: Conn, sql: str = sql) -> list[str]:
            return [r[-1] for r in c.execute(sql, (-1, T0, None, None, 101))]

        plan = await db.read(plan_of)
        assert plan == ["SEARCH tasks USING INDEX tasks_startable (id>?)"]


async def test_reaches_follows_stored_dependencies_transitively(db: Store) -> None:
    def write(conn: Conn) -> None:
        for key, deps in (("b", ["a"]), ("c", ["b"]), ("d", ["x"])):
            tasks.replace_deps_txn(conn, key, deps)

    await db.write(write)
    assert await db.read(lambda c: tasks.reaches(c, ["c"], "a"))  # c -> b -> a
    assert await db.read(lambda c: tasks.reaches(c, ["d", "c"], "b"))
    assert await db.read(lambda c: tasks.reaches(c, ["a"], "a"))  # a start is reached
    assert not await db.read(lambda c: tasks.reaches(c, ["a"], "c"))  # against the arrows: no
    assert not await db.read(lambda c: tasks.reaches(c, [], "a"))


async def test_graph_rows_carry_their_identity_and_edges_resolve_declared_prerequisites(db: Store) -> None:
    author, node = keys.SigningKey.generate(), keys.SigningKey.generate()
    build, _ = await append(
        db,
        declare(author, node.did, T0, key="build"),
        declare(author, node.did, T0 + 1, key="deploy", depends_on=["build", "test"]),
    )
    rows = await db.read(lambda c: tasks.graph_tasks(c, 5, OPERATOR))
    assert [(r["key"], r["unmet"]) for r in rows] == [("build", 0), ("deploy", 2)]
    assert rows[0]["identity"] == build
    one_more = await db.read(lambda c: tasks.graph_tasks(c, 1, OPERATOR))
    assert [r["key"] for r in one_more] == ["build", "deploy"]  # a page and one more
    ids = {r["key"]: r["id"] for r in rows}
    edges = await db.read(lambda c: tasks.graph_edges(c, ids["deploy"], OPERATOR))
    assert edges == [("build", "deploy", ids["build"], ids["deploy"]), ("test", "deploy", None, ids["deploy"])]
    # edges into later tasks: not read
    assert await db.read(lambda c: tasks.graph_edges(c, ids["build"], OPERATOR)) == []
    await store(db, task_row(99, "drawn-late"))  # a task with no declaration stored draws no identity
    assert (await db.read(lambda c: tasks.graph_tasks(c, 5, OPERATOR)))[-1]["identity"] is None


async def test_the_ready_set_and_the_graph_keep_to_the_readers_sight_and_the_space_asked(db: Store) -> None:
    mine, other = "a" * 64, "b" * 64
    member = Sight(frozenset({mine}))
    await store(
        db,
        task_row(1, "pub"),
        task_row(2, f"{mine}/first")._replace(space=mine),
        task_row(3, f"{other}/theirs")._replace(space=other),
        task_row(4, f"{mine}/next")._replace(space=mine),
    )
    await depend(db, f"{mine}/next", [f"{mine}/first"])  # blocked: not ready, an edge of the graph

    async def ready(sight: Sight, space: str | None = None) -> list[str]:
        return [r["key"] for r in await db.read(lambda c: tasks.ready_rows(c, T0, 10, None, sight, space))]

    async def drawn(sight: Sight, space: str | None = None) -> list[str]:
        return [r["key"] for r in await db.read(lambda c: tasks.graph_tasks(c, 10, sight, space))]

    assert await ready(PUBLIC) == ["pub"]
    assert await ready(member) == ["pub", f"{mine}/first"]
    assert await ready(member, mine) == [f"{mine}/first"]
    assert await ready(OPERATOR) == ["pub", f"{mine}/first", f"{other}/theirs"]
    assert await ready(OPERATOR, other) == [f"{other}/theirs"]
    assert await drawn(member) == ["pub", f"{mine}/first", f"{mine}/next"]
    assert await drawn(OPERATOR, mine) == [f"{mine}/first", f"{mine}/next"]
    assert await drawn(PUBLIC, other) == []
    edge = (f"{mine}/first", f"{mine}/next", 2, 4)
    assert await db.read(lambda c: tasks.graph_edges(c, 4, member, mine)) == [edge]
    assert await db.read(lambda c: tasks.graph_edges(c, 4, OPERATOR)) == [edge]
    assert await db.read(lambda c: tasks.graph_edges(c, 4, PUBLIC)) == []
    assert await db.read(lambda c: tasks.graph_edges(c, 4, OPERATOR, other)) == []
    assert await db.read(lambda c: tasks.held_keys(c, [f"{mine}/next", "pub", "absent"])) == {f"{mine}/next", "pub"}
    assert await db.read(lambda c: tasks.held_keys(c, [])) == set()


async def test_a_deleted_task_leaves_the_graph_and_its_dependents_are_recounted(db: Store) -> None:
    await store(db, task_row(1, "a", status="done"), task_row(2, "b"), task_row(3, "c"))
    await depend(db, "a", ["c"])
    await depend(db, "b", ["a"])
    assert await unmet(db, "b") == 0
    await db.write(lambda c: tasks.delete_task_txn(c, "a"))
    assert await db.read(lambda c: tasks.task_by_key(c, "a")) is None
    assert await unmet(db, "b") == 1 and await db.read(lambda c: tasks.waiting_on(c, "b")) == ["a"]  # missing now
    deps = await db.read(lambda c: [tuple(r) for r in c.execute("SELECT * FROM task_deps ORDER BY task_key")])
    assert deps == [("b", "a")]  # a's own rows went with it
