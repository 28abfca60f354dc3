"""Saves still in flight: an original whose enrichment has not finished yet.

While SaveMemory is enriching an original, a dream must not fold or merge the original
with the facts being made from it (a fact may repeat the note word for word): the
original's retirement into its facts is the save's own business. The original carries
`enrichment: pending` until the save records its outcome; a save stuck longer than
`IN_FLIGHT_LIMIT` (a terminated workflow) no longer holds consolidation back — the
store's retire-into-live rule still protects it.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from dreamkeeper.core.models import MemoryEntry
from dreamkeeper.policies.injection import FLAG_KEY

ENRICHMENT_KEY = "enrichment"
PENDING = "pending"
IN_FLIGHT_LIMIT = timedelta(hours=24)


def save_in_flight(entry: MemoryEntry, as_of: datetime) -> bool:
    return (
        not entry.is_archived
        and entry.metadata.get(ENRICHMENT_KEY) == PENDING
        and as_of - entry.created_at < IN_FLIGHT_LIMIT
    )


def consolidatable(entry: MemoryEntry, as_of: datetime) -> bool:
    """Entries a dream may touch: not a save still in flight, not flagged text, not
    history (a superseded version is never folded, merged, pruned or shown)."""
    return (
        not save_in_flight(entry, as_of)
        and FLAG_KEY not in entry.metadata
        and not entry.is_superseded
    )
