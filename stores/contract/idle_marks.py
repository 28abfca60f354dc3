"""Idle marks' contract: where a backend records that an agent's dream cycle has nothing
to do, so a sweep skips it without opening its store (`stores.dream_state.workload`)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Protocol

from dreamkeeper.core.dream_payloads import DreamWork

# One agent's answer to `IdleMarks.check`: the state key now (None: no mark can be
# made) and the agent's work (none) when its mark holds, else None.
IdleCheck = tuple[str | None, DreamWork | None]


class IdleMarks(Protocol):
    """Where a backend keeps its idle marks."""

    def check(self, agent_ids: Sequence[str], as_of: datetime, settings: str) -> list[IdleCheck]:
        """Per agent, in order: the state key now, taken before anything of the store is
        read (None: no mark can be made, the store has no state yet), and the agent's
        work (none) when its mark holds as of `as_of`, else None."""
        ...

    def mark(self, agent_id: str, state: str, until: datetime | None, work: DreamWork) -> None:
        """Record the agent idle on `state` (from `check`) until `until`."""
        ...
