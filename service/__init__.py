"""`dreamkeeper serve`: the memory service (HTTP API, MCP, metrics) beside the worker."""
