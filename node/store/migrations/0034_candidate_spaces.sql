-- Default-mode candidates inside a space (issue 37; docs/spaces.md, docs/default-mode.md): a reflection or a
-- consolidation asked in a space reads it (and the public federation) and its candidates carry the space; only the
-- space's readers see them, and a promotion posts the entry into it. NULL: a public candidate, as before.
ALTER TABLE dm_candidates ADD COLUMN space TEXT;
