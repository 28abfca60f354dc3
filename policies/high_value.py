"""The high-value floor: entries too important to lose outright.

At or above either threshold an entry may still be merged (its content survives,
coverage-checked) but is never archived standalone and never purged.
"""

from __future__ import annotations

from dataclasses import dataclass

from dreamkeeper.stores.models import MemoryEntry


@dataclass(frozen=True)
class HighValueFloor:
    importance: float = 0.80
    reinforcement: int = 5

    def protects(self, entry: MemoryEntry) -> bool:
        return (
            entry.importance_score >= self.importance
            or entry.reinforcement_count >= self.reinforcement
        )


DEFAULT_FLOOR = HighValueFloor()
