-- PostgreSQL's twin of node/store/migrations/0054_node_leader.sql: the node's leader lease (docs/decisions.md
-- record 87). `expires_ms` is the database server's clock (clock_timestamp()), one clock for processes on several
-- machines. The row is taken over under the writer's advisory lock, and a leader's writes read its epoch under that
-- lock (node/store/leader.py).
CREATE TABLE node_leader (
    id bigint PRIMARY KEY CHECK (id = 1),
    process_id text COLLATE "C",
    epoch bigint NOT NULL,
    expires_ms bigint NOT NULL
);

INSERT INTO node_leader (id, process_id, epoch, expires_ms) VALUES (1, NULL, 0, 0);
