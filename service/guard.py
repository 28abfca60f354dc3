"""What every request passes before a route sees it: the bearer token (when one is
configured) and the body size limit. Plain ASGI middleware, so it covers the MCP mount
and /metrics as well as the memory API."""

from __future__ import annotations

import hmac
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from dreamkeeper.service.problems import UNAUTHORIZED, BodyTooLarge, problem, status_for

OPEN_PATHS = ("/v1/health",)  # answered without the token: liveness probes


class Guard:
    def __init__(self, app: ASGIApp, *, token: str | None, max_body_bytes: int) -> None:
        self.app = app
        self.token = token.encode() if token else None
        self.max_body_bytes = max_body_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = {k.lower(): v for k, v in scope.get("headers", [])}
        if self.token is not None and scope.get("path") not in OPEN_PATHS:
            given = headers.get(b"authorization", b"")
            scheme, _, credential = given.partition(b" ")
            if scheme.lower() != b"bearer" or not hmac.compare_digest(
                credential.strip(), self.token
            ):
                response = problem(
                    401,
                    UNAUTHORIZED,
                    "this server needs `Authorization: Bearer <token>` (DREAMKEEPER_SERVE_TOKEN)",
                    **{"WWW-Authenticate": "Bearer"},
                )
                await response(scope, receive, send)
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
