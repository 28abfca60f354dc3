"""The memory service as one ASGI app: the memory API under /v1 (OpenAPI at
/openapi.json, browsable at /docs), the MCP tools at /mcp, Prometheus metrics at
/metrics — all behind the guard (bearer token when configured, body size limit), and
each route checking the caller's scope itself (service.access)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from html import escape
from typing import Any, cast

from fastapi import Depends, FastAPI, Request
from fastapi.responses import HTMLResponse, Response
from mcp.server.context import ServerRequestContext
from prometheus_client import CONTENT_TYPE_LATEST

from dreamkeeper.core.errors import DreamkeeperError, InvalidInput
from dreamkeeper.core.validation import validate_agent_id
from dreamkeeper.policies.access import READ_ONLY_TOOLS, Need
from dreamkeeper.service import problems
from dreamkeeper.service.access import refusal, require_admin
from dreamkeeper.service.fast_path import FastSearch
from dreamkeeper.service.guard import Guard, grant_of
from dreamkeeper.service.mcp_server import (
    AGENT_HEADER,
    MountedMCP,
    ToolRunner,
    build_server,
    connection_identity,
)
from dreamkeeper.service.routes_dream_review import router as dream_review_router
from dreamkeeper.service.routes_memory import router as memory_router
from dreamkeeper.service.routes_session import router as session_router
from dreamkeeper.service.state import ServiceState


def create_app(state: ServiceState) -> Guard:
    mcp = MountedMCP(build_server(tool_runner(state)), host=state.settings.host)

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
        "NotFound, Conflict, StoreMismatch, Unavailable, DatabaseUnavailable, StoreUnwritable); "
        "a 503 carries Retry-After.",
        # FastAPI's Swagger UI and ReDoc pages load their scripts from a CDN: blank on a
        # machine without internet, and no package here ships the assets. /docs is
        # served by docs_page below instead, from nothing but the OpenAPI schema.
        docs_url=None,
        redoc_url=None,
    )
    app.state.service = state
    problems.install(app)
    app.include_router(memory_router)
    app.include_router(session_router)
    app.include_router(dream_review_router)
    add_service_routes(app, state)
    # A route, not a mount: a mount would redirect /mcp to /mcp/. Starlette treats an
    # endpoint that is not a function as an ASGI app.
    app.add_route(
        "/mcp", cast(Any, mcp), methods=["GET", "POST", "DELETE"], include_in_schema=False
    )
    return Guard(
        FastSearch(app, state),
        token=state.settings.token,
        max_body_bytes=state.settings.max_body_bytes,
        tokens=state.tokens,
        unknown_agent=state.unknown_agent,
        public_docs=state.settings.public_docs,
    )


def tool_runner(state: ServiceState) -> ToolRunner:
    """How the MCP server runs one tool call: the caller's scope checked on the agent the
    call names, then the tool on that agent's memory."""

    async def run_tool(ctx: ServerRequestContext[Any, Any], name: str, args: dict) -> str:
        agent, session = connection_identity(ctx)
        try:
            if agent is None:
                raise InvalidInput(
                    f"this MCP connection names no agent: send the {AGENT_HEADER} header "
                    "(or ?agent= on the URL)"
                )
            # The grant of the request carrying this call (each MCP POST passes the
            # guard); checked per call, on the agent this call names, before the agent
            # is looked up, as every HTTP route is.
            agent = validate_agent_id(agent)
            scope = ctx.request.scope if ctx.request is not None else {}
            refused = refusal(state, scope, agent, Need.TOOL, name)
            if refused is not None:
                raise refused
            tools = state.tools(agent, session, write=name not in READ_ONLY_TOOLS)
        except DreamkeeperError as exc:
            return f"Error: {str(exc).removesuffix('; nothing was done')}; nothing was done."
        state.metrics.tool_calls.labels(name if name in tools.names else "unknown").inc()
        return await tools.call(name, args)

    return run_tool


def add_service_routes(app: FastAPI, state: ServiceState) -> None:
    """The routes about the service itself rather than an agent's memory: health,
    readiness, the caller's agents, the docs page and the metrics."""

    @app.get("/v1/health", tags=["service"])
    async def health() -> dict[str, Any]:
        """Liveness: the process answers (no token needed, never the database's round
        trip while it works). On a database, `database` is "up" or "down": how its last
        use went, asked again while down, so a recovery shows at once."""
        answer: dict[str, Any] = {"ok": True, "store_id": state.memory.store_id}
        database = state.database_state()
        if database is not None:
            answer["database"] = database
        return answer

    @app.get("/v1/ready", tags=["service"])
    async def ready() -> dict[str, Any]:
        """Readiness: the store answers now (a database: one round trip; no token
        needed). 503 with Retry-After while it does not."""
        state.check_ready()
        return {"ready": True}

    @app.get("/v1/agents", tags=["service"])
    async def agents(request: Request) -> dict[str, list[str]]:
        """The agents with a store here that the caller's token reaches."""
        grant = grant_of(request.scope)
        if grant is None:
            return {"agents": []}
        return {"agents": [a for a in state.agents() if grant.covers(a)]}

    @app.get("/docs", include_in_schema=False)
    async def docs() -> HTMLResponse:
        return HTMLResponse(docs_page(app.openapi()))

    @app.get(
        "/metrics",
        tags=["service"],
        include_in_schema=False,
        dependencies=[Depends(require_admin)],
    )
    async def metrics() -> Response:
        return Response(await state.metrics.exposition(), media_type=CONTENT_TYPE_LATEST)


def docs_page(schema: dict[str, Any]) -> str:
    """A self-contained page listing every operation of the schema, linking the schema
    itself: no script, style sheet or font from another host."""
    rows = []
    for path, operations in schema.get("paths", {}).items():
        for method, op in operations.items():
            summary = op.get("summary") or ""
            detail = (op.get("description") or "").strip().split("\n\n", 1)[0]
            rows.append(
                f"<tr><td><code>{escape(method.upper())}</code></td>"
                f"<td><code>{escape(path)}</code></td>"
                f"<td>{escape(summary)}{'<br>' if summary and detail else ''}"
                f"{escape(detail)}</td></tr>"
            )
    info = schema.get("info", {})
    title = escape(str(info.get("title", "API")))
    return (
        "<!doctype html><html><head><meta charset='utf-8'>"
        f"<title>{title}</title><style>"
        "body{font-family:system-ui,sans-serif;margin:2em;max-width:70em}"
        "td{padding:.3em .8em;vertical-align:top;border-bottom:1px solid #ddd}"
        "</style></head><body>"
        f"<h1>{title}</h1><p>{escape(str(info.get('description', '')))}</p>"
        "<p>The full schema: <a href='openapi.json'>openapi.json</a> (OpenAPI "
        f"{escape(str(schema.get('openapi', '')))}; load it into any OpenAPI viewer or "
        "client generator).</p>"
        f"<table>{''.join(rows)}</table></body></html>"
    )
