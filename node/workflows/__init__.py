"""Agent workflows: the append-only message bus and the task graph with expiring leases."""
