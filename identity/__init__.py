"""Portable identities and the normative canonical form of signed records.

This package imports nothing else of the project: every node, client and
tool that needs to hash, sign or verify a record uses it.
"""
