"""Logging for the worker and the CLI: one readable line per event.

The Temporal SDK appends its whole context dict to every workflow and activity message
(a 200-character tail on most lines) and logs activity failures with a traceback. Here
the context becomes a few short `key=value` fields (`wf=SaveMemory id=save-a1-…`,
`act=save_fact attempt=2`), an exception becomes `err=Type: message` on the same line
(the traceback only with -v), and colour is used only on a terminal (never with NO_COLOR set).
"""

from __future__ import annotations

import logging
import os
import sys
from typing import IO, Any

from temporalio import activity, workflow

_LEVEL_COLOURS = {"WARNING": "\x1b[33m", "ERROR": "\x1b[31m", "CRITICAL": "\x1b[31;1m"}
_RESET = "\x1b[0m"


def _context(record: logging.LogRecord) -> list[str]:
    fields: list[str] = []
    wf: dict[str, Any] | None = getattr(record, "temporal_workflow", None)
    act: dict[str, Any] | None = getattr(record, "temporal_activity", None)
    if act:
        fields.append(f"act={act.get('activity_type')}")
        if act.get("workflow_id"):
            fields.append(f"id={act['workflow_id']}")
        if (attempt := act.get("attempt")) and attempt > 1:
            fields.append(f"attempt={attempt}")
    elif wf:
        fields.append(f"wf={wf.get('workflow_type')}")
        if wf.get("workflow_id"):
            fields.append(f"id={wf['workflow_id']}")
        if (attempt := wf.get("attempt")) and attempt > 1:
            fields.append(f"attempt={attempt}")
    return fields


class LineFormatter(logging.Formatter):
    def __init__(self, *, colour: bool, tracebacks: bool) -> None:
        super().__init__()
        self._colour = colour
        self._tracebacks = tracebacks

    def format(self, record: logging.LogRecord) -> str:
        level = record.levelname
        if self._colour and level in _LEVEL_COLOURS:
            level = f"{_LEVEL_COLOURS[level]}{level}{_RESET}"
        name = record.name.removeprefix("dreamkeeper.")
        parts = [f"{self.formatTime(record, '%H:%M:%S')} {level} {name}: {record.getMessage()}"]
        parts += _context(record)
        if record.exc_info and record.exc_info[1] is not None and not self._tracebacks:
            exc = record.exc_info[1]
            parts.append(
                f"err={type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
            )
        line = " ".join(parts)
        if record.exc_info and self._tracebacks:
            line += "\n" + self.formatException(record.exc_info)
        return line


def use_colour(stream: IO[str]) -> bool:
    """Colour only on a terminal, and never with NO_COLOR set (https://no-color.org): a
    log file or pipe gets plain text."""
    if os.environ.get("NO_COLOR"):
        return False
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # a closed or file-like stream without a tty
        return False


def configure_logging(
    *, verbose: bool = False, quiet: bool = False, stream: IO[str] | None = None
) -> None:
    """Install the one handler (idempotent: a second call replaces it, never doubles it)."""
    stream = stream or sys.stderr
    handler = logging.StreamHandler(stream)
    handler.setFormatter(LineFormatter(colour=use_colour(stream), tracebacks=verbose))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(logging.DEBUG if verbose else logging.WARNING if quiet else logging.INFO)
    # The context goes into the fields above instead of the end of every message.
    workflow.logger.workflow_info_on_message = False
    activity.logger.activity_info_on_message = False
