"""Redaction (issue 39): a signed `redaction` record takes a record's body off this node (docs/format-v3.md 5)."""
