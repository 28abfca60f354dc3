"""The memory service as one ASGI app: the memory API under /v1 (OpenAPI at
/openapi.json, browsable at /docs), the MCP tools at /mcp, Prometheus metrics at
/metrics — all behind the guard (bearer token when configured, body size limit)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any, cast

from fastapi import FastAPI
from fastapi.responses import Response
from mcp.server.context import ServerRequestContext
from prometheus_client import CONTENT_TYPE_LATEST

from dreamkeeper.core.errors import DreamkeeperError, InvalidInput
from dreamkeeper.worker.service import problems
from dreamkeeper.worker.service.fast_path import FastSearch
from dreamkeeper.worker.service.guard import Guard
from dreamkeeper.worker.service.mcp_server import (
    AGENT_HEADER,
    MountedMCP,
    build_server,
    connection_identity,
)
from dreamkeeper.worker.service.routes_memory import router as memory_router
from dreamkeeper.worker.service.routes_session import router as session_router
from dreamkeeper.worker.service.state import ServiceState


def create_app(state: ServiceState) -> Guard:
    async def run_tool(ctx: ServerRequestContext[Any, Any], name: str, args: dict) -> str:
        agent, session = connection_identity(ctx)
        try:
            if agent is None:
                raise InvalidInput(
                    f"this MCP connection names no agent: send the {AGENT_HEADER} header "
                    "(or ?agent= on the URL)"
                )
            tools = state.tools(agent, session)
        except DreamkeeperError as exc:
            return f"Error: {exc}; nothing was done."
        state.metrics.tool_calls.labels(name if name in tools.names else "unknown").inc()
        return await tools.call(name, args)

    mcp = MountedMCP(build_server(run_tool), host=state.settings.host)

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        async with mcp.lifespan():
            try:
                yield
            finally:
                await state.close()

    app = FastAPI(
        title="Dreamkeeper memory service",
        version="1",
        lifespan=lifespan,
        description="Long-term, working and conversation memory for LLM agents. Errors are "
        "problem JSON whose `category` is Dreamkeeper's error type (InvalidInput, "
        "NotFound, Conflict, StoreMismatch, Unavailable, StoreUnwritable).",
    )
    app.state.service = state
    problems.install(app)
    app.include_router(memory_router)
    app.include_router(session_router)

    @app.get("/v1/health", tags=["service"])
    async def health() -> dict[str, Any]:
        return {"ok": True, "store_id": state.memory.store_id}

    @app.get("/v1/agents", tags=["service"])
    async def agents() -> dict[str, list[str]]:
        return {"agents": state.agents()}

    @app.get("/metrics", tags=["service"], include_in_schema=False)
    async def metrics() -> Response:
        return Response(await state.metrics.exposition(), media_type=CONTENT_TYPE_LATEST)

    # A route, not a mount: a mount would redirect /mcp to /mcp/. Starlette treats an
    # endpoint that is not a function as an ASGI app.
    app.add_route(
        "/mcp", cast(Any, mcp), methods=["GET", "POST", "DELETE"], include_in_schema=False
    )
    return Guard(
        FastSearch(app, state),
        token=state.settings.token,
        max_body_bytes=state.settings.max_body_bytes,
    )
