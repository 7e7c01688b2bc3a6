-- An agent's kind, from the optional `agent_type` of its newest identity document (seed 000's agents.agent_type).
-- NULL for documents without one (every document written before this release).
ALTER TABLE agents ADD COLUMN agent_type TEXT;
