"""serve's HTTP server logs through Dreamkeeper's handler, not uvicorn's own: uvicorn's
formatter colours its lines when *stdout* is a terminal while writing them to stderr, so
`dreamkeeper serve 2>serve.log` from a terminal filled the log with escape codes."""

from __future__ import annotations

import logging

from dreamkeeper.core.settings import ServiceSettings
from dreamkeeper.service.runtime import uvicorn_config


def test_uvicorn_installs_no_handler_or_formatter_of_its_own(monkeypatch):
    loggers = [logging.getLogger(name) for name in ("uvicorn", "uvicorn.error", "uvicorn.access")]
    saved = [(lg.handlers[:], lg.level, lg.propagate) for lg in loggers]
    try:
        for lg in loggers:
            lg.handlers.clear()
        config = uvicorn_config(object(), ServiceSettings())
        config.configure_logging()  # what uvicorn.Server does when it starts
        for lg in loggers:
            assert lg.handlers == [], f"{lg.name} got uvicorn's own handler"
        assert logging.getLogger("uvicorn.error").level == logging.WARNING
    finally:
        for lg, (handlers, level, propagate) in zip(loggers, saved, strict=True):
            lg.handlers[:] = handlers
            lg.setLevel(level)
            lg.propagate = propagate
