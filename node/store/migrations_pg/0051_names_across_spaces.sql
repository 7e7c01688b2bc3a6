-- PostgreSQL's twin of node/store/migrations/0051_names_across_spaces.sql (docs/decisions.md record 75): the space of
-- each record of a space refused as void, and the messages found by the addresses they depend on.

CREATE TABLE refused_space_records (
    hash text COLLATE "C" PRIMARY KEY,
    space text COLLATE "C" NOT NULL,
    reason text COLLATE "C" NOT NULL,
    refused_ms bigint NOT NULL
);

CREATE TABLE message_dependencies (
    address text COLLATE "C" NOT NULL,
    message_id bigint NOT NULL,           -- the message's seq (`messages.id`)
    PRIMARY KEY (address, message_id)
);
INSERT INTO message_dependencies (address, message_id)
    SELECT d.value, m.id FROM messages m, jsonb_array_elements_text(CAST(m.dependency_ids AS jsonb)) AS d(value)
    WHERE length(d.value) = 64 AND d.value !~ '[^0-9a-f]'
    ON CONFLICT DO NOTHING;
