"""Errors as problem JSON (RFC 9457), one status per `core.errors` category — the same
categories as the CLI's exit codes: bad input, unknown id and conflicts are the caller's
to fix (4xx, exit 2); Unavailable (a database outage included) is worth retrying: 503
with `Retry-After`."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from dreamkeeper.core.api import Problem
from dreamkeeper.core.errors import (
    Conflict,
    DreamkeeperError,
    InvalidInput,
    NotFound,
    Unavailable,
)

log = logging.getLogger(__name__)

PROBLEM_JSON = "application/problem+json"
RETRY_AFTER_SECONDS = 5  # a 503's Retry-After: an outage is retried, not hammered


class BodyTooLarge(InvalidInput):
    """A request body over the configured limit: refused before anything is done."""


class Forbidden(DreamkeeperError):
    """The caller's token reaches the agent, but not for this operation (403)."""

    failure_type = "Forbidden"


_STATUS: list[tuple[type[DreamkeeperError], int]] = [
    (BodyTooLarge, 413),
    (Forbidden, 403),
    (InvalidInput, 400),
    (NotFound, 404),
    (Conflict, 409),
    (Unavailable, 503),
]
# Problems raised by the service itself (no core error stands for them).
UNAUTHORIZED = "Unauthorized"
FORBIDDEN = "Forbidden"  # a valid token that does not reach this operation


def status_for(exc: DreamkeeperError) -> int:
    for cls, status in _STATUS:
        if isinstance(exc, cls):
            return status
    return 500


def problem(status: int, category: str, detail: str, **headers: str) -> JSONResponse:
    if status == 503:
        headers.setdefault("Retry-After", str(RETRY_AFTER_SECONDS))
    body = Problem(title=category, status=status, detail=detail, category=category)
    return JSONResponse(
        body.model_dump(), status_code=status, media_type=PROBLEM_JSON, headers=headers or None
    )


def validation_detail(errors: Sequence[Any]) -> str:
    """Pydantic's errors as one line: where, and what is wrong (at most five)."""
    parts = []
    for error in list(errors)[:5]:
        where = ".".join(str(p) for p in error.get("loc", ()) if p != "body")
        parts.append(f"{where or 'body'}: {error.get('msg', 'invalid')}")
    return "; ".join(parts)


def install(app: FastAPI) -> None:
    @app.exception_handler(DreamkeeperError)
    async def _ours(request: Request, exc: DreamkeeperError) -> JSONResponse:
        return problem(status_for(exc), exc.failure_type, str(exc))

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        # The body or a parameter does not fit the schema: nothing was written.
        return problem(400, InvalidInput.failure_type, validation_detail(exc.errors()))

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        category = NotFound.failure_type if exc.status_code == 404 else InvalidInput.failure_type
        return problem(exc.status_code, category, str(exc.detail))

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
        log.exception("unexpected error on %s %s", request.method, request.url.path)
        return problem(500, "DreamkeeperError", f"{type(exc).__name__}: {exc}")
