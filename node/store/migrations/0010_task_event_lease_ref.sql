-- Whether a stored release or complete already ends a lease grant (node/workflows/records.py advance): one
-- index look-up instead of a walk over the task's events.
CREATE INDEX task_events_lease_ref ON task_events(lease_ref) WHERE lease_ref IS NOT NULL;
