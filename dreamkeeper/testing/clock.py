"""A fake clock for tests: an injectable "now" moved by hand."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta


class FakeClock:
    """An injectable "now" that tests move by hand."""

    def __init__(self, start: datetime | None = None) -> None:
        self.now = start or datetime(2026, 1, 1, 12, 0, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.now

    def advance(self, **kwargs: float) -> datetime:
        self.now += timedelta(**kwargs)
        return self.now
