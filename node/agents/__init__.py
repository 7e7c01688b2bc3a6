"""Agents registered on a node: credentials, key-proof sessions, names, portable identities."""
