"""Provenance: where a memory came from, and how trust moves when entries combine.

Trust only rises with evidence. Seeing the same fact again (reinforcement, exact-duplicate
fold) keeps the most trusted source; any combination of texts (extension, merge) takes
the least trusted, and an unknown part makes the whole unknown — merging cannot launder
an inferred fact into a user one.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

USER = "user"
INFERRED = "inferred"
TOOL_PREFIX = "tool:"
_ALIASES = {"inference": INFERRED}
_TOOL = re.compile(r"^tool:[A-Za-z0-9_.\-]{1,64}$")


@dataclass(frozen=True)
class ParsedSource:
    value: str | None  # normalized source, or None
    dropped: str | None = None  # the raw value, when it was not recognised

    @property
    def note(self) -> str | None:
        if self.dropped is None:
            return None
        return (
            f"source {self.dropped!r} was not recognised and was dropped "
            "(use 'user', 'tool:<name>' or 'inferred')"
        )


def parse_source(raw: str | None) -> ParsedSource:
    if raw is None or not str(raw).strip():
        return ParsedSource(None)
    value = str(raw).strip()
    lowered = value.lower()
    lowered = _ALIASES.get(lowered, lowered)
    if lowered in (USER, INFERRED):
        return ParsedSource(lowered)
    if lowered.startswith(TOOL_PREFIX) and _TOOL.match(value):
        return ParsedSource(TOOL_PREFIX + value[len(TOOL_PREFIX) :])
    return ParsedSource(None, dropped=value)


def trust(source: str | None) -> int:
    """user > tool:<name> > inferred > none."""
    if source == USER:
        return 3
    if source is not None and source.startswith(TOOL_PREFIX):
        return 2
    if source == INFERRED:
        return 1
    return 0


def reinforced_source(existing: str | None, incoming: str | None) -> str | None:
    """The same fact seen again: keep the more trusted source (ties keep the existing)."""
    return incoming if trust(incoming) > trust(existing) else existing


def combined_source(sources: Iterable[str | None]) -> str | None:
    """Texts combined into one: the least trusted source wins (first one on a tie)."""
    result: str | None = None
    lowest = None
    for source in sources:
        if lowest is None or trust(source) < lowest:
            result, lowest = source, trust(source)
    return result


def fact_importance(
    proposed: float, *, original_importance: float, original_source: str | None, floor: float
) -> float:
    """What an LLM-extracted fact may be worth: never above the high-value floor, unless
    the original came from the user at or above it — and then never above the
    original's own importance. An LLM cannot mint an unprunable memory."""
    if original_source == USER and original_importance >= floor:
        return min(proposed, original_importance)
    return min(proposed, max(0.0, round(floor - 0.01, 4)))
