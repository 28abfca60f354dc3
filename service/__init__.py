"""Dreamkeeper's HTTP servers: the memory service `dreamkeeper serve` runs beside the
worker (HTTP API, MCP, metrics), and the side servers `codec-server` (payloads for the
Temporal UI) and `embed-server` (local embeddings)."""
