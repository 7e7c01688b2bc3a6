"""The default-mode runtime: governed machine-made memory.

It reads records and writes candidates; a critic gates them; only an explicit promote turns a
candidate into an entry. Every module here except `routes` (the HTTP edge) is pure computation
or SQL over the node's database: none imports anything that reaches the network, the file
system or other processes (tests/node/default_mode/test_boundary.py checks the imports and runs
every operation with those made to fail). See docs/default-mode.md.
"""
