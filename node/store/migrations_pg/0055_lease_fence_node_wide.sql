-- PostgreSQL's twin of node/store/migrations/0055_lease_fence_node_wide.sql (docs/decisions.md record 88): the lease
-- fence made node-wide for the processes that serve one node from this database.
CREATE TABLE lease_fence_processes (
    process text COLLATE "C" PRIMARY KEY,
    vouched bigint NOT NULL,
    identity text COLLATE "C",
    registered_ms bigint NOT NULL
);

CREATE TABLE lease_fence_holds (
    hold_id text COLLATE "C" PRIMARY KEY,
    until_ms bigint NOT NULL,
    since_ms bigint,
    grants bigint,
    identity text COLLATE "C",
    set_ms bigint NOT NULL
);
