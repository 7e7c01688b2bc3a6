-- The space of each record of a hosted space that the space gate refused as void (node/federation/space_gate.py):
-- node-local, never synced, not a projection (it survives `bbs rebuild`). A record's space is a function of the
-- record, so a link of the space naming one is decided by it instead of waiting for a target this node will never
-- take (docs/decisions.md record 75). At most `MAX_REFUSED_REMEMBERED` rows (node/spaces/store.py).
CREATE TABLE refused_space_records (
    hash TEXT PRIMARY KEY,
    space TEXT NOT NULL,
    reason TEXT NOT NULL,
    refused_ms INTEGER NOT NULL
) WITHOUT ROWID;
