"""JSON from untrusted text: bounded in size and nesting, never recursing on its input.

Every JSON Dreamkeeper reads that it did not just write itself — LLM replies, the
vocabulary file, journal lines, working-memory segments, conversation files, the
clusters file, HTTP bodies of endpoints — goes through `loads` (or `load_file`) instead
of bare `json.loads`, which raises `RecursionError` (not `ValueError`) on deep nesting,
reads files of any size, accepts `NaN`/`Infinity` and yields lone surrogates that no
UTF-8 file or Temporal payload can hold. Here every refusal is one exception,
`UnsafeJSON` (a `ValueError`), raised before anything is acted on:

- more than `max_bytes` bytes of UTF-8;
- nested deeper than `max_depth` arrays/objects — found by a linear pre-scan that never
  recurses, before the parser (which does) is called;
- not UTF-8, not JSON, `NaN`/`Infinity`, a number too large for a float, an integer of
  more than 4,300 digits, or a string escape that is not a character (`"\\ud800"`).
"""

from __future__ import annotations

import errno
import json
import math
import os
import re
import stat
from pathlib import Path
from typing import Any

DEFAULT_MAX_DEPTH = 32  # our own files nest at most 4 deep

_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")


class UnsafeJSON(ValueError):
    """Text that is not JSON Dreamkeeper will act on: too big, too deep or malformed."""


class NotRegularFile(OSError):
    """A symlink, directory, FIFO or device where a plain file is expected."""


def _reject_constant(name: str) -> float:
    raise UnsafeJSON(f"{name} is not a JSON number")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise UnsafeJSON(f"number {text[:40]} is out of range")
    return value


def depth(text: str) -> int:
    """How deeply arrays and objects nest in `text` (strings skipped), without recursion.
    Exact for valid JSON; for broken text it may over-count, never under-count what a
    parser would descend into."""
    opening = text.count("[") + text.count("{")
    if opening <= 1:
        return opening
    brackets = _NOT_BRACKET.sub("", _STRING.sub("", text))
    level = deepest = 0
    for char in brackets:
        if char in "[{":
            level += 1
            if level > deepest:
                deepest = level
        elif level:
            level -= 1
    return deepest


def _check_strings(value: object) -> None:
    """Every string (keys too) encodes as UTF-8: iterative, the nesting is bounded."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            item.encode("utf-8")
        elif isinstance(item, list):
            stack.extend(item)
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())


def loads(
    data: str | bytes | bytearray, *, max_bytes: int, max_depth: int = DEFAULT_MAX_DEPTH
) -> Any:  # a JSON value: callers check its shape
    """The JSON value in `data`, or `UnsafeJSON` saying why not."""
    if isinstance(data, str):
        if len(data) > max_bytes:  # a character is at least one byte
            raise UnsafeJSON(f"more than {max_bytes} bytes")
        try:
            size = len(data.encode("utf-8"))
        except UnicodeEncodeError:
            raise UnsafeJSON("text is not valid Unicode (a lone surrogate)") from None
        text = data
    elif isinstance(data, bytes | bytearray):
        size = len(data)
        if size > max_bytes:
            raise UnsafeJSON(f"{size} bytes (at most {max_bytes})")
        try:
            text = bytes(data).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise UnsafeJSON(f"not UTF-8 text (byte {exc.start})") from None
    else:
        raise UnsafeJSON(f"expected text, not {type(data).__name__}")
    if size > max_bytes:
        raise UnsafeJSON(f"{size} bytes (at most {max_bytes})")
    nesting = depth(text)
    if nesting > max_depth:
        raise UnsafeJSON(f"nested {nesting} deep (at most {max_depth})")
    try:
        value = json.loads(text, parse_constant=_reject_constant, parse_float=_finite_float)
    except UnsafeJSON:
        raise
    except RecursionError:  # cannot happen below max_depth; belt and braces
        raise UnsafeJSON("nested too deep") from None
    except ValueError as exc:  # JSONDecodeError, and int() past 4,300 digits
        message = exc.msg if isinstance(exc, json.JSONDecodeError) else str(exc)
        raise UnsafeJSON(f"not JSON ({message[:120]})") from None
    if _SURROGATE_ESCAPE.search(text):
        try:
            _check_strings(value)
        except UnicodeEncodeError:
            raise UnsafeJSON("a string escape is not a character (a lone surrogate)") from None
    return value


def read_regular(path: Path | str, max_bytes: int, *, offset: int = 0) -> bytes:
    """At most `max_bytes + 1` bytes of a plain file (from `offset`), never following a
    symlink in its last component and never blocking on a FIFO or device:
    FileNotFoundError when absent, `NotRegularFile` for anything but a plain file."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise NotRegularFile(exc.errno, f"{path} is a symlink: refused") from None
        raise
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise NotRegularFile(f"{path} is not a plain file: refused")
        if offset:
            os.lseek(fd, offset, os.SEEK_SET)
        chunks, left = [], max_bytes + 1
        while left > 0:
            chunk = os.read(fd, min(left, 1 << 20))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def load_file(path: Path | str, *, max_bytes: int, max_depth: int = DEFAULT_MAX_DEPTH) -> Any:
    """`loads` of a plain file (see `read_regular`): FileNotFoundError, NotRegularFile
    (an OSError) or UnsafeJSON."""
    return loads(read_regular(path, max_bytes), max_bytes=max_bytes, max_depth=max_depth)
