-- The lease fence of a node served by several processes (docs/decisions.md record 88). A SQLite node is one
-- process and never writes these tables; PostgreSQL's twin, node/store/migrations_pg/0055_lease_fence_node_wide.sql,
-- is the same schema.
--
-- lease_fence_processes: every data folder (a `bbs serve` process) that checks its lease fence against this
-- database: `vouched` 1 once it holds a fence it checked the database against, `identity` the database history
-- (system identifier, timeline, store epoch) it last checked under.
CREATE TABLE lease_fence_processes (
    process TEXT PRIMARY KEY,
    vouched INTEGER NOT NULL,
    identity TEXT,
    registered_ms INTEGER NOT NULL
);

-- lease_fence_holds: no process grants a lease while a row holds. A count hold (`since_ms`, `grants`) ends when the
-- database again holds that many grants expiring after `since_ms`; a history hold (`identity`) when every vouched
-- process has checked in under that identity; both at `until_ms` at the latest.
CREATE TABLE lease_fence_holds (
    hold_id TEXT PRIMARY KEY,
    until_ms INTEGER NOT NULL,
    since_ms INTEGER,
    grants INTEGER,
    identity TEXT,
    set_ms INTEGER NOT NULL
);
