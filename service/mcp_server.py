"""The 7 memory tools as an MCP server (the official `mcp` SDK's low-level server): same
names, descriptions, input schemas and text results as `MemoryTools`, which runs them.

Two transports:
- stdio (`dreamkeeper mcp --agent A [--session S]`): for desktop assistants and IDEs.
  Tools run in that process on the store (writes through a worker over Temporal), or,
  with `--url` / DREAMKEEPER_URL, on a remote `serve`.
- streamable HTTP, mounted at /mcp inside `serve`. The agent and session come from the
  connection: headers `X-Dreamkeeper-Agent` / `X-Dreamkeeper-Session` (or the `agent`
  and `session` query parameters of the URL).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import mcp_types as types
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecuritySettings
from starlette.types import Receive, Scope, Send

from dreamkeeper.agent.tools import tool_specs

SERVER_NAME = "dreamkeeper"
AGENT_HEADER = "x-dreamkeeper-agent"
SESSION_HEADER = "x-dreamkeeper-session"
DEFAULT_SESSION = "mcp"

# (connection context, tool name, arguments) -> the tool's text
ToolRunner = Callable[[ServerRequestContext[Any, Any], str, dict[str, Any]], Awaitable[str]]


def mcp_tools() -> list[types.Tool]:
    return [
        types.Tool(
            name=spec["function"]["name"],
            description=spec["function"]["description"],
            input_schema=spec["function"]["parameters"],
        )
        for spec in tool_specs()
    ]


def build_server(run: ToolRunner, *, version: str = "") -> Server[Any]:
    tools = mcp_tools()

    async def list_tools(
        ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        return types.ListToolsResult(tools=tools)

    async def call_tool(
        ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        text = await run(ctx, params.name, dict(params.arguments or {}))
        return types.CallToolResult(
            content=[types.TextContent(text=text)], is_error=text.startswith("Error:")
        )

    return Server(
        SERVER_NAME,
        version=version,
        instructions="Long-term and working memory for this agent: search_memory before "
        "answering from memory, save_memory for durable facts.",
        on_list_tools=list_tools,
        on_call_tool=call_tool,
    )


def connection_identity(ctx: ServerRequestContext[Any, Any]) -> tuple[str | None, str]:
    """The agent and session an HTTP connection named (headers, else query string)."""
    request = ctx.request
    if request is None:
        return None, DEFAULT_SESSION
    headers = getattr(request, "headers", {})
    query = getattr(request, "query_params", {})
    agent = headers.get(AGENT_HEADER) or query.get("agent")
    session = headers.get(SESSION_HEADER) or query.get("session") or DEFAULT_SESSION
    return agent, session


class MountedMCP:
    """The streamable-HTTP transport as an ASGI app to mount in `serve`, with the session
    manager's lifetime tied to the app's (`lifespan`)."""

    def __init__(self, server: Server[Any], *, host: str) -> None:
        local = host in ("127.0.0.1", "localhost", "::1")
        security = (
            TransportSecuritySettings(
                enable_dns_rebinding_protection=True,
                allowed_hosts=["127.0.0.1:*", "localhost:*", "[::1]:*"],
                allowed_origins=["http://127.0.0.1:*", "http://localhost:*", "http://[::1]:*"],
            )
            if local
            else None
        )
        self.manager = StreamableHTTPSessionManager(server, security_settings=security)

    @contextlib.asynccontextmanager
    async def lifespan(self) -> AsyncIterator[None]:
        async with self.manager.run():
            yield

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self.manager.handle_request(scope, receive, send)
