-- The operator's filter of a peer (issue 38; docs/sync.md, "Spaces"): `bbs peer add ... --spaces S1,S2` limits the
-- spaces this node serves the peer and takes from it to those listed (a JSON array of space ids), on top of the
-- hosting rule. NULL: every space both nodes host. Node-local configuration, never synced.
ALTER TABLE peers ADD COLUMN spaces TEXT;
