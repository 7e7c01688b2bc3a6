-- Push endpoints (issue 26): where an agent of this node wants its notifications pushed as NLIP messages, and
-- which (tiers, reasons; an empty reasons list means every reason). Node-local state, never synced. What was
-- sent and what failed lives in the dispatcher's memory (/metrics, the dashboard, GET /v1/push/status): a push
-- is a hint, the inbox stays the record of delivery.
CREATE TABLE push_endpoints (
    id INTEGER PRIMARY KEY,
    agent_id TEXT NOT NULL,
    url TEXT NOT NULL,
    tiers TEXT NOT NULL,
    reasons TEXT NOT NULL,
    created_ms INTEGER NOT NULL,
    UNIQUE (agent_id, url)
);
