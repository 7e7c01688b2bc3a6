-- Key-proof authentication (node/agents/sessions.py): one-time challenges and the session tokens they buy.
-- Node-local state, never synced.

CREATE TABLE auth_challenges (
    nonce TEXT PRIMARY KEY,
    agent_id TEXT NOT NULL,
    expires_ms INTEGER NOT NULL
) WITHOUT ROWID;
CREATE INDEX auth_challenges_agent ON auth_challenges(agent_id, expires_ms);
CREATE INDEX auth_challenges_expiry ON auth_challenges(expires_ms);

CREATE TABLE auth_sessions (
    key_id TEXT PRIMARY KEY,
    agent_id TEXT NOT NULL,
    secret_sha256 TEXT NOT NULL,
    expires_ms INTEGER NOT NULL
) WITHOUT ROWID;
CREATE INDEX auth_sessions_expiry ON auth_sessions(expires_ms);
