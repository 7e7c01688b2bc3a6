-- The node-wide write clock (docs/decisions.md record 90): one row whose `n` every write transaction on PostgreSQL
-- moves (node/store/db.py, right after it takes the writer's advisory lock), so a serving process tells at the start
-- of its write transaction whether another process committed since its own last one, and then checks the caches its
-- write decisions read (the authority cache, the node's keys, cached signing keys and tokens). SQLite is served by
-- one process: the table is here so both engines keep one schema, and nothing moves it.
CREATE TABLE write_clock (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    n INTEGER NOT NULL
);
INSERT INTO write_clock (id, n) VALUES (1, 0);
