-- PostgreSQL's twin of node/store/migrations/0056_write_clock.sql (docs/decisions.md record 90): the node-wide write
-- clock. Every write transaction moves it right after taking the writer's advisory lock (node/store/db.py,
-- PG_BEGIN_WRITE): the lock is held, so the one-row UPDATE never waits, and RETURNING hands the writer the value it
-- compares with the one its own last commit left.
CREATE TABLE write_clock (
    id bigint PRIMARY KEY CHECK (id = 1),
    n bigint NOT NULL
);
INSERT INTO write_clock (id, n) VALUES (1, 0);
