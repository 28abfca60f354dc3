"""The cap across cycles on below-floor prunes (invariant 16, over time).

The per-cycle archive budget bounds what one dream cycle can do; an LLM obeying text
hidden in a memory can still prune a little more every cycle until nothing below the
floor is left (measured: 6, 5, 4 and 1 entries in four consecutive cycles, 15 of 15).
So an agent's standalone prunes over a rolling week are bounded too: at most
`weekly_prune_share` of its live entries (never fewer than `min_weekly_prunes`). A cycle
whose prunes would go past that asks an operator first (the approval step of
workflows.dream_approval); what nobody approves is not applied and comes back later.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from datetime import datetime, timedelta

from dreamkeeper.core.models import MemoryEntry
from dreamkeeper.policies.consolidation import EPHEMERAL_REASON

PRUNE_WINDOW = timedelta(days=7)
WEEKLY_PRUNE_SHARE = 0.25  # of the live entries (plus those pruned in the window)
MIN_WEEKLY_PRUNES = 4


def recent_prunes(archived: Iterable[MemoryEntry], as_of: datetime) -> int:
    """Entries a dream cycle pruned standalone in the week up to `as_of` and still
    archived (an undone or restored prune is not counted: nothing was lost)."""
    since = as_of - PRUNE_WINDOW
    return sum(
        1
        for e in archived
        if e.archive_reason == EPHEMERAL_REASON
        and e.archived_at is not None
        and since < e.archived_at <= as_of
    )


def weekly_prune_room(
    live: int,
    recent: int,
    share: float = WEEKLY_PRUNE_SHARE,
    minimum: int = MIN_WEEKLY_PRUNES,
) -> int:
    """How many more prunes this cycle may make without an operator: the week's cap,
    taken of the store as it was before this week's prunes, less what they used."""
    cap = max(minimum, math.floor((live + recent) * share))
    return max(0, cap - recent)
