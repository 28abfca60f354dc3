"""What the agent-facing calls share, whichever client serves them (`MemoryClient` on the
same host, `RemoteMemoryClient` over HTTP): a search's filters, a save's options, and a
search hit. Spelled once here, so the clients, their per-agent handles and the tools
take the same keywords (`**filters: Unpack[SearchOptions]`): a misspelt or mistyped
keyword is a type error in the caller, and refused at run time by both clients (the
local one's search takes no other keyword; the service's request bodies forbid
unknown fields).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypedDict

from dreamkeeper.core.errors import InvalidInput
from dreamkeeper.core.models import MemoryEntry

DEFAULT_LIMIT = 20  # hits a search returns unless the caller asks for another number


class SearchFilters(TypedDict, total=False):
    """A search's filters; each left out restricts nothing. Both created bounds are
    inclusive (ISO 8601 text or datetimes; naive is UTC); `metadata` keeps entries holding
    every key with exactly that value; `limit` defaults to `DEFAULT_LIMIT`."""

    category: str | None  # a category and everything under it ("user" holds "user/location")
    tags: list[str] | None  # every one of them
    metadata: dict[str, str] | None
    created_after: datetime | str | None
    created_before: datetime | str | None
    limit: int


class SearchOptions(SearchFilters, total=False):
    """`SearchFilters`, and whether archived entries are found too (default False).
    Current facts only by default: `include_superseded` finds replaced versions too,
    `as_of` (ISO 8601 or a datetime) what was valid then, by validity time, and
    `history` (an entry id) that fact's versions, oldest first."""

    include_archived: bool
    include_superseded: bool
    as_of: datetime | str | None
    history: str | None


class SaveOptions(TypedDict, total=False):
    """A save's options: `importance` defaults to 0.5. Give `entry_id` or
    `idempotency_key` (a retry with either is the same save, done once), not both.
    `replaces` is checked: each must be an older version of this fact (the same entity
    and attribute), or nothing is saved (`ReplaceRefused`, with the reason) — unless
    `force_replace`, which replaces it anyway and journals that it was forced.
    `valid_from` (ISO 8601 or a datetime) is when the fact became true, if not when it
    is saved ("moved here last week"): no more than a year ahead."""

    category: str | None
    tags: list[str] | None
    source: str | None  # who said it: "user", "agent", a tool's name, ...
    importance: float
    entry_id: str | None
    idempotency_key: str | None
    replaces: list[str] | None  # ids of entries this fact replaces (a changed fact)
    force_replace: bool
    valid_from: datetime | str | None


@dataclass(frozen=True)
class SearchHit:
    entry: MemoryEntry
    score: float | None  # None for a query-less browse


def wire_filters(filters: SearchFilters | SearchOptions) -> dict[str, Any]:
    """The filters given, as JSON values (created bounds as ISO text): the body the
    service's search reads and the worker's search input."""
    return {
        key: value.isoformat() if isinstance(value, datetime) else value
        for key, value in filters.items()
        if value is not None
    }


def require_known(given: dict[str, Any], options: Any) -> None:
    """Refuse a keyword the options do not name (a typo would otherwise be ignored)."""
    known = options.__required_keys__ | options.__optional_keys__
    unknown = sorted(set(given) - known)
    if unknown:
        raise InvalidInput(
            f"unknown option {unknown[0]!r} (expected one of: {', '.join(sorted(known))})"
        )
