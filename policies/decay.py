"""Importance decay: exponential in calendar time since the last reinforcement.

Each pass measures from the later of the grace period's end and the entry's last rewrite
(`updatedAt`, which the pass itself sets), so passes compose: one pass over 60 days gives
the same score as twenty 3-day passes, and a pass repeated with the same `as_of` (a
retried activity) changes nothing.
"""

from __future__ import annotations

import math
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


def decay_due_at(entry: MemoryEntry, params: DecayParams) -> datetime | None:
    """The earliest time `decay_due` can hold for the entry as it is (None: never), a
    second early rather than late."""
    importance = entry.importance_score
    if params.half_life <= timedelta(0) or entry.is_archived or importance <= params.floor:
        return None
    start = max(entry.last_seen_at + params.grace, entry.updated_at or entry.created_at)
    # importance * (1 - 0.5 ** (x / half_life)) >= DECAY_STEP, or down to the floor
    halvings = math.log2(importance / params.floor) if params.floor > 0 else math.inf
    if importance > DECAY_STEP:
        halvings = min(halvings, math.log2(importance / (importance - DECAY_STEP)))
    if math.isinf(halvings):
        return None
    return start + params.half_life * halvings - timedelta(seconds=1)
