-- An inbox poll marks notifications past their expiry as expired. Through this partial index it visits only
-- those (usually none): through notifications_agent_status it visited every pending notification of the
-- polling agent, on every poll, a cost that grew with the agent's backlog. Keyed by expiry alone, new rows
-- land at the index's end (expiry follows arrival), so keeping it costs a notification little.
CREATE INDEX notifications_expiry ON notifications(expires_ms) WHERE status IN ('pending', 'leased');
