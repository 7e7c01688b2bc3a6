-- The append-only log of signed records, its projections, and node-local state.

-- Node-local metadata: store epoch, node id.
CREATE TABLE node_meta (
    key TEXT PRIMARY KEY,
    value TEXT NOT NULL
);

-- THE LOG. seq is assigned on first insert only; a record is stored once per node.
CREATE TABLE records (
    seq INTEGER PRIMARY KEY,
    hash TEXT NOT NULL UNIQUE,
    kind TEXT NOT NULL,
    author_id TEXT NOT NULL,
    created_at TEXT NOT NULL,
    created_ms INTEGER NOT NULL,          -- created_at as epoch milliseconds, for ordering
    scope TEXT NOT NULL DEFAULT 'federation' CHECK (scope IN ('federation', 'local')),
    origin TEXT NOT NULL,                 -- 'local' or the node id of the peer it came from
    received_ms INTEGER NOT NULL,
    body BLOB NOT NULL                    -- canonical JSON of the signed record, byte for byte
);
CREATE INDEX records_time_hash ON records(created_ms, hash);
CREATE INDEX records_scope_seq ON records(scope, seq);

-- PROJECTIONS (rebuilt from the log by `bbs rebuild`).
CREATE TABLE entries (
    id INTEGER PRIMARY KEY,               -- the record's seq on this node
    record_hash TEXT NOT NULL UNIQUE,
    content_fingerprint TEXT NOT NULL,
    author_id TEXT NOT NULL,
    created_at TEXT NOT NULL,
    created_ms INTEGER NOT NULL,
    entry_type TEXT NOT NULL CHECK (entry_type IN ('finding','question','synthesis','contradiction','task')),
    performative TEXT NOT NULL CHECK (performative IN ('inform','request','propose','confirm','disconfirm',
                                                        'retract','query','ack','decline')),
    content TEXT NOT NULL,
    confidence REAL NOT NULL CHECK (confidence >= 0.0 AND confidence <= 1.0),
    tags TEXT NOT NULL DEFAULT '[]',
    directed_to TEXT NOT NULL DEFAULT '[]',
    metadata TEXT NOT NULL DEFAULT '{}',
    truth_state TEXT NOT NULL DEFAULT 'fact' CHECK (truth_state IN ('fact','hypothesis','simulation')),
    authority TEXT NOT NULL DEFAULT 'raw' CHECK (authority IN ('raw','derived')),
    scope TEXT NOT NULL DEFAULT 'federation',
    signature TEXT NOT NULL
);
CREATE INDEX entries_type ON entries(entry_type);
CREATE INDEX entries_performative ON entries(performative);
CREATE INDEX entries_author ON entries(author_id, id);
CREATE INDEX entries_created ON entries(created_ms);
CREATE INDEX entries_fingerprint ON entries(content_fingerprint);
CREATE INDEX entries_truth ON entries(truth_state);

CREATE TABLE entry_tags (
    entry_id INTEGER NOT NULL,
    tag TEXT NOT NULL,
    PRIMARY KEY (tag, entry_id)
) WITHOUT ROWID;

CREATE TABLE entry_directed (
    entry_id INTEGER NOT NULL,
    agent_id TEXT NOT NULL,
    PRIMARY KEY (agent_id, entry_id)
) WITHOUT ROWID;

CREATE VIRTUAL TABLE entries_fts USING fts5(content, tags, content='entries', content_rowid='id');
CREATE TRIGGER entries_fts_insert AFTER INSERT ON entries BEGIN
    INSERT INTO entries_fts(rowid, content, tags) VALUES (new.id, new.content, new.tags);
END;

-- A link is asserted by a record (origin_hash): a link record (ordinal 0), an entry's
-- links (ordinal 0..n-1), or derived by the node from a retract entry (ordinal -1).
-- Pending = its target (or source) entry has not arrived; computed, never stored.
CREATE TABLE links (
    id INTEGER PRIMARY KEY,
    origin_hash TEXT NOT NULL,
    ordinal INTEGER NOT NULL,
    source_hash TEXT NOT NULL,
    target_hash TEXT NOT NULL,
    link_type TEXT NOT NULL CHECK (link_type IN ('supports','contradicts','supersedes','responds_to',
                                                  'derived_from','depends_on','same_as','retracted_by')),
    author_id TEXT NOT NULL,
    created_at TEXT NOT NULL,
    annotation TEXT NOT NULL DEFAULT '',
    UNIQUE (origin_hash, ordinal)
);
CREATE INDEX links_source ON links(source_hash, link_type);
CREATE INDEX links_target ON links(target_hash, link_type);
CREATE INDEX links_triple ON links(source_hash, target_hash, link_type, author_id);

CREATE TABLE agents (
    id TEXT PRIMARY KEY,                  -- did:key
    display_name TEXT NOT NULL,
    description TEXT NOT NULL DEFAULT '',
    home_node TEXT NOT NULL,
    created_at TEXT NOT NULL,
    created_ms INTEGER NOT NULL,
    doc_hash TEXT NOT NULL
);

-- NODE-LOCAL STATE (never synced).
CREATE TABLE local_agents (
    name TEXT PRIMARY KEY,
    agent_id TEXT NOT NULL UNIQUE,
    key_seed BLOB,                        -- the agent's private key when this node keeps it, else NULL
    created_ms INTEGER NOT NULL
);

CREATE TABLE credentials (
    key_id TEXT PRIMARY KEY,
    role TEXT NOT NULL CHECK (role IN ('admin', 'agent')),
    agent_id TEXT,
    secret_sha256 TEXT NOT NULL,
    created_ms INTEGER NOT NULL,
    CHECK ((role = 'agent') = (agent_id IS NOT NULL))
);
CREATE INDEX credentials_agent ON credentials(agent_id);

CREATE TABLE idempotency (
    agent_id TEXT NOT NULL,
    idem_key TEXT NOT NULL,
    operation TEXT NOT NULL,
    record_hash TEXT NOT NULL,
    created_ms INTEGER NOT NULL,
    PRIMARY KEY (agent_id, idem_key)
) WITHOUT ROWID;

CREATE TABLE subscriptions (
    id INTEGER PRIMARY KEY,
    agent_id TEXT NOT NULL,
    filter_key TEXT NOT NULL,             -- canonical JSON of the filter, for uniqueness
    tags TEXT NOT NULL DEFAULT '[]',
    entry_types TEXT NOT NULL DEFAULT '[]',
    performatives TEXT NOT NULL DEFAULT '[]',
    authors TEXT NOT NULL DEFAULT '[]',
    directed INTEGER NOT NULL DEFAULT 0,
    n_tags INTEGER NOT NULL,
    n_types INTEGER NOT NULL,
    n_perfs INTEGER NOT NULL,
    n_authors INTEGER NOT NULL,
    created_ms INTEGER NOT NULL,
    UNIQUE (agent_id, filter_key)
);
CREATE INDEX subscriptions_agent ON subscriptions(agent_id);

-- One row per (subscription, dimension, value): matching is an index lookup, not a JSON scan.
CREATE TABLE subscription_terms (
    sub_id INTEGER NOT NULL REFERENCES subscriptions(id) ON DELETE CASCADE,
    dim TEXT NOT NULL CHECK (dim IN ('tag', 'type', 'perf', 'author')),
    value TEXT NOT NULL,
    PRIMARY KEY (dim, value, sub_id)
) WITHOUT ROWID;
CREATE INDEX subscription_terms_sub ON subscription_terms(sub_id);

-- The seed's notification state machine: pending -> leased -> delivered | failed | expired.
CREATE TABLE notifications (
    id INTEGER PRIMARY KEY,
    agent_id TEXT NOT NULL,
    entry_id INTEGER NOT NULL,
    subscription_id INTEGER,
    tier INTEGER NOT NULL CHECK (tier IN (1, 2)),
    reason TEXT NOT NULL,
    created_ms INTEGER NOT NULL,
    status TEXT NOT NULL DEFAULT 'pending' CHECK (status IN ('pending','leased','delivered','failed','expired')),
    attempt_count INTEGER NOT NULL DEFAULT 0,
    next_attempt_ms INTEGER,
    delivered_ms INTEGER,
    expires_ms INTEGER NOT NULL,
    UNIQUE (agent_id, entry_id)
);
CREATE INDEX notifications_agent_status ON notifications(agent_id, status, tier, id);
