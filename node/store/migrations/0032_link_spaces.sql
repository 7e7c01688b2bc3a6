-- Links inside a space (issue 37; docs/spaces.md): the space of the record that asserts the link (an entry's own
-- links: the entry's; a link record: its own), NULL when public. `hops` walks and entry states count only links a
-- reader may see (node/spaces/sight.py). Existing links stay public; a retraction's derived link takes its space.
ALTER TABLE links ADD COLUMN space TEXT;
