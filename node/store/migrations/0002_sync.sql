-- Federation: configured peers, the cursor into each peer's feed, per-peer outcome counters,
-- and link targets to fetch. All node-local; never synced.

CREATE TABLE peers (
    node_id TEXT PRIMARY KEY,             -- the peer's did:key (its node key signs its sync requests)
    url TEXT NOT NULL,
    added_ms INTEGER NOT NULL,
    cursor_epoch TEXT,                    -- the peer's store epoch the cursor belongs to
    cursor_seq INTEGER NOT NULL DEFAULT 0,-- saved in the same transaction as the records it brought
    remote_epoch TEXT,
    remote_head INTEGER,
    caught_up_ms INTEGER,                 -- last time cursor_seq reached remote_head
    last_ok_ms INTEGER,
    last_error TEXT,
    last_error_ms INTEGER,
    reconciliations INTEGER NOT NULL DEFAULT 0,
    last_reconcile_ms INTEGER,
    saved INTEGER NOT NULL DEFAULT 0,
    duplicate INTEGER NOT NULL DEFAULT 0,
    invalid INTEGER NOT NULL DEFAULT 0,
    pending_link INTEGER NOT NULL DEFAULT 0
);

CREATE TABLE peer_invalid (
    node_id TEXT NOT NULL,
    reason TEXT NOT NULL,
    count INTEGER NOT NULL,
    last_hash TEXT,
    last_detail TEXT,
    PRIMARY KEY (node_id, reason)
) WITHOUT ROWID;

-- Targets of links that arrived before them, fetched by hash from the peer that sent the link.
CREATE TABLE sync_wanted (
    hash TEXT PRIMARY KEY,
    peer_id TEXT NOT NULL,
    attempts INTEGER NOT NULL DEFAULT 0,
    next_ms INTEGER NOT NULL,
    first_ms INTEGER NOT NULL
) WITHOUT ROWID;
CREATE INDEX sync_wanted_due ON sync_wanted(peer_id, next_ms);
