-- The bus: a message_type filter is an index range (it scanned every message), and order=arrival
-- (the order this node stored messages, by local id) is one for each filter too.
CREATE INDEX messages_type ON messages(message_type, created_ms, id);
CREATE INDEX messages_type_arrival ON messages(message_type, id);
CREATE INDEX messages_project_arrival ON messages(project, id);
CREATE INDEX message_agents_arrival ON message_agents(agent_id, message_id);
