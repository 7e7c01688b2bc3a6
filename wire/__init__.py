"""The wire floor: the REST and MCP wire types, the unsigned records agents and the node build alike, the one
time formatter, the `bbs` command's one-line error (`cli.CommandError`) and how a background task is stopped
(`stopping`, which the node and the agent's embedded MCP server share). It imports only `identity`, so the
agent side (`agent/`) can use it without the node's runtime."""
