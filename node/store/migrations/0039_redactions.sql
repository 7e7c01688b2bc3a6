-- Redaction on one node (issue 39; docs/format-v3.md 5; docs/decisions.md, "Redaction on one node").

-- A projection of `redaction` records (rebuilt by `bbs rebuild`): which address each redaction names. A redaction
-- is stored at once, whether its target is held or not (5.1): a target arriving later is checked against it.
CREATE TABLE redactions (
    hash TEXT PRIMARY KEY,                 -- the redaction record's address
    seq INTEGER NOT NULL,                  -- its seq in the log
    target TEXT NOT NULL,                  -- the address it redacts
    author_id TEXT NOT NULL,
    created_at TEXT NOT NULL,              -- what reads show as redacted_at
    space TEXT,                            -- the target's space, iff it has one
    reason TEXT                            -- NULL when none
) WITHOUT ROWID;
CREATE INDEX redactions_target ON redactions(target);

-- NODE-LOCAL STATE (never synced, not a projection: `bbs rebuild` keeps it). What stays of a redacted target once its
-- body was dropped (5.3): built only after the redaction's authority was checked against the body.
CREATE TABLE tombstones (
    hash TEXT PRIMARY KEY,                 -- the target's address
    kind TEXT NOT NULL,                    -- entry, link or message
    author_id TEXT NOT NULL,
    created_at TEXT NOT NULL,
    space TEXT,
    versions TEXT NOT NULL,                -- JSON array of the versions dropped, sorted
    redaction TEXT NOT NULL,               -- the redaction record's address
    redacted_by TEXT NOT NULL,
    redacted_at TEXT NOT NULL,
    dropped_ms INTEGER NOT NULL            -- when this node dropped the body
) WITHOUT ROWID;

-- NODE-LOCAL: bytes of dropped bodies that may still be on disk (free pages, WAL frames, index segments) until the
-- scrub that runs once the node's grace after `dropped_ms` has passed (`redaction_grace_s`; docs/operations.md).
CREATE TABLE redaction_scrubs (
    hash TEXT PRIMARY KEY,                 -- the target's address
    dropped_ms INTEGER NOT NULL,
    done_ms INTEGER                        -- NULL until the scrub ran
) WITHOUT ROWID;
CREATE INDEX redaction_scrubs_due ON redaction_scrubs(dropped_ms) WHERE done_ms IS NULL;

-- NODE-LOCAL: records the operator purged from this node alone (`bbs purge`, POST /v1/admin/purges): illegal content,
-- abuse. Never federated, no tombstone shown; every version of the address is refused from then on.
CREATE TABLE purges (
    hash TEXT PRIMARY KEY,                 -- the purged address
    kind TEXT NOT NULL,
    author_id TEXT NOT NULL,
    versions TEXT NOT NULL,                -- JSON array of the versions dropped, sorted
    reason TEXT,
    purged_ms INTEGER NOT NULL
) WITHOUT ROWID;
CREATE INDEX purges_author ON purges(author_id);

-- The idempotency keys of a record redacted or purged answer 409 `redacted` from then on (node/store/idempotency.py
-- `forget_record_txn` finds them by the record's hash).
CREATE INDEX idempotency_record ON idempotency(record_hash);
