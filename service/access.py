"""Scope, checked where the agent id is parsed: every route under /v1/agents/{agent_id}
declares what it needs of the caller's grant (`needs`, kept in its OpenAPI operation as
`x-dreamkeeper-access`), and its router's dependency (`check_route_access`) decides on
that declaration with the agent id the route itself received, before the route's body
runs. The search fast path and the MCP tools ask the same `refusal`. So the check and the
route can never disagree about which agent a request is for, and a route that declares
nothing is refused to every token.

The guard (service.guard) has already answered an agent out of the token's reach, from
the path alone and before the body is read; this check repeats it with the route's own
id, and adds what the route needs (read, write, admin, or a tool's)."""

from __future__ import annotations

from typing import Any

from fastapi import Request
from starlette.types import Scope

from dreamkeeper.core.errors import DreamkeeperError
from dreamkeeper.policies.access import Need, Verdict, decide, forbidden_detail
from dreamkeeper.service.guard import grant_of
from dreamkeeper.service.problems import Forbidden
from dreamkeeper.service.state import ServiceState

ACCESS_KEY = "x-dreamkeeper-access"


def needs(need: Need, **openapi_extra: Any) -> dict[str, Any]:
    """A route's `openapi_extra`, declaring what it needs of the caller's grant."""
    return {**openapi_extra, ACCESS_KEY: need.value}


def declared_need(scope: Scope) -> Need | None:
    """What the matched route declared (None: nothing, or no route: refused)."""
    route = scope.get("route")
    extra = getattr(route, "openapi_extra", None) or {}
    declared = extra.get(ACCESS_KEY)
    return Need(declared) if declared in set(Need) else None


def refusal(
    state: ServiceState, scope: Scope, agent_id: str, need: Need | None, tool: str | None = None
) -> DreamkeeperError | None:
    """Why the caller may not do this to the agent (None: it may). Out of reach is the
    unknown-agent answer, byte for byte; in reach but not permitted is `Forbidden`."""
    verdict = decide(grant_of(scope), agent_id, need, tool)
    if verdict is Verdict.UNKNOWN:
        return state.unknown_agent(agent_id)
    if verdict is Verdict.FORBIDDEN:
        return Forbidden(forbidden_detail(agent_id, need, tool))
    return None


async def check_route_access(request: Request, agent_id: str) -> None:
    """The dependency of every router under /v1/agents/{agent_id}."""
    state: ServiceState = request.app.state.service
    need = declared_need(request.scope)
    tool = request.path_params.get("name") if need is Need.TOOL else None
    refused = refusal(state, request.scope, agent_id, need, tool)
    if refused is not None:
        raise refused


async def require_admin(request: Request) -> None:
    """The dependency of the operator routes that name no agent (/metrics)."""
    grant = grant_of(request.scope)
    if grant is None or not grant.admin:
        raise Forbidden(forbidden_detail("", Need.ADMIN))
