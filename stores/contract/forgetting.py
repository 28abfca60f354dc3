"""Forgetting's contract: what a backend's forget runner answers (`Forgetter`), the three
stores of one agent it works on (`AgentStores`), and the payload data keys it destroys
(`HistoryKeys`). The algorithm is written once, `stores.forget`."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol

from dreamkeeper.core.forgetting import Derived, ForgetReceipt
from dreamkeeper.stores.contract.conversation import ConversationStore
from dreamkeeper.stores.contract.memory import MemoryStore
from dreamkeeper.stores.contract.working import WorkingMemoryStore


class HistoryKeys(Protocol):
    """The per-agent payload data keys (`client.agent_keys`): destroying an agent's
    makes every Temporal payload sealed with it undecodable."""

    def destroy(self, agent_id: str) -> int:
        """Destroy the agent's data keys; how many were destroyed."""
        ...


@dataclass
class AgentStores:
    memory: MemoryStore
    working: WorkingMemoryStore
    conversation: ConversationStore


class Forgetter(Protocol):
    """Forget requests on one store: entries by id, by phrase, or a whole agent, each
    answered with a receipt (`core.forgetting`); a request a crash interrupted is
    finished by the next."""

    history_keys: HistoryKeys | None

    def forget_entries(
        self,
        agent_id: str,
        entry_ids: Iterable[str],
        *,
        derived: Derived = "report",
        dry_run: bool = False,
    ) -> ForgetReceipt: ...

    def forget_match(
        self, agent_id: str, phrase: str, *, derived: Derived = "report", dry_run: bool = False
    ) -> ForgetReceipt: ...

    def forget_agent(self, agent_id: str, *, dry_run: bool = False) -> ForgetReceipt: ...

    def finish_pending(self) -> list[str]: ...
