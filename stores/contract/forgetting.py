"""Forgetting's contract: what a backend's forget runner answers (`Forgetter`), the three
stores of one agent it works on (`AgentStores`), the payload data keys it destroys
(`HistoryKeys`), and the steps that differ per backend (`ForgetSteps`). The algorithm is
written once, `stores.forget.Forgetting`, given its backend's steps as an object: the
file wing's `stores.files.forgetting`, PostgreSQL's `stores.postgres.forget`."""

from __future__ import annotations

from collections.abc import Iterable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Literal, Protocol

from dreamkeeper.core.forgetting import Derived, ForgetReceipt, Removal, Verification
from dreamkeeper.stores.contract.conversation import ConversationStore
from dreamkeeper.stores.contract.documents import AgentDocuments
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

    @property
    def history_keys(self) -> HistoryKeys | None:
        """The payload data keys it destroys (None: the process has none)."""
        ...

    # `caller`: the request id the caller chose. A request of the same caller id that a
    # crash interrupted is this request begun before: its receipt is merged into this
    # one, not listed under `resumed` (which lists other requests finished first).

    def forget_entries(
        self,
        agent_id: str,
        entry_ids: Iterable[str],
        *,
        derived: Derived = "report",
        dry_run: bool = False,
        caller: str | None = None,
    ) -> ForgetReceipt: ...

    def forget_match(
        self,
        agent_id: str,
        phrase: str,
        *,
        derived: Derived = "report",
        dry_run: bool = False,
        caller: str | None = None,
    ) -> ForgetReceipt: ...

    def forget_agent(
        self, agent_id: str, *, dry_run: bool = False, caller: str | None = None
    ) -> ForgetReceipt: ...

    def finish_pending(self) -> list[str]: ...


class ForgetSteps(Protocol):
    """What one backend does for the shared forgetting (`stores.forget.Forgetting`):
    where its journal and lock are, how it names places in a receipt, and how it
    counts, drops, scans and deletes what an agent keeps. Steps that touch an entry's
    content go through the agent's stores (`AgentStores`), the same on every backend."""

    entries_name: str  # what the receipt calls the erased entries ("entry files")
    cache_name: str  # one removed cache ("cache file")
    scanned: Literal["files", "rows"]  # what its byte scan reads
    history_keys: HistoryKeys | None  # the per-agent payload data keys a forget destroys

    def open_stores(self, agent_id: str) -> AgentStores: ...

    def hold(self) -> AbstractContextManager[object]:
        """One forget at a time on this store (requests and the journal)."""
        ...

    def note(self, record: dict[str, object]) -> None:
        """Append one journal record (ids only, never content)."""
        ...

    def journal_lines(self) -> list[bytes]: ...

    def place(self, agent_id: str, name: str) -> str:
        """How a receipt names `name` ("memory", "working-memory", a ledger) of the agent."""
        ...

    def vector_count(self, agent_id: str, ids: list[str]) -> int: ...

    def drop_vector(self, agent_id: str, entry_id: str) -> bool: ...

    def caches(self, agent_id: str) -> list[str]:
        """The caches quoting entries that exist now (erase removes them)."""
        ...

    def inventory(self, agent_id: str) -> list[Removal]:
        """What a whole-agent forget removes, before it does."""
        ...

    def agent_documents(self, agent_id: str) -> AgentDocuments: ...

    def agent_left(self, agent_id: str) -> list[str]:
        """Where anything of a deleted agent is still kept: the whole-agent verification."""
        ...

    def retire_keys(self, agent_id: str, receipt: ForgetReceipt) -> int:
        """After a forget of entries, the agent's data keys (its next payload gets a new
        key); how many were destroyed."""
        ...

    def destroy_keys_first(self, agent_id: str) -> int:
        """A whole-agent forget's first step: the keys that may go before the rest, so
        its histories are undecodable even if the rest is cut short; how many."""
        ...

    def erase_agent(self, agent_id: str, receipt: ForgetReceipt) -> int:
        """Everything the store keeps for the agent (its exports are gone already); how
        many more data keys were destroyed with it."""
        ...

    def left_to_operator(self, agent_id: str) -> list[str]:
        """What an operator must still do after a forget of this agent (read before it)."""
        ...

    def seal_state(self) -> bool | None:
        """Whether content was sealed at rest (None: not applicable)."""
        ...

    def raw_scan(self, stores: AgentStores, needles: list[bytes], result: Verification) -> None:
        """Every byte this store keeps for the agent, searched for the forgotten text."""
        ...
