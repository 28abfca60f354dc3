"""Reading an export file for `dreamkeeper import`, with a progress bar (rich) when
stderr is a terminal."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import ExitStack
from typing import IO

from dreamkeeper.core.errors import InvalidInput
from dreamkeeper.stores.transfer import ImportFile, read_export


def _lines(handle: IO[str]) -> Iterator[str]:
    for line in handle:
        yield line.rstrip("\n")


def read_with_progress(path: str) -> ImportFile:
    with ExitStack() as stack:
        if path == "-":
            handle: IO[str] = sys.stdin
        else:
            try:
                handle = stack.enter_context(open(path, encoding="utf-8"))
            except OSError as exc:
                raise InvalidInput(f"cannot read {path}: {exc.strerror or exc}") from None
        try:
            if not sys.stderr.isatty():
                return read_export(_lines(handle))
            from rich.progress import Progress

            with Progress(transient=True) as bar:
                task = bar.add_task("reading", total=None)
                return read_export(_lines(handle), progress=lambda n: bar.update(task, completed=n))
        except UnicodeDecodeError:
            raise InvalidInput(f"{path} is not UTF-8 text") from None
