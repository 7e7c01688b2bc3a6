-- A space's redactions are decided again when who moderates it changes (node/redaction/effects.py `redecide_txn`,
-- on every batch holding a promotion, a demotion or a removal's pages): found by space, not by a scan of every
-- redaction and tombstone the node holds.
CREATE INDEX redactions_space ON redactions(space) WHERE space IS NOT NULL;
CREATE INDEX tombstones_space ON tombstones(space) WHERE space IS NOT NULL;
-- The operator's list of purges, newest first (GET /v1/admin/purges, the dashboard's Purges view).
CREATE INDEX purges_newest ON purges(purged_ms);
