"""What every request passes before a route sees it: the bearer token (when one is
configured), the token's scope, and the body size limit. Plain ASGI middleware, so it
covers the MCP mount, /metrics and the search fast path as well as the memory API.

Who the caller is: the shared DREAMKEEPER_SERVE_TOKEN is an admin; a token issued by
`dreamkeeper token create` has its own grant (policies.access); with neither configured
(no shared token, no token ever issued) the server is open, as before tokens existed.
The grant is put in the ASGI scope (`GRANT_KEY`) for the routes that filter by it (the
agent list, the MCP tools).

A route under /v1/agents/{agent}/ for an agent outside the token's reach is answered
here, before anything looks the agent up, with exactly the problem an unknown agent gets
— same status, same body — so neither the answer nor its timing tells whether the agent
exists. A covered agent the token may not do this to (a read token writing, a non-admin
approving a dream) is 403."""

from __future__ import annotations

import hmac
import re
from collections.abc import Callable
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from dreamkeeper.core.errors import DreamkeeperError
from dreamkeeper.policies.access import OPEN, SHARED, Grant, Need, allowed, route_need
from dreamkeeper.service.problems import (
    FORBIDDEN,
    UNAUTHORIZED,
    BodyTooLarge,
    problem,
    status_for,
)
from dreamkeeper.stores.tokens import PREFIX, TokenStore, verify

OPEN_PATHS = ("/v1/health",)  # answered without the token: liveness probes
ADMIN_PATHS = ("/metrics",)
GRANT_KEY = "dreamkeeper.grant"
_AGENT_ROUTE = re.compile(r"/v1/agents/([A-Za-z0-9][A-Za-z0-9_\-]{0,63})(/.*)?")


def grant_of(scope: Scope) -> Grant | None:
    """The caller's grant, as the guard found it (None: the request did not pass it)."""
    found = scope.get(GRANT_KEY)
    return found if isinstance(found, Grant) else None


class Guard:
    def __init__(
        self,
        app: ASGIApp,
        *,
        token: str | None,
        max_body_bytes: int,
        tokens: TokenStore | None = None,
        unknown_agent: Callable[[str], DreamkeeperError] | None = None,
    ) -> None:
        self.app = app
        self.token = token.encode() if token else None
        self.tokens = tokens
        self.max_body_bytes = max_body_bytes
        self.unknown_agent = unknown_agent

    def _grant(self, headers: dict[bytes, bytes]) -> Grant | None:
        """The presented token's grant; OPEN when the server needs no token; None: 401."""
        if self.token is None and (self.tokens is None or not self.tokens.issued()):
            return OPEN
        scheme, _, credential = headers.get(b"authorization", b"").partition(b" ")
        if scheme.lower() != b"bearer":
            return None
        credential = credential.strip()
        if self.token is not None and hmac.compare_digest(credential, self.token):
            return SHARED
        if self.tokens is not None and credential.startswith(PREFIX.encode()):
            try:
                return verify(self.tokens, credential.decode("ascii"))
            except UnicodeDecodeError:
                return None
        return None

    async def _refused(self, scope: Scope, receive: Receive, send: Send, grant: Grant) -> bool:
        """Answer a request the grant does not reach (True), or let it through (False)."""
        path = scope.get("path", "")
        if path in ADMIN_PATHS and not grant.admin:
            await problem(403, FORBIDDEN, "this token has no admin scope")(scope, receive, send)
            return True
        match = _AGENT_ROUTE.fullmatch(path)
        if match is None:
            return False
        agent_id, rest = match.group(1), match.group(2) or ""
        if not grant.covers(agent_id):
            if self.unknown_agent is None:
                raise RuntimeError("a scoped token needs the service's unknown-agent answer")
            exc = self.unknown_agent(agent_id)
            await problem(status_for(exc), exc.failure_type, str(exc))(scope, receive, send)
            return True
        need, tool = route_need(scope.get("method", "GET"), rest)
        if allowed(grant, agent_id, need, tool):
            return False
        what = {
            Need.ADMIN: "needs an admin token",
            Need.TOOL: f"tool {tool!r} writes: this token may only read agent {agent_id}",
        }.get(need, f"this token may only read agent {agent_id}")
        await problem(403, FORBIDDEN, f"{what}; nothing was done")(scope, receive, send)
        return True

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = {k.lower(): v for k, v in scope.get("headers", [])}
        if scope.get("path") not in OPEN_PATHS:
            grant = self._grant(headers)
            if grant is None:
                response = problem(
                    401,
                    UNAUTHORIZED,
                    "this server needs `Authorization: Bearer <token>` (DREAMKEEPER_SERVE_TOKEN "
                    "or a token from `dreamkeeper token create`)",
                    **{"WWW-Authenticate": "Bearer"},
                )
                await response(scope, receive, send)
                return
            scope[GRANT_KEY] = grant
            if await self._refused(scope, receive, send, grant):
                return
        length = headers.get(b"content-length")
        if length is not None and length.isdigit() and int(length) > self.max_body_bytes:
            await self._refuse(scope, receive, send)
            return
        if length is None and scope.get("method") in ("POST", "PUT", "PATCH"):
            # No length given (chunked): read it here, counting, so an oversized body is
            # refused before a route parses any of it; then hand it on as received.
            messages: list[Message] = []
            seen = 0
            while True:
                message = await receive()
                messages.append(message)
                if message["type"] != "http.request":
                    break
                seen += len(message.get("body", b""))
                if seen > self.max_body_bytes:
                    await self._refuse(scope, receive, send)
                    return
                if not message.get("more_body", False):
                    break
            replay = iter(messages)

            async def replayed() -> Message:
                return next(replay, None) or await receive()

            await self.app(scope, replayed, send)
            return
        await self.app(scope, receive, send)

    def _detail(self) -> str:
        return (
            f"the request body is over {self.max_body_bytes} bytes "
            "(DREAMKEEPER_SERVE_MAX_BODY_BYTES); nothing was done"
        )

    async def _refuse(self, scope: Scope, receive: Any, send: Send) -> None:
        exc = BodyTooLarge(self._detail())
        response = problem(status_for(exc), exc.failure_type, str(exc))
        await response(scope, receive, send)
