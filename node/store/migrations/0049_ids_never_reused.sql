-- Seqs and notification ids are never reused (AUTOINCREMENT). `INTEGER PRIMARY KEY` alone takes max + 1, so when
-- the newest rows were deleted the next row took a number already handed out:
-- - `records.seq`: an operator's purge of the newest record (it appends nothing after the delete) let the next
--   record take its seq; a peer whose changes-feed cursor had passed that seq never got the new record from the
--   feed (only reconciliation would bring it), and an entry id a client held named another entry.
-- - `notifications.id`: a redaction (or a purge, or retention) deleting the newest notifications let the next one
--   take an id already handed out: the push dispatcher's cursor had passed it (no push), and a runtime that keeps
--   the ids it saw (docs/runtime.md) would drop it as seen.
-- SQLite cannot add AUTOINCREMENT to a table, so both are rebuilt with the same rows, indexes and trigger; each
-- sequence starts at the highest number held (numbers deleted before this migration cannot be known). Appends keep
-- taking consecutive seqs (sequence + 1), so `db.insert_rows`'s reading of last_insert_rowid() is unchanged.
CREATE TABLE records_new (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    hash TEXT NOT NULL,                   -- the address (record_hash for an entry)
    version TEXT NOT NULL UNIQUE,         -- SHA-256 of body
    kind TEXT NOT NULL,
    author_id TEXT NOT NULL,
    created_at TEXT NOT NULL,
    created_ms INTEGER NOT NULL,
    scope TEXT NOT NULL DEFAULT 'federation' CHECK (scope IN ('federation', 'local')),
    origin TEXT NOT NULL,
    received_ms INTEGER NOT NULL,
    body BLOB NOT NULL,
    space TEXT
);
INSERT INTO records_new (seq, hash, version, kind, author_id, created_at, created_ms, scope, origin, received_ms, body,
                         space)
SELECT seq, hash, version, kind, author_id, created_at, created_ms, scope, origin, received_ms, body, space
FROM records ORDER BY seq;
DROP TABLE records;
ALTER TABLE records_new RENAME TO records;
CREATE INDEX records_hash ON records(hash);
CREATE INDEX records_time_version ON records(created_ms, version);
CREATE INDEX records_scope_seq ON records(scope, seq);
CREATE INDEX records_authority ON records(kind) WHERE kind IN ('key_event', 'vouch_page');
CREATE INDEX records_space ON records(space) WHERE space IS NOT NULL;
CREATE TRIGGER key_events_move_credentials AFTER INSERT ON records WHEN NEW.kind = 'key_event' BEGIN
    UPDATE credential_epoch SET n = n + 1 WHERE id = 1;
END;

CREATE TABLE notifications_new (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
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
    redaction TEXT,
    UNIQUE (agent_id, entry_id)
);
INSERT INTO notifications_new (id, agent_id, entry_id, subscription_id, tier, reason, created_ms, status,
                               attempt_count, next_attempt_ms, delivered_ms, expires_ms, redaction)
SELECT id, agent_id, entry_id, subscription_id, tier, reason, created_ms, status, attempt_count, next_attempt_ms,
       delivered_ms, expires_ms, redaction
FROM notifications ORDER BY id;
DROP TABLE notifications;
ALTER TABLE notifications_new RENAME TO notifications;
CREATE INDEX notifications_agent_status ON notifications(agent_id, status, tier, id);
CREATE INDEX notifications_expiry ON notifications(expires_ms) WHERE status IN ('pending', 'leased');
CREATE INDEX notifications_delivered ON notifications(delivered_ms) WHERE status = 'delivered';
