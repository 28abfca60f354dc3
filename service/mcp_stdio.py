"""`dreamkeeper mcp --agent A`: the memory tools over stdio for one agent and session.

Local (default): reads from the data directory, writes through a worker over Temporal
(`MemoryClient`), like any agent on the worker's host. Remote (`--url` or
DREAMKEEPER_URL): every tool call goes to that `serve`, so no data volume is needed.
Logs go to stderr: stdout carries the protocol.
"""

from __future__ import annotations

from typing import Any

from mcp.server.context import ServerRequestContext
from mcp.server.stdio import stdio_server

from dreamkeeper.agent.session import SessionContext
from dreamkeeper.core.settings import ServiceSettings, StoreSettings, TemporalSettings
from dreamkeeper.service.mcp_server import build_server


async def run_stdio(
    store: StoreSettings,
    temporal: TemporalSettings,
    service: ServiceSettings,
    *,
    session: str,
) -> None:
    agent_id = store.agent_id
    SessionContext.user(session)  # a bad session id is refused before the protocol starts
    if service.url:
        from dreamkeeper.agent.remote import RemoteMemoryClient

        remote = RemoteMemoryClient(service.url, token=service.sent_token)
        remote_tools = remote.agent(agent_id).tools(SessionContext.user(session))

        async def run(ctx: ServerRequestContext[Any, Any], name: str, args: dict) -> str:
            return await remote_tools.call(name, args)

    else:
        from dreamkeeper.agent.client import MemoryClient

        memory = await MemoryClient.connect(store, temporal, save_timeout=store.save_timeout)
        tools = memory.agent(agent_id).tools(SessionContext.user(session))

        async def run(ctx: ServerRequestContext[Any, Any], name: str, args: dict) -> str:
            return await tools.call(name, args)

    server = build_server(run)
    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())
