-- Human review of default-mode candidates (node-local, like dm_candidates itself).
-- A decision moves `status` (approve: proposed/needs_review -> approved; reject: -> rejected) and never
-- touches truth_state. The critic leaves a candidate with a human decision unchanged.
ALTER TABLE dm_candidates ADD COLUMN decision TEXT CHECK (decision IN ('approve', 'reject'));
ALTER TABLE dm_candidates ADD COLUMN decided_by TEXT;        -- 'admin' or the deciding agent's did
ALTER TABLE dm_candidates ADD COLUMN decided_ms INTEGER;
ALTER TABLE dm_candidates ADD COLUMN decision_note TEXT;
-- Who asked for the promotion when it was not the author (the admin naming an agent to sign).
ALTER TABLE dm_candidates ADD COLUMN promote_requested_by TEXT;
