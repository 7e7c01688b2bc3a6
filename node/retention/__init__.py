"""Retention of node-local state, opt-in: delivered notifications and rejected default-mode candidates."""
