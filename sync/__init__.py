"""Federation between peer nodes: wire messages, peer authentication, the puller and reconciliation.

This package needs only `identity`; it reaches storage through the `SyncStore` protocol in
`sync.store`, which the node implements over its database and `sync.memory` implements in memory.
"""
