-- The spaces that hold entries on this node (issue 37): a search by a reader who may not see some of them excludes
-- them in the index (node/search_index/indexer.py `space_filter`), so it must know every one. Kept by a trigger, never
-- shrunk: a superset is safe (excluding a space without entries excludes nothing).
CREATE TABLE entry_spaces (space TEXT PRIMARY KEY) WITHOUT ROWID;
INSERT OR IGNORE INTO entry_spaces (space) SELECT DISTINCT space FROM entries WHERE space IS NOT NULL;
CREATE TRIGGER entry_spaces_listed AFTER INSERT ON entries WHEN NEW.space IS NOT NULL BEGIN
    INSERT OR IGNORE INTO entry_spaces (space) VALUES (NEW.space);
END;
