"""Trust and community confidence, computed from the entries and links a node holds."""
