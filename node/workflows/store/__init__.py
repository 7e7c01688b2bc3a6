"""The SQL of the workflow feature, one module per topic (docs/architecture.md, "Where SQL lives").

`bus` holds the message tables, `events` the task events (and whether a record is stored), `tasks` the tasks and
their dependencies (the ready set, the graph, the fold's writes), `twins` the twin look-ups and the home-move
queue, `leases` what a peer's lease request needs, `fence` what the lease fence compares with. Functions that
write end in `_txn` and run on the writer thread; the others only read.
"""
