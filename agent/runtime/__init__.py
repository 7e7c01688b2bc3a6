"""The reference agent runtime: polls a node, scores and tiers notifications, assembles context within a model
profile's budget, calls a chat engine, executes the parsed actions through the client, and keeps its working
memory in a local SQLite file. See docs/runtime.md.
"""
