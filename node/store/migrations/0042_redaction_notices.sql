-- Agents notified of a redacted entry are told (issue 39; docs/api.md, "Inbox"): when a redaction drops an entry
-- whose notification reached an agent (leased or delivered), that notification is replaced by a notice of reason
-- `redacted`: `redaction` holds the redaction record's address (NULL for every other notification) and `entry_id`
-- keeps the dropped entry's id, so a runtime finds the copies it made by id or by hash. The envelope's other fields
-- come from the tombstone (hash, author, created_at, space); the body's (type, performative, tags) are gone.
ALTER TABLE notifications ADD COLUMN redaction TEXT;
