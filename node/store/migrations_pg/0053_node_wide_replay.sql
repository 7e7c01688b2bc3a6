-- PostgreSQL's twin of node/store/migrations/0053_node_wide_replay.sql (docs/decisions.md record 86): what every
-- process of a node shares so that a peer or an agent may reach any of them.
--
-- UNLOGGED: no WAL, so an accepted peer request or an asked challenge costs no WAL flush. The server empties these
-- tables after a crash, and a replica holds them empty (a failover, a promotion); a backup leaves their rows out.
-- Their loss is all at once and detected: `peer_boot` goes with `peer_nonces`, and the process that finds no row
-- draws a new boot generation, so no signature accepted before the loss is accepted again (node/federation/
-- node_replay.py). Pending challenges lost that way cost an agent one more ask, as a restart did.

CREATE UNLOGGED TABLE peer_boot (
    id bigint PRIMARY KEY CHECK (id = 1),
    boot_id text COLLATE "C" NOT NULL,   -- what GET /v1/node shows and peers sign for (Bbs-Boot)
    since_s bigint NOT NULL              -- a signature without a boot id created at or before it is refused (0: none)
);

-- Logged: how many generations this database has had. None yet (a new database) means no signature was ever
-- accepted on it, so its first generation refuses none by date; any later one (after a loss) refuses every signature
-- dated up to MAX_SKEW_S past its drawing.
CREATE TABLE peer_boot_draws (
    id bigint PRIMARY KEY CHECK (id = 1),
    draws bigint NOT NULL
);

CREATE UNLOGGED TABLE peer_nonces (
    peer text COLLATE "C" NOT NULL,
    nonce text COLLATE "C" NOT NULL,
    expires_s bigint NOT NULL,           -- created + MAX_AGE_S + MAX_SKEW_S: no longer fresh after it
    PRIMARY KEY (peer, nonce)
);
CREATE INDEX peer_nonces_expiry ON peer_nonces (expires_s);

CREATE UNLOGGED TABLE key_challenges (
    slot bigint PRIMARY KEY,             -- seq modulo the overall bound: a new challenge takes the oldest one's slot
    seq bigint NOT NULL,
    nonce text COLLATE "C" NOT NULL UNIQUE,
    agent_id text COLLATE "C" NOT NULL,
    expires_ms bigint NOT NULL
);
CREATE INDEX key_challenges_agent ON key_challenges (agent_id, seq);
CREATE INDEX key_challenges_expiry ON key_challenges (expires_ms);
CREATE SEQUENCE key_challenge_seq OWNED BY key_challenges.seq;  -- dropped with its table (a restore clears tables)
