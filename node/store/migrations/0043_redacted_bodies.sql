-- A redaction made void by a revocation shows its target again (issue 39, "A thief cannot destroy in one stroke";
-- docs/decisions.md record 69): the bodies a redaction drops are set aside here until the scrub.

-- NODE-LOCAL STATE (never synced, not a projection: `bbs rebuild` keeps it; `bbs backup` empties it in the copy).
-- The versions a redaction deleted from the log, byte for byte, kept only for the node's grace
-- (`redaction_grace_s`): never read by an answer, the search index, sync or the digest. The scrub deletes them (with
-- `secure_delete` on) before it checkpoints the WAL; a later key event that makes the redaction void puts them back
-- into the log through the normal append path, decided again by their key.
CREATE TABLE redacted_bodies (
    version TEXT PRIMARY KEY,              -- the dropped version
    hash TEXT NOT NULL,                    -- its address (the redaction's target)
    seq INTEGER NOT NULL,                  -- its seq in the log before the drop (restored versions keep this order)
    kind TEXT NOT NULL,
    origin TEXT NOT NULL,                  -- the log's `origin`: 'local' or the peer it came from
    scope TEXT NOT NULL,                   -- the log's `scope`
    body BLOB NOT NULL,                    -- the signed canonical bytes, as the log held them
    released INTEGER NOT NULL DEFAULT 0    -- 1: the redaction became void; the writer restores it in this transaction
);
CREATE INDEX redacted_bodies_hash ON redacted_bodies(hash);
CREATE INDEX redacted_bodies_released ON redacted_bodies(released) WHERE released = 1;
