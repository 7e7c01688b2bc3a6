-- Records stored before they became void (docs/format-v3.md 7.6; docs/decisions.md record 57): a key event or vouch
-- page stored later (a revoke, a winning recover, a rotation that does not vouch for them) made them void. They stay
-- in the log, flagged here: hidden from every read and projection, never served to peers, outside the reconciliation
-- set and the digest. Node-local (never synced, not a projection: `bbs rebuild` keeps it and skips what it flags);
-- a later key event that vouches for a record again removes its row.
CREATE TABLE void_records (
    seq INTEGER PRIMARY KEY,               -- the record's seq in the log
    version TEXT NOT NULL UNIQUE,
    hash TEXT NOT NULL,                    -- its address
    kind TEXT NOT NULL,
    author_id TEXT NOT NULL,
    reason TEXT NOT NULL,                  -- unvouched, revoked_key, losing_branch
    flagged_ms INTEGER NOT NULL
);
CREATE INDEX void_records_author ON void_records(author_id);
CREATE INDEX void_records_hash ON void_records(hash);   -- the versions of one address (an entry's switch)

-- Addresses whose search index document a void switch changed (node/store/void.py): the entry left `entries`, or came
-- back, under an id the tantivy index already covers, so its catch-up by id would not see it. The indexer deletes
-- each address's document and adds the entry again when `entries` holds it, then removes the rows it handled.
CREATE TABLE search_redo (
    id INTEGER PRIMARY KEY,
    address TEXT NOT NULL
);
