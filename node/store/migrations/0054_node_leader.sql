-- The node's leader lease (docs/decisions.md record 87): which serving process runs the work done once per node
-- (the peer pullers, trust recomputation, twin notices, the push dispatcher, retention, the expiry sweep, the
-- redaction scrub's database half), and its epoch, bumped at every take-over: a leader's writes check it inside
-- their transaction (node/store/leader.py), so a paused old leader cannot write after a new one took over. One row,
-- free at first. On SQLite a single process serves the file and is always the leader: the row stays as it is.
CREATE TABLE node_leader (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    process_id TEXT,                       -- the leading process's `Node.process_id`; NULL: free
    epoch INTEGER NOT NULL,                -- terms begun so far (0: never led)
    expires_ms INTEGER NOT NULL            -- the database's clock, epoch ms: free for the taking after this
);

INSERT INTO node_leader (id, process_id, epoch, expires_ms) VALUES (1, NULL, 0, 0);
