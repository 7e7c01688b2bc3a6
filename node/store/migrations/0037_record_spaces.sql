-- The space of each record in the log (issue 38; docs/sync.md, "Spaces"): a space's creation record's own hash, the
-- `space` member of every other record of a space, NULL for a public record. What the changes feed, fetch by hash,
-- reconciliation and the digest filter a peer's answer by: a record of a space goes only to a peer that hosts it.
-- Written by the log's insert (node/store/projections.py); every record of a space stored before this release was
-- stored with scope 'local' (spaces part 1), so only those rows are read to fill it.
ALTER TABLE records ADD COLUMN space TEXT;
UPDATE records SET space = CASE WHEN kind = 'space' THEN hash ELSE json_extract(CAST(body AS TEXT), '$.space') END
WHERE scope = 'local';
CREATE INDEX records_space ON records(space) WHERE space IS NOT NULL;
-- Those records are federated now (their author's own scope: an entry signed `local` stays local), and served only
-- to peers that host their space. A space created before this release is hosted by its creation node alone
-- (migration 0036) until an admin names another, so nothing of it leaves the node until then. A space's task events
-- and the node's own records in it (twin notices) stay local, as they are still stored (docs/decisions.md, 67).
UPDATE records SET scope = 'federation'
WHERE space IS NOT NULL AND scope = 'local' AND kind != 'task_event'
  AND author_id IS NOT (SELECT value FROM node_meta WHERE key = 'node_id')
  AND coalesce(json_extract(CAST(body AS TEXT), '$.scope'), 'federation') = 'federation';
