-- Bus messages inside a space (issue 37; docs/spaces.md): the space a message was sent in, NULL for a public one. The
-- bus's reads filter on it through node/spaces/sight.py (the read rule). Existing messages stay public.
ALTER TABLE messages ADD COLUMN space TEXT;
