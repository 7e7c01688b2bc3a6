-- The nodes that host each space (issue 38; docs/spaces.md, "Which nodes host a space"): a projection of the
-- `space_host` records, recomputed with the roles by identity.spaces.resolve, plus the node a space was created on
-- (its creation record's origin is `local`), which hosts it implicitly while no hosting chain names it. Derived
-- data: `bbs rebuild` recreates it. No `space_host` record was accepted before this release, so the rows of the
-- spaces held are exactly their creation nodes: this node for the spaces created here.
CREATE TABLE space_hosts (
    space_id TEXT NOT NULL,
    node_id TEXT NOT NULL,
    PRIMARY KEY (space_id, node_id)
);
CREATE INDEX space_hosts_node ON space_hosts(node_id);

INSERT OR IGNORE INTO space_hosts (space_id, node_id)
SELECT s.space_id, m.value FROM space_records s
JOIN records r ON r.seq = s.seq
JOIN spaces v ON v.space_id = s.space_id
JOIN node_meta m ON m.key = 'node_id'
WHERE s.kind = 'space' AND r.origin = 'local';
