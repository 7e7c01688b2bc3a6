-- Governed memory: default-mode candidates (node-local) and trust scores (a derived cache).

-- NODE-LOCAL STATE (never synced, not a projection of the log): the default-mode holding area.
-- Nothing here is returned by ordinary read or search; only POST /v1/default-mode/promote/{id}
-- turns a candidate into an entry, and then `promoted_hash` points at it.
CREATE TABLE dm_candidates (
    id INTEGER PRIMARY KEY,
    kind TEXT NOT NULL CHECK (kind IN ('open_question', 'decision', 'open_loop', 'preference', 'risk', 'reflection',
                                       'consolidation', 'simulation', 'stakeholder_simulation', 'incubation')),
    text TEXT NOT NULL,
    salience REAL NOT NULL CHECK (salience >= 0.0 AND salience <= 1.0),
    confidence REAL NOT NULL CHECK (confidence >= 0.0 AND confidence <= 1.0),
    evidence_refs TEXT NOT NULL DEFAULT '[]',       -- JSON list of record hashes
    truth_state TEXT NOT NULL CHECK (truth_state IN ('fact', 'hypothesis', 'simulation')),
    synthetic INTEGER NOT NULL DEFAULT 0 CHECK (synthetic IN (0, 1)),
    status TEXT NOT NULL DEFAULT 'proposed'
        CHECK (status IN ('proposed', 'approved', 'needs_review', 'rejected', 'promoted')),
    critic_decision TEXT,                           -- approved | needs_review | rejected, once the critic has run
    critic_reasons TEXT NOT NULL DEFAULT '[]',      -- JSON list of the rules that fired
    risk_flag INTEGER CHECK (risk_flag IN (0, 1)),
    evidence_flag INTEGER CHECK (evidence_flag IN (0, 1)),
    payload TEXT NOT NULL DEFAULT '{}',             -- structured template output, salience features, ...
    tags TEXT NOT NULL DEFAULT '[]',
    source TEXT NOT NULL,                           -- reflect-session | critic | consolidate | simulate-future | ...
    proposed_by TEXT NOT NULL,                      -- the agent whose call created it
    created_ms INTEGER NOT NULL,
    reviewed_ms INTEGER,
    promoted_hash TEXT,                             -- the entry it became
    promoted_by TEXT,
    promoted_ms INTEGER,
    CHECK ((status = 'promoted') = (promoted_hash IS NOT NULL))
);
CREATE INDEX dm_candidates_status ON dm_candidates(status, id);

-- Trust reads confirmations and disconfirmations by link type.
CREATE INDEX links_type_target ON links(link_type, target_hash);

-- DERIVED CACHE of trust (a pure function of the entries and links; recomputed by node/trust/service.py,
-- never synced, never touching the entries table). Agents and entries without signals are absent
-- and read as the defaults documented in docs/trust.md.
CREATE TABLE trust_scores (
    agent_id TEXT PRIMARY KEY,
    confirms INTEGER NOT NULL,                      -- distinct (endorser, entry) confirmations, self excluded
    disconfirms INTEGER NOT NULL,
    laplace REAL NOT NULL,                          -- v2.0: (confirms + 1) / (confirms + disconfirms + 2)
    score REAL NOT NULL,                            -- v2.1: weighted trust
    weighted_confirms REAL NOT NULL,
    weighted_disconfirms REAL NOT NULL
) WITHOUT ROWID;
CREATE INDEX trust_scores_score ON trust_scores(score);

CREATE TABLE entry_confidence (
    entry_hash TEXT PRIMARY KEY,
    community_confidence REAL NOT NULL,
    confirms INTEGER NOT NULL,
    disconfirms INTEGER NOT NULL
) WITHOUT ROWID;

-- When the cache was last computed, and over which prefix of the log.
CREATE TABLE trust_state (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    computed_seq INTEGER NOT NULL,
    computed_ms INTEGER NOT NULL
);
