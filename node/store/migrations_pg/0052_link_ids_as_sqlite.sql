-- PostgreSQL's twin of node/store/migrations/0052_link_ids_as_sqlite.sql (docs/decisions.md record 81): a link's id
-- is max(id) + 1 at its insert, as SQLite's rowid gives it, rather than an identity's next value. A sequence is not
-- transactional: a rolled-back write (a kill, a failing post of a merged group) spent identity values, so live link
-- ids had gaps that `bbs rebuild` (which numbers from 1 again) closed: ids clients see changed, and differed from a
-- SQLite node's for the same log. The node inserts links only under the writer's advisory lock (record 80), one
-- writer at a time, as on SQLite. An insert that gives an id keeps it (the copy from SQLite, record 79).

ALTER TABLE links ALTER COLUMN id DROP IDENTITY;

CREATE FUNCTION bbs_links_numbered() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.id IS NULL THEN
        NEW.id := coalesce((SELECT max(id) FROM links), 0) + 1;
    END IF;
    RETURN NEW;
END
$$;

CREATE TRIGGER links_numbered BEFORE INSERT ON links FOR EACH ROW EXECUTE FUNCTION bbs_links_numbered();
