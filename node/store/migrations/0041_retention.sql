-- Retention of node-local state, opt-in (issue 39; docs/operations.md, "Retention").

-- NODE-LOCAL STATE (never synced, not a projection). Each retention policy as the running node last applied it
-- (`days` 0: off, nothing removed), and what it removed, so `bbs doctor` and /metrics show it.
CREATE TABLE retention_policies (
    policy TEXT PRIMARY KEY,               -- delivered_notifications | rejected_candidates
    days INTEGER NOT NULL,                 -- rows older than this many days go; 0: the policy is off
    removed INTEGER NOT NULL DEFAULT 0,    -- rows removed by it, all runs together
    last_run_ms INTEGER                    -- when it last ran (NULL: never)
) WITHOUT ROWID;

-- The delivered notifications by delivery time: the retention job finds the oldest without a scan.
CREATE INDEX notifications_delivered ON notifications(delivered_ms) WHERE status = 'delivered';
