"""Spaces (issue 37): named, signed groups of member agents, and the rule of who reads what (docs/spaces.md)."""
