"""The MCP tool names each feature contributes (one place for the tests that list tools).

tests/agent/test_mcp_docs.py checks that these are exactly the tools `agent.mcp_server.TOOLS` serves, and that
docs/mcp.md and the bbs-operations skill list them."""

CORE_TOOLS = {"post", "read", "search", "link", "subscribe", "inbox"}
WORKFLOW_TOOLS = {"message", "task"}
DEFAULT_MODE_TOOLS = {"reflect", "review"}
MEMORY_TOOLS = {"working_memory"}
PUSH_TOOLS = {"push"}
ALL_TOOLS = CORE_TOOLS | WORKFLOW_TOOLS | DEFAULT_MODE_TOOLS | MEMORY_TOOLS | PUSH_TOOLS
