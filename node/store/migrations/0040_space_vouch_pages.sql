-- The vouch pages of a space's removals are records of that space (issue 37; docs/spaces.md, "Removal with posts"):
-- `space_records` lists them (kind `vouch_page`), so `identity.spaces.resolve` over a space's records held counts
-- them and decides which of a removed member's posts still count (node/spaces/store.py, `rejudge_posts_txn`).
-- Derived data: `bbs rebuild` lists them too. Listing changes no role; the posts they decide are judged again at
-- the space's next membership record or page (or by `bbs rebuild`).
INSERT OR IGNORE INTO space_records (seq, space_id, kind, author_id)
SELECT seq, space, kind, author_id FROM records
WHERE kind = 'vouch_page' AND space IS NOT NULL AND seq NOT IN (SELECT seq FROM void_records);
