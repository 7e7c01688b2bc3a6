"""The wire floor: the REST and MCP wire types, the unsigned records agents and the node build alike, and the one
time formatter. It imports only `identity`, so the agent side (`agent/`) can use it without the node's runtime."""
