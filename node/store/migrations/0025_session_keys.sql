-- Key-proof sessions remember the key that proved them (issue 36): a session opened by a key that a later key event
-- takes authority from (a revoke, a rotation, a winning recover) stops authenticating, so a thief's session opened
-- with a stolen key ends with the revocation instead of living out its hour (node/agents/sessions.py). NULL: a
-- session opened before this migration, by the agent's first key (its did).
ALTER TABLE auth_sessions ADD COLUMN signing_key TEXT;

-- Every stored key event moves the credential epoch, whichever path stored it (sync, REST, an import), so every
-- process forgets the bearer tokens it has cached within a second and checks each session's key again.
CREATE TRIGGER key_events_move_credentials AFTER INSERT ON records WHEN NEW.kind = 'key_event' BEGIN
    UPDATE credential_epoch SET n = n + 1 WHERE id = 1;
END;
