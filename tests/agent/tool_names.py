"""The MCP tool names each feature contributes (one place for the tests that list tools)."""

CORE_TOOLS = {"post", "read", "search", "link", "subscribe", "inbox", "ack"}
WORKFLOW_TOOLS = {
    "send_message",
    "read_messages",
    "declare_task",
    "ready_tasks",
    "lease_task",
    "finish_task",
    "task_graph",
}
DEFAULT_MODE_TOOLS = {"reflect", "critic", "promote", "consolidate"}
MEMORY_TOOLS = {"working_memory", "review"}
PUSH_TOOLS = {"push"}
ALL_TOOLS = CORE_TOOLS | WORKFLOW_TOOLS | DEFAULT_MODE_TOOLS | MEMORY_TOOLS | PUSH_TOOLS
