-- Records from a peer that failed in this node's own code (a bug, not a record the projections refuse): counted
-- apart from `invalid`, which is the peer's fault. Each is logged with its traceback when it happens.
ALTER TABLE peers ADD COLUMN internal INTEGER NOT NULL DEFAULT 0;
