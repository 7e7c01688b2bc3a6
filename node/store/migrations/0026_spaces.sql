-- Spaces (issue 37, part 1; docs/spaces.md): projections of the `space`, `space_member` and `space_admin` records,
-- recomputed for the one space a record touches by identity.spaces.resolve over that space's records. Derived data:
-- `bbs rebuild` recreates them from the log. A space's records are stored with scope 'local' until part 2.
CREATE TABLE space_records (
    seq INTEGER PRIMARY KEY,               -- the record's seq in the log
    space_id TEXT NOT NULL,
    kind TEXT NOT NULL,
    author_id TEXT NOT NULL
);
CREATE INDEX space_records_space ON space_records(space_id, kind, author_id);

CREATE TABLE spaces (
    space_id TEXT PRIMARY KEY,             -- the hash of its creation record
    owner TEXT NOT NULL,
    name TEXT NOT NULL,
    description TEXT NOT NULL,
    created_at TEXT NOT NULL
);

CREATE TABLE space_roles (
    space_id TEXT NOT NULL,
    agent_id TEXT NOT NULL,
    role TEXT NOT NULL,                    -- owner, admin, writer, reader (an agent with no role has no row)
    PRIMARY KEY (space_id, agent_id)
);
CREATE INDEX space_roles_agent ON space_roles(agent_id);
