-- Task events inside a space (issue 37; docs/spaces.md, "Posting into a space"): the space of a task and of each of
-- its events, NULL for a public one. Existing tasks stay public.
--
-- A task's identity is (space, key). It is kept as one text value, the scoped key, in the columns that already
-- identify a task: `tasks.key`, `task_events.task_key`, `task_deps` (both columns) and `task_home_moves.task_key`
-- hold the key itself for a public task and `<space>/<key>` for a task of a space (node/workflows/scope.py). A key
-- never holds `/` (identity/schema.py TaskKey) and a space id never does either, so no two tasks share one scoped
-- key: the existing UNIQUE on `tasks.key` is the (space, key) uniqueness, every statement that finds a task by key
-- (leases, the fence, twins, dependencies, the ready set, the graph) keeps its index and its plan, and no table is
-- rebuilt. Two columns instead would need a new UNIQUE over (COALESCE(space, ''), key) (NULL is distinct in a
-- UNIQUE), a rebuilt `tasks` table (its inline UNIQUE cannot be dropped) and `task_deps` (a WITHOUT ROWID key may
-- not be NULL), and a second condition in every statement, each a place to forget it.
--
-- `space` is the column the read rule filters on (node/spaces/sight.py `Sight.sql`), as messages.space (0031).
ALTER TABLE tasks ADD COLUMN space TEXT;
ALTER TABLE task_events ADD COLUMN space TEXT;
