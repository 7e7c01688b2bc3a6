-- The PostgreSQL schema at SQLite's migration 0050 (node/store/migrations/), in one script: a PostgreSQL database
-- starts here and never runs 0001 to 0050 (docs/decisions.md records 50 and 76). Later migrations are numbered alike
-- for both engines: 0051_x.sql in node/store/migrations/ has 0051_x.sql here (tests/node/store/test_pg_schema.py).
-- Tables, columns and indexes are named and ordered as a SQLite database migrated to 0050 holds them (columns added
-- by ALTER TABLE come last, as there), so `SELECT *` reads the same. The translations (record 50):
--   INTEGER -> bigint, REAL -> double precision, BLOB -> bytea, TEXT -> text COLLATE "C" (SQLite compares text
--     bytewise: digests, hash cursors and pages order the same on both engines whatever the database's locale);
--   an INTEGER PRIMARY KEY the database hands out -> bigint GENERATED ALWAYS AS IDENTITY (never reused, as
--     AUTOINCREMENT: migration 0049); one the code sets (entries.id is the record's seq) -> bigint PRIMARY KEY;
--   WITHOUT ROWID -> a plain table; triggers -> PL/pgSQL functions; no FTS5 (search is the tantivy index);
--   booleans stay 0/1 integers; PRAGMA user_version -> the one-row schema_version table the runner writes.

CREATE TABLE schema_version (
    id bigint PRIMARY KEY CHECK (id = 1),
    version bigint NOT NULL
);

CREATE TABLE node_meta (
    key text COLLATE "C" PRIMARY KEY,
    value text COLLATE "C" NOT NULL
);

CREATE TABLE entries (
    id bigint PRIMARY KEY,               -- the record's seq on this node
    record_hash text COLLATE "C" NOT NULL UNIQUE,
    content_fingerprint text COLLATE "C" NOT NULL,
    author_id text COLLATE "C" NOT NULL,
    created_at text COLLATE "C" NOT NULL,
    created_ms bigint NOT NULL,
    entry_type text COLLATE "C" NOT NULL CHECK (entry_type IN ('finding','question','synthesis','contradiction','task')),
    performative text COLLATE "C" NOT NULL CHECK (performative IN ('inform','request','propose','confirm','disconfirm',
                                                        'retract','query','ack','decline')),
    content text COLLATE "C" NOT NULL,
    confidence double precision NOT NULL CHECK (confidence >= 0.0 AND confidence <= 1.0),
    tags text COLLATE "C" NOT NULL DEFAULT '[]',
    directed_to text COLLATE "C" NOT NULL DEFAULT '[]',
    metadata text COLLATE "C" NOT NULL DEFAULT '{}',
    truth_state text COLLATE "C" NOT NULL DEFAULT 'fact' CHECK (truth_state IN ('fact','hypothesis','simulation')),
    authority text COLLATE "C" NOT NULL DEFAULT 'raw' CHECK (authority IN ('raw','derived')),
    scope text COLLATE "C" NOT NULL DEFAULT 'federation',
    signature text COLLATE "C" NOT NULL,
    space text COLLATE "C"
);

CREATE INDEX entries_type ON entries(entry_type);

CREATE INDEX entries_performative ON entries(performative);

CREATE INDEX entries_author ON entries(author_id, id);

CREATE INDEX entries_created ON entries(created_ms);

CREATE INDEX entries_fingerprint ON entries(content_fingerprint);

CREATE INDEX entries_truth ON entries(truth_state);

CREATE TABLE entry_tags (
    entry_id bigint NOT NULL,
    tag text COLLATE "C" NOT NULL,
    PRIMARY KEY (tag, entry_id)
);

CREATE TABLE entry_directed (
    entry_id bigint NOT NULL,
    agent_id text COLLATE "C" NOT NULL,
    PRIMARY KEY (agent_id, entry_id)
);

CREATE TABLE links (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    origin_hash text COLLATE "C" NOT NULL,
    ordinal bigint NOT NULL,
    source_hash text COLLATE "C" NOT NULL,
    target_hash text COLLATE "C" NOT NULL,
    link_type text COLLATE "C" NOT NULL CHECK (link_type IN ('supports','contradicts','supersedes','responds_to',
                                                  'derived_from','depends_on','same_as','retracted_by')),
    author_id text COLLATE "C" NOT NULL,
    created_at text COLLATE "C" NOT NULL,
    annotation text COLLATE "C" NOT NULL DEFAULT '',
    space text COLLATE "C",
    UNIQUE (origin_hash, ordinal)
);

CREATE INDEX links_source ON links(source_hash, link_type);

CREATE INDEX links_target ON links(target_hash, link_type);

CREATE INDEX links_triple ON links(source_hash, target_hash, link_type, author_id);

CREATE TABLE agents (
    id text COLLATE "C" PRIMARY KEY,                  -- did:key
    display_name text COLLATE "C" NOT NULL,
    description text COLLATE "C" NOT NULL DEFAULT '',
    home_node text COLLATE "C" NOT NULL,
    created_at text COLLATE "C" NOT NULL,
    created_ms bigint NOT NULL,
    doc_hash text COLLATE "C" NOT NULL,
    agent_type text COLLATE "C"
);

CREATE TABLE local_agents (
    name text COLLATE "C" PRIMARY KEY,
    agent_id text COLLATE "C" NOT NULL UNIQUE,
    key_seed bytea,                        -- the agent's private key when this node keeps it, else NULL
    created_ms bigint NOT NULL
);

CREATE TABLE credentials (
    key_id text COLLATE "C" PRIMARY KEY,
    role text COLLATE "C" NOT NULL CHECK (role IN ('admin', 'agent')),
    agent_id text COLLATE "C",
    secret_sha256 text COLLATE "C" NOT NULL,
    created_ms bigint NOT NULL,
    CHECK ((role = 'agent') = (agent_id IS NOT NULL))
);

CREATE INDEX credentials_agent ON credentials(agent_id);

CREATE TABLE idempotency (
    agent_id text COLLATE "C" NOT NULL,
    idem_key text COLLATE "C" NOT NULL,
    operation text COLLATE "C" NOT NULL,
    record_hash text COLLATE "C" NOT NULL,
    created_ms bigint NOT NULL,
    PRIMARY KEY (agent_id, idem_key)
);

CREATE TABLE subscriptions (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    agent_id text COLLATE "C" NOT NULL,
    filter_key text COLLATE "C" NOT NULL,             -- canonical JSON of the filter, for uniqueness
    tags text COLLATE "C" NOT NULL DEFAULT '[]',
    entry_types text COLLATE "C" NOT NULL DEFAULT '[]',
    performatives text COLLATE "C" NOT NULL DEFAULT '[]',
    authors text COLLATE "C" NOT NULL DEFAULT '[]',
    directed bigint NOT NULL DEFAULT 0,
    n_tags bigint NOT NULL,
    n_types bigint NOT NULL,
    n_perfs bigint NOT NULL,
    n_authors bigint NOT NULL,
    created_ms bigint NOT NULL,
    spaces text COLLATE "C" NOT NULL DEFAULT '[]',
    n_spaces bigint NOT NULL DEFAULT 0,
    UNIQUE (agent_id, filter_key)
);

CREATE INDEX subscriptions_agent ON subscriptions(agent_id);

CREATE TABLE subscription_terms (
    sub_id bigint NOT NULL REFERENCES subscriptions(id) ON DELETE CASCADE,
    dim text COLLATE "C" NOT NULL CHECK (dim IN ('tag', 'type', 'perf', 'author')),
    value text COLLATE "C" NOT NULL,
    PRIMARY KEY (dim, value, sub_id)
);

CREATE INDEX subscription_terms_sub ON subscription_terms(sub_id);

CREATE TABLE peers (
    node_id text COLLATE "C" PRIMARY KEY,             -- the peer's did:key (its node key signs its sync requests)
    url text COLLATE "C" NOT NULL,
    added_ms bigint NOT NULL,
    cursor_epoch text COLLATE "C",                    -- the peer's store epoch the cursor belongs to
    cursor_seq bigint NOT NULL DEFAULT 0,-- saved in the same transaction as the records it brought
    remote_epoch text COLLATE "C",
    remote_head bigint,
    caught_up_ms bigint,                 -- last time cursor_seq reached remote_head
    last_ok_ms bigint,
    last_error text COLLATE "C",
    last_error_ms bigint,
    reconciliations bigint NOT NULL DEFAULT 0,
    last_reconcile_ms bigint,
    saved bigint NOT NULL DEFAULT 0,
    duplicate bigint NOT NULL DEFAULT 0,
    invalid bigint NOT NULL DEFAULT 0,
    pending_link bigint NOT NULL DEFAULT 0,
    internal bigint NOT NULL DEFAULT 0,
    overflow bigint NOT NULL DEFAULT 0,
    health text COLLATE "C",
    waiting bigint NOT NULL DEFAULT 0,
    dropped_waiting bigint NOT NULL DEFAULT 0,
    void bigint NOT NULL DEFAULT 0,
    sync_version bigint,
    cursor_version bigint,
    too_new_from bigint,
    too_new bigint NOT NULL DEFAULT 0,
    spaces text COLLATE "C"
);

CREATE TABLE peer_invalid (
    node_id text COLLATE "C" NOT NULL,
    reason text COLLATE "C" NOT NULL,
    count bigint NOT NULL,
    last_hash text COLLATE "C",
    last_detail text COLLATE "C",
    PRIMARY KEY (node_id, reason)
);

CREATE TABLE sync_wanted (
    hash text COLLATE "C" PRIMARY KEY,
    peer_id text COLLATE "C" NOT NULL,
    attempts bigint NOT NULL DEFAULT 0,
    next_ms bigint NOT NULL,
    first_ms bigint NOT NULL
);

CREATE INDEX sync_wanted_due ON sync_wanted(peer_id, next_ms);

CREATE TABLE messages (
    id bigint PRIMARY KEY,               -- the record's seq on this node
    record_hash text COLLATE "C" NOT NULL UNIQUE,
    from_agent text COLLATE "C" NOT NULL,
    to_agent text COLLATE "C",                        -- NULL: a broadcast
    message_type text COLLATE "C" NOT NULL,
    body text COLLATE "C" NOT NULL,
    payload text COLLATE "C" NOT NULL,                -- JSON object
    dependency_ids text COLLATE "C" NOT NULL,         -- JSON array
    project text COLLATE "C",
    created_at text COLLATE "C" NOT NULL,
    created_ms bigint NOT NULL,
    signature text COLLATE "C" NOT NULL,
    space text COLLATE "C"
);

CREATE INDEX messages_time ON messages(created_ms, id);

CREATE INDEX messages_project ON messages(project, created_ms, id);

CREATE TABLE message_agents (
    agent_id text COLLATE "C" NOT NULL,
    created_ms bigint NOT NULL,
    message_id bigint NOT NULL,
    PRIMARY KEY (agent_id, created_ms, message_id)
);

CREATE TABLE task_events (
    seq bigint PRIMARY KEY,
    hash text COLLATE "C" NOT NULL UNIQUE,
    task_key text COLLATE "C" NOT NULL,
    event text COLLATE "C" NOT NULL CHECK (event IN ('declare', 'lease', 'release', 'complete')),
    author_id text COLLATE "C" NOT NULL,
    created_at text COLLATE "C" NOT NULL,
    created_ms bigint NOT NULL,
    node_id text COLLATE "C",
    title text COLLATE "C",
    depends_on text COLLATE "C",                      -- JSON array, NULL when the event does not set it
    status text COLLATE "C",
    checkpoint text COLLATE "C",                      -- JSON merge patch
    holder text COLLATE "C",
    expires_at text COLLATE "C",
    expires_ms bigint,
    lease_ref text COLLATE "C",                        -- the lease a release or complete ends
    space text COLLATE "C"
);

CREATE INDEX task_events_key ON task_events(task_key, created_ms, hash);

CREATE TABLE tasks (
    id bigint PRIMARY KEY,               -- seq of the first declaration this node stored
    key text COLLATE "C" NOT NULL UNIQUE,
    title text COLLATE "C" NOT NULL,
    status text COLLATE "C" NOT NULL,
    depends_on text COLLATE "C" NOT NULL,             -- JSON array of keys
    checkpoint text COLLATE "C" NOT NULL,             -- JSON object
    home_node text COLLATE "C" NOT NULL,
    created_at text COLLATE "C" NOT NULL,
    updated_at text COLLATE "C" NOT NULL,
    last_ms bigint NOT NULL,             -- created_ms of the newest event
    lease_hash text COLLATE "C",
    lease_holder text COLLATE "C",
    lease_expires_at text COLLATE "C",
    lease_expires_ms bigint,
    unmet bigint NOT NULL,
    open bigint NOT NULL,
    space text COLLATE "C"
);

CREATE INDEX tasks_startable ON tasks(id) WHERE unmet = 0 AND open = 1;

CREATE TABLE task_deps (
    task_key text COLLATE "C" NOT NULL,
    dep_key text COLLATE "C" NOT NULL,
    PRIMARY KEY (task_key, dep_key)
);

CREATE INDEX task_deps_dep ON task_deps(dep_key, task_key);

CREATE TABLE dm_candidates (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    kind text COLLATE "C" NOT NULL CHECK (kind IN ('open_question', 'decision', 'open_loop', 'preference', 'risk', 'reflection',
                                       'consolidation', 'simulation', 'stakeholder_simulation', 'incubation')),
    text text COLLATE "C" NOT NULL,
    salience double precision NOT NULL CHECK (salience >= 0.0 AND salience <= 1.0),
    confidence double precision NOT NULL CHECK (confidence >= 0.0 AND confidence <= 1.0),
    evidence_refs text COLLATE "C" NOT NULL DEFAULT '[]',       -- JSON list of record hashes
    truth_state text COLLATE "C" NOT NULL CHECK (truth_state IN ('fact', 'hypothesis', 'simulation')),
    synthetic bigint NOT NULL DEFAULT 0 CHECK (synthetic IN (0, 1)),
    status text COLLATE "C" NOT NULL DEFAULT 'proposed'
        CHECK (status IN ('proposed', 'approved', 'needs_review', 'rejected', 'promoted')),
    critic_decision text COLLATE "C",                           -- approved | needs_review | rejected, once the critic has run
    critic_reasons text COLLATE "C" NOT NULL DEFAULT '[]',      -- JSON list of the rules that fired
    risk_flag bigint CHECK (risk_flag IN (0, 1)),
    evidence_flag bigint CHECK (evidence_flag IN (0, 1)),
    payload text COLLATE "C" NOT NULL DEFAULT '{}',             -- structured template output, salience features, ...
    tags text COLLATE "C" NOT NULL DEFAULT '[]',
    source text COLLATE "C" NOT NULL,                           -- reflect-session | critic | consolidate | simulate-future | ...
    proposed_by text COLLATE "C" NOT NULL,                      -- the agent whose call created it
    created_ms bigint NOT NULL,
    reviewed_ms bigint,
    promoted_hash text COLLATE "C",                             -- the entry it became
    promoted_by text COLLATE "C",
    promoted_ms bigint,
    decision text COLLATE "C" CHECK (decision IN ('approve', 'reject')),
    decided_by text COLLATE "C",
    decided_ms bigint,
    decision_note text COLLATE "C",
    promote_requested_by text COLLATE "C",
    space text COLLATE "C",
    CHECK ((status = 'promoted') = (promoted_hash IS NOT NULL))
);

CREATE INDEX dm_candidates_status ON dm_candidates(status, id);

CREATE INDEX links_type_target ON links(link_type, target_hash);

CREATE TABLE trust_scores (
    agent_id text COLLATE "C" PRIMARY KEY,
    confirms bigint NOT NULL,                      -- distinct (endorser, entry) confirmations, self excluded
    disconfirms bigint NOT NULL,
    laplace double precision NOT NULL,                          -- v2.0: (confirms + 1) / (confirms + disconfirms + 2)
    score double precision NOT NULL,                            -- v2.1: weighted trust
    weighted_confirms double precision NOT NULL,
    weighted_disconfirms double precision NOT NULL
);

CREATE INDEX trust_scores_score ON trust_scores(score);

CREATE TABLE entry_confidence (
    entry_hash text COLLATE "C" PRIMARY KEY,
    community_confidence double precision NOT NULL,
    confirms bigint NOT NULL,
    disconfirms bigint NOT NULL
);

CREATE TABLE trust_state (
    id bigint PRIMARY KEY CHECK (id = 1),
    computed_seq bigint NOT NULL,
    computed_ms bigint NOT NULL
);

CREATE TABLE auth_challenges (
    nonce text COLLATE "C" PRIMARY KEY,
    agent_id text COLLATE "C" NOT NULL,
    expires_ms bigint NOT NULL
);

CREATE INDEX auth_challenges_agent ON auth_challenges(agent_id, expires_ms);

CREATE INDEX auth_challenges_expiry ON auth_challenges(expires_ms);

CREATE TABLE auth_sessions (
    key_id text COLLATE "C" PRIMARY KEY,
    agent_id text COLLATE "C" NOT NULL,
    secret_sha256 text COLLATE "C" NOT NULL,
    expires_ms bigint NOT NULL,
    signing_key text COLLATE "C"
);

CREATE INDEX auth_sessions_expiry ON auth_sessions(expires_ms);

CREATE INDEX subscriptions_termless ON subscriptions(id) WHERE n_tags + n_types + n_perfs + n_authors = 0;

CREATE TABLE credential_epoch (
    id bigint PRIMARY KEY CHECK (id = 1),
    n bigint NOT NULL
);
INSERT INTO credential_epoch (id, n) VALUES (1, 0);

-- The credential epoch moves whenever a credential is deleted or changed (SQLite: migration 0008's triggers), and
-- when a key event is appended (migration 0025, below records): caches of verified credentials compare it.
CREATE FUNCTION bbs_credential_epoch_bump() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE credential_epoch SET n = n + 1 WHERE id = 1;
    RETURN NULL;
END;
$$;

CREATE TRIGGER credentials_deleted AFTER DELETE ON credentials
    FOR EACH ROW EXECUTE FUNCTION bbs_credential_epoch_bump();

CREATE TRIGGER credentials_updated AFTER UPDATE ON credentials
    FOR EACH ROW EXECUTE FUNCTION bbs_credential_epoch_bump();

CREATE INDEX messages_type ON messages(message_type, created_ms, id);

CREATE INDEX messages_type_arrival ON messages(message_type, id);

CREATE INDEX messages_project_arrival ON messages(project, id);

CREATE INDEX message_agents_arrival ON message_agents(agent_id, message_id);

CREATE INDEX task_events_lease_ref ON task_events(lease_ref) WHERE lease_ref IS NOT NULL;

CREATE TABLE dm_replies (
    agent_id text COLLATE "C" NOT NULL,
    idem_key text COLLATE "C" NOT NULL,
    reply bytea NOT NULL,                            -- the JSON body of the first answer
    PRIMARY KEY (agent_id, idem_key)
);

CREATE TABLE equivocations (
    hash text COLLATE "C" PRIMARY KEY,
    author_id text COLLATE "C" NOT NULL,
    detected_ms bigint NOT NULL
);

CREATE INDEX equivocations_author ON equivocations(author_id);

CREATE TABLE refused_versions (
    version text COLLATE "C" PRIMARY KEY,
    hash text COLLATE "C" NOT NULL,
    refused_ms bigint NOT NULL
);

CREATE INDEX task_events_grants ON task_events(author_id, expires_ms) WHERE event = 'lease';

CREATE TABLE peer_lease_requests (
    request_id text COLLATE "C" PRIMARY KEY,
    peer_id text COLLATE "C" NOT NULL,
    received_ms bigint NOT NULL
);

CREATE INDEX peer_lease_requests_age ON peer_lease_requests(received_ms);

CREATE TABLE push_endpoints (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    agent_id text COLLATE "C" NOT NULL,
    url text COLLATE "C" NOT NULL,
    tiers text COLLATE "C" NOT NULL,
    reasons text COLLATE "C" NOT NULL,
    created_ms bigint NOT NULL,
    UNIQUE (agent_id, url)
);

CREATE TABLE task_home_moves (
    task_key text COLLATE "C" PRIMARY KEY
);

CREATE TABLE waiting (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    version text COLLATE "C" NOT NULL UNIQUE,          -- SHA-256 of the body for an entry, else its address
    hash text COLLATE "C" NOT NULL,                    -- its address
    kind text COLLATE "C" NOT NULL,
    author_id text COLLATE "C" NOT NULL,               -- the claimed author: the per-author cap counts by it
    peer_id text COLLATE "C" NOT NULL,                 -- the peer it came from: the per-peer cap, and its counters on release
    arrived_ms bigint NOT NULL,           -- dropped 24 h after this
    size bigint NOT NULL,                 -- length of body in bytes: the caps count bytes too
    body bytea NOT NULL                     -- canonical JSON, byte for byte as the peer sent it
);

CREATE INDEX waiting_author ON waiting(author_id);

CREATE INDEX waiting_peer ON waiting(peer_id);

CREATE INDEX waiting_arrived ON waiting(arrived_ms);

CREATE TABLE waiting_deps (
    dep text COLLATE "C" NOT NULL,
    waiting_id bigint NOT NULL REFERENCES waiting(id) ON DELETE CASCADE,
    PRIMARY KEY (dep, waiting_id)
);

CREATE INDEX waiting_deps_record ON waiting_deps(waiting_id);

CREATE TABLE void_versions (
    version text COLLATE "C" PRIMARY KEY,
    author_id text COLLATE "C" NOT NULL,
    reason text COLLATE "C" NOT NULL,
    refused_ms bigint NOT NULL
);

CREATE INDEX void_versions_author ON void_versions(author_id);

CREATE TABLE void_records (
    seq bigint PRIMARY KEY,               -- the record's seq in the log
    version text COLLATE "C" NOT NULL UNIQUE,
    hash text COLLATE "C" NOT NULL,                    -- its address
    kind text COLLATE "C" NOT NULL,
    author_id text COLLATE "C" NOT NULL,
    reason text COLLATE "C" NOT NULL,                  -- unvouched, revoked_key, losing_branch
    flagged_ms bigint NOT NULL
);

CREATE INDEX void_records_author ON void_records(author_id);

CREATE INDEX void_records_hash ON void_records(hash);

CREATE TABLE search_redo (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    address text COLLATE "C" NOT NULL
);

CREATE TABLE space_records (
    seq bigint PRIMARY KEY,               -- the record's seq in the log
    space_id text COLLATE "C" NOT NULL,
    kind text COLLATE "C" NOT NULL,
    author_id text COLLATE "C" NOT NULL
);

CREATE INDEX space_records_space ON space_records(space_id, kind, author_id);

CREATE TABLE spaces (
    space_id text COLLATE "C" PRIMARY KEY,             -- the hash of its creation record
    owner text COLLATE "C" NOT NULL,
    name text COLLATE "C" NOT NULL,
    description text COLLATE "C" NOT NULL,
    created_at text COLLATE "C" NOT NULL
);

CREATE TABLE space_roles (
    space_id text COLLATE "C" NOT NULL,
    agent_id text COLLATE "C" NOT NULL,
    role text COLLATE "C" NOT NULL,                    -- owner, admin, writer, reader (an agent with no role has no row)
    PRIMARY KEY (space_id, agent_id)
);

CREATE INDEX space_roles_agent ON space_roles(agent_id);

CREATE TABLE dropped_key_events (
    address text COLLATE "C" PRIMARY KEY,
    author_id text COLLATE "C" NOT NULL,
    key text COLLATE "C",                              -- the key the event installed (NULL: none)
    seq bigint NOT NULL,                  -- the event's seq
    state text COLLATE "C" NOT NULL,                   -- JSON {key, next, recovery, used}: the key state after the event
    dropped_ms bigint NOT NULL
);

CREATE INDEX dropped_key_events_author ON dropped_key_events(author_id);

CREATE TABLE waiting_counts (
    scope text COLLATE "C" NOT NULL,                   -- 'author', 'peer' or 'all'
    key text COLLATE "C" NOT NULL,                     -- the claimed author's or the peer's id; '' for 'all'
    count bigint NOT NULL,
    bytes bigint NOT NULL,
    PRIMARY KEY (scope, key)
);
INSERT INTO waiting_counts (scope, key, count, bytes) VALUES ('all', '', 0, 0);

-- The waiting room's per-author, per-peer and overall counts (SQLite: migration 0028's triggers).
CREATE FUNCTION bbs_waiting_counted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO waiting_counts AS w (scope, key, count, bytes) VALUES ('author', NEW.author_id, 1, NEW.size)
        ON CONFLICT (scope, key) DO UPDATE SET count = w.count + 1, bytes = w.bytes + excluded.bytes;
    INSERT INTO waiting_counts AS w (scope, key, count, bytes) VALUES ('peer', NEW.peer_id, 1, NEW.size)
        ON CONFLICT (scope, key) DO UPDATE SET count = w.count + 1, bytes = w.bytes + excluded.bytes;
    INSERT INTO waiting_counts AS w (scope, key, count, bytes) VALUES ('all', '', 1, NEW.size)
        ON CONFLICT (scope, key) DO UPDATE SET count = w.count + 1, bytes = w.bytes + excluded.bytes;
    RETURN NULL;
END;
$$;

CREATE TRIGGER waiting_counted AFTER INSERT ON waiting FOR EACH ROW EXECUTE FUNCTION bbs_waiting_counted();

CREATE FUNCTION bbs_waiting_uncounted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE waiting_counts SET count = count - 1, bytes = bytes - OLD.size
        WHERE (scope = 'author' AND key = OLD.author_id) OR (scope = 'peer' AND key = OLD.peer_id)
           OR (scope = 'all' AND key = '');
    DELETE FROM waiting_counts
        WHERE count = 0 AND ((scope = 'author' AND key = OLD.author_id) OR (scope = 'peer' AND key = OLD.peer_id));
    RETURN NULL;
END;
$$;

CREATE TRIGGER waiting_uncounted AFTER DELETE ON waiting FOR EACH ROW EXECUTE FUNCTION bbs_waiting_uncounted();

CREATE INDEX entries_space ON entries(space, id) WHERE space IS NOT NULL;

CREATE TABLE entry_spaces (space text COLLATE "C" PRIMARY KEY);

-- The spaces entries were posted in (SQLite: migration 0030's trigger).
CREATE FUNCTION bbs_entry_spaces_listed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO entry_spaces (space) VALUES (NEW.space) ON CONFLICT DO NOTHING;
    RETURN NULL;
END;
$$;

CREATE TRIGGER entry_spaces_listed AFTER INSERT ON entries
    FOR EACH ROW WHEN (NEW.space IS NOT NULL) EXECUTE FUNCTION bbs_entry_spaces_listed();

CREATE TABLE space_hosts (
    space_id text COLLATE "C" NOT NULL,
    node_id text COLLATE "C" NOT NULL,
    PRIMARY KEY (space_id, node_id)
);

CREATE INDEX space_hosts_node ON space_hosts(node_id);

CREATE TABLE redactions (
    hash text COLLATE "C" PRIMARY KEY,                 -- the redaction record's address
    seq bigint NOT NULL,                  -- its seq in the log
    target text COLLATE "C" NOT NULL,                  -- the address it redacts
    author_id text COLLATE "C" NOT NULL,
    created_at text COLLATE "C" NOT NULL,              -- what reads show as redacted_at
    space text COLLATE "C",                            -- the target's space, iff it has one
    reason text COLLATE "C"                            -- NULL when none
);

CREATE INDEX redactions_target ON redactions(target);

CREATE TABLE tombstones (
    hash text COLLATE "C" PRIMARY KEY,                 -- the target's address
    kind text COLLATE "C" NOT NULL,                    -- entry, link or message
    author_id text COLLATE "C" NOT NULL,
    created_at text COLLATE "C" NOT NULL,
    space text COLLATE "C",
    versions text COLLATE "C" NOT NULL,                -- JSON array of the versions dropped, sorted
    redaction text COLLATE "C" NOT NULL,               -- the redaction record's address
    redacted_by text COLLATE "C" NOT NULL,
    redacted_at text COLLATE "C" NOT NULL,
    dropped_ms bigint NOT NULL            -- when this node dropped the body
);

CREATE TABLE redaction_scrubs (
    hash text COLLATE "C" PRIMARY KEY,                 -- the target's address
    dropped_ms bigint NOT NULL,
    done_ms bigint                        -- NULL until the scrub ran
);

CREATE INDEX redaction_scrubs_due ON redaction_scrubs(dropped_ms) WHERE done_ms IS NULL;

CREATE TABLE purges (
    hash text COLLATE "C" PRIMARY KEY,                 -- the purged address
    kind text COLLATE "C" NOT NULL,
    author_id text COLLATE "C" NOT NULL,
    versions text COLLATE "C" NOT NULL,                -- JSON array of the versions dropped, sorted
    reason text COLLATE "C",
    purged_ms bigint NOT NULL
);

CREATE INDEX purges_author ON purges(author_id);

CREATE INDEX idempotency_record ON idempotency(record_hash);

CREATE TABLE retention_policies (
    policy text COLLATE "C" PRIMARY KEY,               -- delivered_notifications | rejected_candidates
    days bigint NOT NULL,                 -- rows older than this many days go; 0: the policy is off
    removed bigint NOT NULL DEFAULT 0,    -- rows removed by it, all runs together
    last_run_ms bigint                    -- when it last ran (NULL: never)
);

CREATE TABLE redacted_bodies (
    version text COLLATE "C" PRIMARY KEY,              -- the dropped version
    hash text COLLATE "C" NOT NULL,                    -- its address (the redaction's target)
    seq bigint NOT NULL,                  -- its seq in the log before the drop (restored versions keep this order)
    kind text COLLATE "C" NOT NULL,
    origin text COLLATE "C" NOT NULL,                  -- the log's `origin`: 'local' or the peer it came from
    scope text COLLATE "C" NOT NULL,                   -- the log's `scope`
    body bytea NOT NULL,                    -- the signed canonical bytes, as the log held them
    released bigint NOT NULL DEFAULT 0    -- 1: the redaction became void; the writer restores it in this transaction
);

CREATE INDEX redacted_bodies_hash ON redacted_bodies(hash);

CREATE INDEX redacted_bodies_released ON redacted_bodies(released) WHERE released = 1;

CREATE TABLE records (
    seq bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    hash text COLLATE "C" NOT NULL,                   -- the address (record_hash for an entry)
    version text COLLATE "C" NOT NULL UNIQUE,         -- SHA-256 of body
    kind text COLLATE "C" NOT NULL,
    author_id text COLLATE "C" NOT NULL,
    created_at text COLLATE "C" NOT NULL,
    created_ms bigint NOT NULL,
    scope text COLLATE "C" NOT NULL DEFAULT 'federation' CHECK (scope IN ('federation', 'local')),
    origin text COLLATE "C" NOT NULL,
    received_ms bigint NOT NULL,
    body bytea NOT NULL,
    space text COLLATE "C"
);

CREATE INDEX records_hash ON records(hash);

CREATE INDEX records_time_version ON records(created_ms, version);

CREATE INDEX records_scope_seq ON records(scope, seq);

CREATE INDEX records_authority ON records(kind) WHERE kind IN ('key_event', 'vouch_page');

CREATE INDEX records_space ON records(space) WHERE space IS NOT NULL;

CREATE TRIGGER key_events_move_credentials AFTER INSERT ON records
    FOR EACH ROW WHEN (NEW.kind = 'key_event') EXECUTE FUNCTION bbs_credential_epoch_bump();

CREATE TABLE notifications (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    agent_id text COLLATE "C" NOT NULL,
    entry_id bigint NOT NULL,
    subscription_id bigint,
    tier bigint NOT NULL CHECK (tier IN (1, 2)),
    reason text COLLATE "C" NOT NULL,
    created_ms bigint NOT NULL,
    status text COLLATE "C" NOT NULL DEFAULT 'pending' CHECK (status IN ('pending','leased','delivered','failed','expired')),
    attempt_count bigint NOT NULL DEFAULT 0,
    next_attempt_ms bigint,
    delivered_ms bigint,
    expires_ms bigint NOT NULL,
    redaction text COLLATE "C",
    UNIQUE (agent_id, entry_id)
);

CREATE INDEX notifications_agent_status ON notifications(agent_id, status, tier, id);

CREATE INDEX notifications_expiry ON notifications(expires_ms) WHERE status IN ('pending', 'leased');

CREATE INDEX notifications_delivered ON notifications(delivered_ms) WHERE status = 'delivered';

CREATE INDEX redactions_space ON redactions(space) WHERE space IS NOT NULL;

CREATE INDEX tombstones_space ON tombstones(space) WHERE space IS NOT NULL;

CREATE INDEX purges_newest ON purges(purged_ms);
