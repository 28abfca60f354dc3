"""What the CLI tests share."""

from __future__ import annotations

import os

import pytest

from dreamkeeper.cli.main import main


@pytest.fixture
def run(capsys, monkeypatch):
    """`main(args)` in a clean environment: (exit code, stdout, stderr)."""
    for name in list(os.environ):
        if name.startswith("DREAMKEEPER_"):
            monkeypatch.delenv(name)
    # Any write through the worker that slipped past a check fails fast, not hangs.
    monkeypatch.setenv("TEMPORAL_ADDRESS", "127.0.0.1:1")

    def go(*args: str) -> tuple[int, str, str]:
        code = main(list(args))
        out, err = capsys.readouterr()
        return code, out, err

    return go
