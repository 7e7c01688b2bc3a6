-- How the puller is faring with a peer (sync/messages.py PeerHealth as JSON: consecutive and total failures,
-- failed fetches, throttled polls, reconciliations on reconnect), written with each pull's peer note so that
-- `bbs peers` shows it from the database. NULL until the puller has noted the peer once.
ALTER TABLE peers ADD COLUMN health TEXT;
