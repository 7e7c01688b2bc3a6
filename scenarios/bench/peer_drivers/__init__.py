"""Scripts run by a peer system's own virtualenv (they import that peer's packages, never ours)."""
