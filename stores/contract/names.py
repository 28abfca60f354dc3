"""The one rule every stored name follows: an agent id, a category, a document name, an
entry file's name — each component is checked with `fullmatch` against one strict
pattern and is never `.` or `..`, so no name can reach outside its agent, on files (a
path) or in a database (a key)."""

from __future__ import annotations

import re

from dreamkeeper.core.errors import InvalidInput

COMPONENT = re.compile(r"[A-Za-z0-9_\-.:@]{1,255}")


class UnsafePath(InvalidInput):
    """A path component that could name something outside the agent's directory."""


def check_component(part: str) -> str:
    if not isinstance(part, str) or part in (".", "..") or not COMPONENT.fullmatch(part):
        raise UnsafePath(f"unsafe path component {part!r}")
    return part
