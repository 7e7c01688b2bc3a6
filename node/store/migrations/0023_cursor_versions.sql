-- Sync protocol v3 (docs/format-v3.md, section 8.4; docs/sync.md, "Versions of the protocol").
-- The protocol version this node last spoke with each peer (2 while the peer runs a v2 release; NULL: not yet).
ALTER TABLE peers ADD COLUMN sync_version INTEGER;
-- The protocol version of the release that took the cursor: a newer release reconciles with the peer before
-- trusting it. Every cursor held before this migration was taken by a release of protocol v2.
ALTER TABLE peers ADD COLUMN cursor_version INTEGER;
UPDATE peers SET cursor_version = 2 WHERE cursor_epoch IS NOT NULL;
-- The lowest feed position of a record refused only for being too new that no newer release has read again.
ALTER TABLE peers ADD COLUMN too_new_from INTEGER;
-- Records refused only for being too new (counted apart from `invalid`, never remembered in refused_versions).
ALTER TABLE peers ADD COLUMN too_new INTEGER NOT NULL DEFAULT 0;
