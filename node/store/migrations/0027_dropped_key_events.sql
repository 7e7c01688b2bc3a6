-- Key events a node does not keep (docs/format-v3.md 3.4 "What a node keeps"; docs/decisions.md record 64): of the
-- allowed key events of an identity a node stores only the winning chain and, at each of its places, the runner-up.
-- Any other allowed event is refused on arrival, or deleted from the log (with its vouch pages) when a better one
-- displaces it, like an evicted version: its address goes into refused_versions and the key it installed is kept
-- here, so records signed by that key stay void (a losing branch's key: 3.5, rule 4) whatever the arrival order, with
-- the state it led to, so an event building on it that arrives later is judged in that state (allowed: dropped too).
-- Node-local, never synced, not a projection (`bbs rebuild` keeps it). One row per dropped event: a thief forking at
-- will costs a node this row and a refused_versions row per event, never the event's body.
CREATE TABLE dropped_key_events (
    address TEXT PRIMARY KEY,
    author_id TEXT NOT NULL,
    key TEXT,                              -- the key the event installed (NULL: none)
    seq INTEGER NOT NULL,                  -- the event's seq
    state TEXT NOT NULL,                   -- JSON {key, next, recovery, used}: the key state after the event
    dropped_ms INTEGER NOT NULL
) WITHOUT ROWID;
CREATE INDEX dropped_key_events_author ON dropped_key_events(author_id);
