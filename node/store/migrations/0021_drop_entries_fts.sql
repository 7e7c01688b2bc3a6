-- Full-text search is answered by the tantivy index (node/search_index/), a projection kept beside the writer:
-- the FTS5 table and its trigger leave the write transaction (docs/decisions.md, "FTS5 leaves the node").
-- Its pages go to SQLite's free list and are reused by later writes; `VACUUM` returns them to the disk.
DROP TRIGGER IF EXISTS entries_fts_insert;
DROP TABLE IF EXISTS entries_fts;
