-- PostgreSQL's twin of node/store/migrations/0057_lease_fence_check_in.sql: when each process last checked its
-- lease fence against the database.
ALTER TABLE lease_fence_processes ADD COLUMN checked_in_ms bigint NOT NULL DEFAULT 0;
UPDATE lease_fence_processes SET checked_in_ms = registered_ms;
