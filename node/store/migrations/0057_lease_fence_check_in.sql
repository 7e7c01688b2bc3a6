-- When each process of a node on PostgreSQL last checked its lease fence against the database (docs/decisions.md
-- record 88, amended): `bbs processes` tells a process that stopped checking in (retired, stopped, its folder
-- gone) from a serving one, which refreshes it about once a minute. A SQLite node never writes the table;
-- PostgreSQL's twin is node/store/migrations_pg/0057_lease_fence_check_in.sql. A row from before counts from its
-- registration.
ALTER TABLE lease_fence_processes ADD COLUMN checked_in_ms INTEGER NOT NULL DEFAULT 0;
UPDATE lease_fence_processes SET checked_in_ms = registered_ms;
