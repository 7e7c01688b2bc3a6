-- Running counts and bytes of the waiting area per claimed author, per peer and in all, kept by triggers on
-- `waiting`, so that offering a record reads three rows instead of counting the area three times (offering n records
-- cost n^2 rows read: docs/performance.md, "Key histories"). Node-local like the waiting area itself.
CREATE TABLE waiting_counts (
    scope TEXT NOT NULL,                   -- 'author', 'peer' or 'all'
    key TEXT NOT NULL,                     -- the claimed author's or the peer's id; '' for 'all'
    count INTEGER NOT NULL,
    bytes INTEGER NOT NULL,
    PRIMARY KEY (scope, key)
) WITHOUT ROWID;

INSERT INTO waiting_counts (scope, key, count, bytes)
    SELECT 'author', author_id, count(*), sum(size) FROM waiting GROUP BY author_id;
INSERT INTO waiting_counts (scope, key, count, bytes)
    SELECT 'peer', peer_id, count(*), sum(size) FROM waiting GROUP BY peer_id;
INSERT INTO waiting_counts (scope, key, count, bytes) SELECT 'all', '', count(*), coalesce(sum(size), 0) FROM waiting;

CREATE TRIGGER waiting_counted AFTER INSERT ON waiting BEGIN
    INSERT INTO waiting_counts (scope, key, count, bytes) VALUES ('author', NEW.author_id, 1, NEW.size)
        ON CONFLICT (scope, key) DO UPDATE SET count = count + 1, bytes = bytes + excluded.bytes;
    INSERT INTO waiting_counts (scope, key, count, bytes) VALUES ('peer', NEW.peer_id, 1, NEW.size)
        ON CONFLICT (scope, key) DO UPDATE SET count = count + 1, bytes = bytes + excluded.bytes;
    INSERT INTO waiting_counts (scope, key, count, bytes) VALUES ('all', '', 1, NEW.size)
        ON CONFLICT (scope, key) DO UPDATE SET count = count + 1, bytes = bytes + excluded.bytes;
END;

CREATE TRIGGER waiting_uncounted AFTER DELETE ON waiting BEGIN
    UPDATE waiting_counts SET count = count - 1, bytes = bytes - OLD.size
        WHERE (scope = 'author' AND key = OLD.author_id) OR (scope = 'peer' AND key = OLD.peer_id)
           OR (scope = 'all' AND key = '');
    DELETE FROM waiting_counts
        WHERE count = 0 AND ((scope = 'author' AND key = OLD.author_id) OR (scope = 'peer' AND key = OLD.peer_id));
END;
