"""What every request passes before a route sees it: the token store's soundness, the
bearer token (when one is configured), a backstop on the path, and the body size limit.
Plain ASGI middleware, so it covers the MCP mount, /metrics and the search fast path as
well as the memory API.

Who the caller is: the shared DREAMKEEPER_SERVE_TOKEN is an admin; a token issued by
`dreamkeeper token create` has its own grant (policies.access); with neither configured
(no shared token, no token ever issued) the server is open, as before tokens existed.
The grant is put in the ASGI scope (`GRANT_KEY`) for the routes, which check it against
the agent id they parsed and the access they declare (service.access).

It fails closed:
- while the token store is damaged (`TokenSnapshot.damage`), or cannot be asked, every
  request is 503;
- under /v1/agents/, a first segment that is not an agent id is InvalidInput (400);
- a path that is not plain segments (`/` and letters, digits, `_ - . : @`: no control
  character, no empty, `.` or `..` segment, no trailing slash) is refused as an unknown
  route before anything routes it. Paths arrive percent-decoded, so `%0A` is a newline
  here, and Starlette's `$` matches before a final newline: a route would run for
  `/v1/agents/b1/search\n` if anything let it through;
- `/metrics` is compared exactly, never matched;
- a path under /v1/agents/ for an agent outside the token's reach is answered here,
  before the body is read or anything looks the agent up, with exactly the problem an
  unknown agent gets (same status, same bytes), so neither the answer nor its timing
  tells whether the agent exists;
- any scope but HTTP and lifespan (a websocket) is closed.

The docs page and the OpenAPI schema hold no data: served without a token unless
DREAMKEEPER_SERVE_PUBLIC_DOCS is off."""

from __future__ import annotations

import hmac
import re
from collections.abc import Callable
from typing import Any

from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from dreamkeeper.core.errors import DreamkeeperError, InvalidInput, NotFound, Unavailable
from dreamkeeper.core.validation import validate_agent_id
from dreamkeeper.policies.access import OPEN, SHARED, Grant, Need, forbidden_detail
from dreamkeeper.service.problems import (
    FORBIDDEN,
    UNAUTHORIZED,
    BodyTooLarge,
    problem,
    status_for,
)
from dreamkeeper.stores.tokens import (
    PREFIX,
    TokenSnapshot,
    TokenStore,
    damaged_message,
    verify,
)

# Answered without the token: liveness and readiness probes.
OPEN_PATHS = ("/v1/health", "/v1/ready")
DOCS_PATHS = ("/docs", "/openapi.json")  # no data: without a token unless turned off
METRICS_PATH = "/metrics"
AGENTS_PREFIX = "/v1/agents/"
GRANT_KEY = "dreamkeeper.grant"
_PATH = re.compile(r"(?:/[A-Za-z0-9_.:@\-]+)+")
_NO_TOKENS = TokenSnapshot()


def grant_of(scope: Scope) -> Grant | None:
    """The caller's grant, as the guard found it (None: the request did not pass it)."""
    found = scope.get(GRANT_KEY)
    return found if isinstance(found, Grant) else None


def well_formed(path: str) -> bool:
    """Plain segments only (`fullmatch`: no newline slips past an anchor)."""
    return _PATH.fullmatch(path) is not None and not any(
        segment in (".", "..") for segment in path.split("/")
    )


def _answer(exc: DreamkeeperError) -> Response:
    return problem(status_for(exc), exc.failure_type, str(exc))


# Exactly what the framework answers for a path no route matches (problems.install).
NO_ROUTE = NotFound("Not Found")


class Guard:
    def __init__(
        self,
        app: ASGIApp,
        *,
        token: str | None,
        max_body_bytes: int,
        tokens: TokenStore | None = None,
        unknown_agent: Callable[[str], DreamkeeperError] | None = None,
        public_docs: bool = True,
    ) -> None:
        self.app = app
        self.token = token.encode() if token else None
        self.tokens = tokens
        self.max_body_bytes = max_body_bytes
        self.unknown_agent = unknown_agent
        self.open_paths = OPEN_PATHS + (DOCS_PATHS if public_docs else ())

    def _grant(self, headers: dict[bytes, bytes], tokens: TokenSnapshot) -> Grant | None:
        """The presented token's grant; OPEN when the server needs no token; None: 401."""
        if self.token is None and not tokens.issued:
            return OPEN
        scheme, _, credential = headers.get(b"authorization", b"").partition(b" ")
        if scheme.lower() != b"bearer":
            return None
        credential = credential.strip()
        if self._shared(headers):
            return SHARED
        if self.tokens is not None and credential.startswith(PREFIX.encode()):
            try:
                return verify(tokens, credential.decode("ascii"))
            except UnicodeDecodeError:
                return None
        return None

    def _shared(self, headers: dict[bytes, bytes]) -> bool:
        """Whether the request presents the shared token (DREAMKEEPER_SERVE_TOKEN)."""
        scheme, _, credential = headers.get(b"authorization", b"").partition(b" ")
        return (
            self.token is not None
            and scheme.lower() == b"bearer"
            and hmac.compare_digest(credential.strip(), self.token)
        )

    def _refusal(self, path: str, grant: Grant) -> Response | None:
        """The answer to a request this grant may not make here (None: let it through)."""
        agent_id = None
        if path.startswith(AGENTS_PREFIX):
            # An id that is not one is the caller's mistake to hear about, as it always was.
            agent_id = path[len(AGENTS_PREFIX) :].split("/", 1)[0]
            try:
                validate_agent_id(agent_id)
            except InvalidInput as exc:
                return _answer(exc)
        if not well_formed(path):
            return _answer(NO_ROUTE)
        if path == METRICS_PATH and not grant.admin:
            return problem(403, FORBIDDEN, forbidden_detail("", Need.ADMIN))
        if agent_id is None or grant.covers(agent_id):
            return None
        if self.unknown_agent is None:
            raise RuntimeError("a scoped token needs the service's unknown-agent answer")
        return _answer(self.unknown_agent(agent_id))

    @staticmethod
    def _unauthorized(presented: bool) -> Response:
        # The same answer for an unknown, revoked or mistyped token: which one it was is
        # nothing an outsider should learn.
        detail = (
            "the bearer token was refused: it is not one this server accepts"
            if presented
            else "this server needs `Authorization: Bearer <token>` (a token from "
            "`dreamkeeper token create`, or DREAMKEEPER_SERVE_TOKEN)"
        )
        return problem(401, UNAUTHORIZED, detail, **{"WWW-Authenticate": "Bearer"})

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self.app(scope, receive, send)
            return
        if scope["type"] != "http":
            await send({"type": "websocket.close", "code": 1008})  # nothing here speaks it
            return
        headers = {k.lower(): v for k, v in scope.get("headers", [])}
        refused = self._admission(scope, headers)
        if refused is not None:
            await refused(scope, receive, send)
            return
        await self._within_body_limit(scope, receive, send, headers.get(b"content-length"))

    def _admission(self, scope: Scope, headers: dict[bytes, bytes]) -> Response | None:
        """The answer to a request that may not pass (the token store unsound, no grant,
        out of the grant's reach); None, with the grant put in the scope, when it may."""
        path = scope.get("path", "")
        try:
            tokens = self.tokens.snapshot() if self.tokens is not None else _NO_TOKENS
        except DreamkeeperError as exc:  # the database did not answer: nobody is let in
            if path not in self.open_paths and not self._shared(headers):
                return _answer(exc)
            # ...but what the store never decided: what needs no token (liveness, which
            # says the database is down; readiness, which answers 503), and the shared
            # token of the environment (an operator's /metrics shows the database down).
            tokens = _NO_TOKENS
        if tokens.damage is not None and self.tokens is not None:
            # Every request, the shared token's too: until an operator looks, nothing
            # says which tokens were meant to be valid.
            return _answer(Unavailable(damaged_message(self.tokens)))
        if path in self.open_paths:
            return None
        grant = self._grant(headers, tokens)
        if grant is None:
            return self._unauthorized(b"authorization" in headers)
        scope[GRANT_KEY] = grant
        return self._refusal(path, grant)

    async def _within_body_limit(
        self, scope: Scope, receive: Receive, send: Send, length: bytes | None
    ) -> None:
        """The request on to the app, or refused when its body is over the limit."""
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
