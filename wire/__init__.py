"""The wire floor: the REST and MCP wire types, the unsigned records agents and the node build alike, the one
time formatter and the `bbs` command's one-line error (`cli.CommandError`). It imports only `identity`, so the
agent side (`agent/`) can use it without the node's runtime."""
