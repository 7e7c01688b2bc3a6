"""The node's side of federation: its sync store, peer routes, peer auth and the peer CLI."""
