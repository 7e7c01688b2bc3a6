-- What records name across spaces (docs/decisions.md record 75): the refusals a link may be decided by, and the
-- messages found by the addresses they depend on.

-- The space of each record of a space refused as void, by the space gate or by its key (node/federation/space_gate.py):
-- node-local, never synced, not a projection (it survives `bbs rebuild`). A record's space is a function of the
-- record, so a link of the space naming one is decided by it instead of waiting for a target this node will never
-- take (docs/decisions.md record 75). At most `MAX_REFUSED_REMEMBERED` rows (node/spaces/store.py).
CREATE TABLE refused_space_records (
    hash TEXT PRIMARY KEY,
    space TEXT NOT NULL,
    reason TEXT NOT NULL,
    refused_ms INTEGER NOT NULL
) WITHOUT ROWID;

-- A projection of message records: each dependency id that may be a record's address (64 lowercase hex), so the
-- messages naming an address are found by index when a record of a space arrives (a public one naming it is
-- flagged void: docs/decisions.md record 75). Filled by `project_message`, rebuilt by `bbs rebuild`.
CREATE TABLE message_dependencies (
    address TEXT NOT NULL,
    message_id INTEGER NOT NULL,           -- the message's seq (`messages.id`)
    PRIMARY KEY (address, message_id)
) WITHOUT ROWID;
INSERT OR IGNORE INTO message_dependencies (address, message_id)
    SELECT d.value, m.id FROM messages m, json_each(m.dependency_ids) d
    WHERE length(d.value) = 64 AND d.value NOT GLOB '*[^0-9a-f]*';
