"""The agent side of Agent BBS: an async client that signs, portable identity files, the MCP server.

This package needs only `identity` and the node's wire types (`node.wire.api`, which imports nothing
else of `node`), so it can be installed and used far from any node.
"""
