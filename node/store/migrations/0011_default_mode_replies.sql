-- Idempotency of the default-mode calls that create candidates (reflect-session, critic, consolidate and the
-- three templates). They produce node-local candidates, not records, so the `idempotency` row of such a
-- call has record_hash '' and the reply it gave is kept here: a retry with the same key gets that reply
-- back (200) and stores nothing.
CREATE TABLE dm_replies (
    agent_id TEXT NOT NULL,
    idem_key TEXT NOT NULL,
    reply BLOB NOT NULL,                            -- the JSON body of the first answer
    PRIMARY KEY (agent_id, idem_key)
) WITHOUT ROWID;
