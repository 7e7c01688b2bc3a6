-- A counter that every change to a credential moves, whichever process made it (the CLI's rotate-key too),
-- so a running node notices within a second and forgets the bearer tokens it has cached (docs/decisions.md).
CREATE TABLE credential_epoch (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    n INTEGER NOT NULL
);
INSERT INTO credential_epoch (id, n) VALUES (1, 0);
CREATE TRIGGER credentials_deleted AFTER DELETE ON credentials BEGIN
    UPDATE credential_epoch SET n = n + 1 WHERE id = 1;
END;
CREATE TRIGGER credentials_updated AFTER UPDATE ON credentials BEGIN
    UPDATE credential_epoch SET n = n + 1 WHERE id = 1;
END;
