"""`POST /v1/agents/{agent}/search` answered ahead of the framework: the search is the
hot path an agent calls every turn, and FastAPI's middleware, routing and dependency
layers cost about as much as the search itself on a small store. Same function
(`routes_memory.run_search`), same answers and problems as the documented route; it sits
inside the guard, so the token and the body limit apply, and it checks the caller's scope
on the agent id it parsed itself, as the route's dependency does (service.access)."""

from __future__ import annotations

import logging
import re

from starlette.types import ASGIApp, Receive, Scope, Send

from dreamkeeper.core.errors import DreamkeeperError
from dreamkeeper.policies.access import Need
from dreamkeeper.service.access import refusal
from dreamkeeper.service.problems import problem, status_for
from dreamkeeper.service.routes_memory import run_search
from dreamkeeper.service.state import ServiceState

log = logging.getLogger(__name__)

_SEARCH = re.compile(r"/v1/agents/([^/]+)/search")
_JSON = [(b"content-type", b"application/json")]


class FastSearch:
    def __init__(self, app: ASGIApp, state: ServiceState) -> None:
        self.app = app
        self.state = state

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        match = (
            _SEARCH.fullmatch(scope["path"])
            if scope["type"] == "http" and scope["method"] == "POST"
            else None
        )
        if match is None:
            await self.app(scope, receive, send)
            return
        refused = refusal(self.state, scope, match.group(1), Need.READ)
        if refused is not None:
            await problem(status_for(refused), refused.failure_type, str(refused))(
                scope, receive, send
            )
            return
        chunks = []
        while True:
            message = await receive()
            if message["type"] != "http.request":
                return  # the client went away
            chunks.append(message.get("body", b""))
            if not message.get("more_body", False):
                break
        try:
            answer = run_search(self.state, match.group(1), b"".join(chunks))
        except DreamkeeperError as exc:
            await problem(status_for(exc), exc.failure_type, str(exc))(scope, receive, send)
            return
        except Exception as exc:  # noqa: BLE001 - a problem, like every other route
            log.exception("unexpected error in search")
            response = problem(500, "DreamkeeperError", f"{type(exc).__name__}: {exc}")
            await response(scope, receive, send)
            return
        headers = [*_JSON, (b"content-length", str(len(answer)).encode())]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": answer})
