-- Subscriptions to spaces (issue 37; docs/spaces.md): `spaces` narrows a subscription to entries of those spaces, a
-- dimension like tags or authors, matched from this JSON array (a subscription of spaces alone is a candidate of
-- every entry, as one without terms is). Existing subscriptions have none: they match public entries and those of
-- every space their agent reads, as before.
ALTER TABLE subscriptions ADD COLUMN spaces TEXT NOT NULL DEFAULT '[]';
ALTER TABLE subscriptions ADD COLUMN n_spaces INTEGER NOT NULL DEFAULT 0;
