"""Importance decay: exponential in calendar time since the last reinforcement.

Each pass measures from the later of the grace period's end and the entry's last rewrite
(`updatedAt`, which the pass itself sets), so passes compose: one pass over 60 days gives
the same score as twenty 3-day passes, and a pass repeated with the same `as_of` (a
retried activity) changes nothing.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from dreamkeeper.core.models import MemoryEntry
from dreamkeeper.core.settings import DecayParams

DAY = 86_400.0


def decayed_importance(entry: MemoryEntry, as_of: datetime, params: DecayParams) -> float | None:
    """The entry's new importance as of `as_of`, or None if it does not change."""
    if params.half_life <= timedelta(0) or entry.is_archived:
        return None
    importance = entry.importance_score
    seen = as_of - entry.last_seen_at
    if seen < params.grace or importance <= params.floor:
        return None
    elapsed = min(seen - params.grace, as_of - (entry.updated_at or entry.created_at))
    if elapsed <= timedelta(0):
        return None
    factor = 0.5 ** (elapsed.total_seconds() / params.half_life.total_seconds())
    new = max(params.floor, importance * factor)
    return new if new < importance else None


# Below this a cycle leaves decay for later: passes compose (each measures from the
# entry's last rewrite), so a step deferred is applied whole by the next pass that runs.
DECAY_STEP = 0.01


def decay_due(entry: MemoryEntry, as_of: datetime, params: DecayParams) -> bool:
    """Whether a pass as of `as_of` would lower the entry by a step or bring it to the floor."""
    new = decayed_importance(entry, as_of, params)
    return new is not None and (entry.importance_score - new >= DECAY_STEP or new <= params.floor)
