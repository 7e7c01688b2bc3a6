-- Entries inside a space (issue 37; docs/spaces.md): the space an entry was posted into, NULL for a public entry.
-- Every read path filters on it through node/spaces/sight.py (the read rule). Existing entries stay public.
ALTER TABLE entries ADD COLUMN space TEXT;
CREATE INDEX entries_space ON entries(space, id) WHERE space IS NOT NULL;
