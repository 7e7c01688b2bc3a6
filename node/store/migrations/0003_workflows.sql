-- Agent workflows: the message bus and the task graph. Every table here is a projection of
-- `message` and `task_event` records (rebuilt by `bbs rebuild`).

CREATE TABLE messages (
    id INTEGER PRIMARY KEY,               -- the record's seq on this node
    record_hash TEXT NOT NULL UNIQUE,
    from_agent TEXT NOT NULL,
    to_agent TEXT,                        -- NULL: a broadcast
    message_type TEXT NOT NULL,
    body TEXT NOT NULL,
    payload TEXT NOT NULL,                -- JSON object
    dependency_ids TEXT NOT NULL,         -- JSON array
    project TEXT,
    created_at TEXT NOT NULL,
    created_ms INTEGER NOT NULL,
    signature TEXT NOT NULL
);
CREATE INDEX messages_time ON messages(created_ms, id);
CREATE INDEX messages_project ON messages(project, created_ms, id);

-- Both ends of every message (the record's tags): an agent filter is one index range.
CREATE TABLE message_agents (
    agent_id TEXT NOT NULL,
    created_ms INTEGER NOT NULL,
    message_id INTEGER NOT NULL,
    PRIMARY KEY (agent_id, created_ms, message_id)
) WITHOUT ROWID;

-- Every task event, by task key, in the order the fold reads them: (created_ms, hash).
CREATE TABLE task_events (
    seq INTEGER PRIMARY KEY,
    hash TEXT NOT NULL UNIQUE,
    task_key TEXT NOT NULL,
    event TEXT NOT NULL CHECK (event IN ('declare', 'lease', 'release', 'complete')),
    author_id TEXT NOT NULL,
    created_at TEXT NOT NULL,
    created_ms INTEGER NOT NULL,
    node_id TEXT,
    title TEXT,
    depends_on TEXT,                      -- JSON array, NULL when the event does not set it
    status TEXT,
    checkpoint TEXT,                      -- JSON merge patch
    holder TEXT,
    expires_at TEXT,
    expires_ms INTEGER,
    lease_ref TEXT                        -- the lease a release or complete ends
);
CREATE INDEX task_events_key ON task_events(task_key, created_ms, hash);

-- The current task: the fold of its events. `unmet` counts dependencies not yet done or completed
-- (missing tasks count), `open` is 1 while the task's status lets it start.
CREATE TABLE tasks (
    id INTEGER PRIMARY KEY,               -- seq of the first declaration this node stored
    key TEXT NOT NULL UNIQUE,
    title TEXT NOT NULL,
    status TEXT NOT NULL,
    depends_on TEXT NOT NULL,             -- JSON array of keys
    checkpoint TEXT NOT NULL,             -- JSON object
    home_node TEXT NOT NULL,
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL,
    last_ms INTEGER NOT NULL,             -- created_ms of the newest event
    lease_hash TEXT,
    lease_holder TEXT,
    lease_expires_at TEXT,
    lease_expires_ms INTEGER,
    unmet INTEGER NOT NULL,
    open INTEGER NOT NULL
);
CREATE INDEX tasks_startable ON tasks(id) WHERE unmet = 0 AND open = 1;

CREATE TABLE task_deps (
    task_key TEXT NOT NULL,
    dep_key TEXT NOT NULL,
    PRIMARY KEY (task_key, dep_key)
) WITHOUT ROWID;
CREATE INDEX task_deps_dep ON task_deps(dep_key, task_key);
