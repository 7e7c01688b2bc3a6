-- The waiting area (docs/format-v3.md, section 7): records from peers whose verdict is undecided because a record
-- they depend on (a key event installing their signing key, the prior of a key event) is not held yet. Node-local,
-- never synced: not in the log, not projected, not in the changes feed, fetch, reconciliation or the digest, and not
-- remembered in refused_versions. Bounded per author, per peer and in all (node/store/waiting.py's caps).
CREATE TABLE waiting (
    id INTEGER PRIMARY KEY,
    version TEXT NOT NULL UNIQUE,          -- SHA-256 of the body for an entry, else its address
    hash TEXT NOT NULL,                    -- its address
    kind TEXT NOT NULL,
    author_id TEXT NOT NULL,               -- the claimed author: the per-author cap counts by it
    peer_id TEXT NOT NULL,                 -- the peer it came from: the per-peer cap, and its counters on release
    arrived_ms INTEGER NOT NULL,           -- dropped 24 h after this
    size INTEGER NOT NULL,                 -- length of body in bytes: the caps count bytes too
    body BLOB NOT NULL                     -- canonical JSON, byte for byte as the peer sent it
);
CREATE INDEX waiting_author ON waiting(author_id);
CREATE INDEX waiting_peer ON waiting(peer_id);
CREATE INDEX waiting_arrived ON waiting(arrived_ms);

-- What each waiting record waits for: dependency keys (`key:<author>:<signing key>`, `event:<address>`), indexed so
-- that the transaction storing a resolving record finds the records it may decide.
CREATE TABLE waiting_deps (
    dep TEXT NOT NULL,
    waiting_id INTEGER NOT NULL REFERENCES waiting(id) ON DELETE CASCADE,
    PRIMARY KEY (dep, waiting_id)
) WITHOUT ROWID;
CREATE INDEX waiting_deps_record ON waiting_deps(waiting_id);

-- Versions refused as void (docs/format-v3.md, 7.6): reconciliation does not fetch them again. Kept apart from
-- refused_versions because they are forgotten when their author's key chain changes (a later event, a recovery
-- that vouches for them, may make them valid): then reconciliation brings them again and they are decided anew.
CREATE TABLE void_versions (
    version TEXT PRIMARY KEY,
    author_id TEXT NOT NULL,
    reason TEXT NOT NULL,
    refused_ms INTEGER NOT NULL
) WITHOUT ROWID;
CREATE INDEX void_versions_author ON void_versions(author_id);

-- The writer's authority cache is rebuilt from the log's key events and vouch pages at start: this partial index
-- finds them (and counts them, to notice a rolled-back transaction) without reading the whole log.
CREATE INDEX records_authority ON records(kind) WHERE kind IN ('key_event', 'vouch_page');

-- Per-peer counters of the outcomes of format v3 (docs/sync.md): records that went to the waiting area, records
-- dropped because a waiting cap was full (or that waited 24 h), and records refused as void.
ALTER TABLE peers ADD COLUMN waiting INTEGER NOT NULL DEFAULT 0;
ALTER TABLE peers ADD COLUMN dropped_waiting INTEGER NOT NULL DEFAULT 0;
ALTER TABLE peers ADD COLUMN void INTEGER NOT NULL DEFAULT 0;
