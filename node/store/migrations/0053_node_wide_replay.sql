-- Replay protection and pending key-proof challenges of one node served by several processes (docs/decisions.md
-- record 86). On PostgreSQL (the twin, node/store/migrations_pg/0053_node_wide_replay.sql) they are node-wide: the
-- boot generation every process serves, the nonces of accepted peer signatures, the pending challenges. SQLite's
-- one process keeps all three in its memory as before (sync/auth.py, node/agents/challenges.py) and never writes
-- these tables: they are here so that both engines hold one schema.

CREATE TABLE peer_boot (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    boot_id TEXT NOT NULL,               -- what GET /v1/node shows and peers sign for (Bbs-Boot)
    since_s INTEGER NOT NULL             -- a signature without a boot id created at or before it is refused (0: none)
);

-- Logged: how many generations this database has had. None yet (a new database) means no signature was ever
-- accepted on it, so its first generation refuses none by date; any later one (after a loss) refuses every signature
-- dated up to MAX_SKEW_S past its drawing.
CREATE TABLE peer_boot_draws (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    draws INTEGER NOT NULL
);

CREATE TABLE peer_nonces (
    peer TEXT NOT NULL,
    nonce TEXT NOT NULL,
    expires_s INTEGER NOT NULL,          -- created + MAX_AGE_S + MAX_SKEW_S: no longer fresh after it
    PRIMARY KEY (peer, nonce)
);
CREATE INDEX peer_nonces_expiry ON peer_nonces (expires_s);

CREATE TABLE key_challenges (
    slot INTEGER PRIMARY KEY,            -- seq modulo the overall bound: a new challenge takes the oldest one's slot
    seq INTEGER NOT NULL,
    nonce TEXT NOT NULL UNIQUE,
    agent_id TEXT NOT NULL,
    expires_ms INTEGER NOT NULL
);
CREATE INDEX key_challenges_agent ON key_challenges (agent_id, seq);
CREATE INDEX key_challenges_expiry ON key_challenges (expires_ms);
