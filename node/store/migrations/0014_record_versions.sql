-- One body per address (docs/sync.md, "Versions"). An entry's address (`hash`, its record_hash) covers only
-- author, created_at, type, performative and content, so one author can sign two bodies under one address. The
-- log now holds *versions*: `version` is the SHA-256 of the signed canonical bytes (for every other kind it
-- equals `hash`) and is unique; an address holds at most two versions (node/store/equivocation.py decides which).
-- `seq` is kept: it stays the arrival order. bbs_sha256_hex is registered by node.store.db.migrate.
CREATE TABLE records_v2 (
    seq INTEGER PRIMARY KEY,
    hash TEXT NOT NULL,                   -- the address (record_hash for an entry)
    version TEXT NOT NULL UNIQUE,         -- SHA-256 of body
    kind TEXT NOT NULL,
    author_id TEXT NOT NULL,
    created_at TEXT NOT NULL,
    created_ms INTEGER NOT NULL,
    scope TEXT NOT NULL DEFAULT 'federation' CHECK (scope IN ('federation', 'local')),
    origin TEXT NOT NULL,
    received_ms INTEGER NOT NULL,
    body BLOB NOT NULL
);
INSERT INTO records_v2 (seq, hash, version, kind, author_id, created_at, created_ms, scope, origin, received_ms, body)
    SELECT seq, hash, CASE WHEN kind = 'entry' THEN bbs_sha256_hex(body) ELSE hash END,
           kind, author_id, created_at, created_ms, scope, origin, received_ms, body
    FROM records ORDER BY seq;
DROP TABLE records;
ALTER TABLE records_v2 RENAME TO records;
CREATE INDEX records_hash ON records(hash);
CREATE INDEX records_time_version ON records(created_ms, version);
CREATE INDEX records_scope_seq ON records(scope, seq);

-- Addresses holding two versions, kept with the log (same transaction as the second version). Derived from
-- `records` (an address with two rows), so `bbs rebuild` leaves it alone.
CREATE TABLE equivocations (
    hash TEXT PRIMARY KEY,
    author_id TEXT NOT NULL,
    detected_ms INTEGER NOT NULL
) WITHOUT ROWID;
CREATE INDEX equivocations_author ON equivocations(author_id);

-- Versions this node refused (two better ones are held) or evicted: never fetched again (reconciliation of a peer
-- that still holds one terminates). Node-local, never synced.
CREATE TABLE refused_versions (
    version TEXT PRIMARY KEY,
    hash TEXT NOT NULL,
    refused_ms INTEGER NOT NULL
) WITHOUT ROWID;

-- Counted in the peers table like the other outcomes: versions a peer sent that this node refused.
ALTER TABLE peers ADD COLUMN overflow INTEGER NOT NULL DEFAULT 0;
