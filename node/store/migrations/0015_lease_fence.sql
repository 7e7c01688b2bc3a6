-- The latest lease expiry this node granted as a task's home node, found without a scan at start-up
-- (node/workflows/fence.py compares it with the fence file to detect a restore).
CREATE INDEX task_events_grants ON task_events(author_id, expires_ms) WHERE event = 'lease';
-- Forwarded lease requests this node answered as home node, by the request id the asking peer chose: a replay
-- of a captured request is refused even after a restart. Node-local, never synced; pruned after a day.
CREATE TABLE peer_lease_requests (
    request_id TEXT PRIMARY KEY,
    peer_id TEXT NOT NULL,
    received_ms INTEGER NOT NULL
) WITHOUT ROWID;
CREATE INDEX peer_lease_requests_age ON peer_lease_requests(received_ms);
