"""A backend's contract (`StoreBackend`): what holds every tier of every agent — files
under one data directory (`stores.files`) or one PostgreSQL database
(`stores.postgres`) — and answers for the whole store: its identity, which agents it
holds, and whether it is ready for a worker. `stores.backends.open_backend` is the one
place that chooses one."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any, Protocol

from dreamkeeper.core.models import utc_now
from dreamkeeper.stores.contract.conversation import ConversationStore
from dreamkeeper.stores.contract.identity import StoreIdentity
from dreamkeeper.stores.contract.memory import MemoryStore
from dreamkeeper.stores.contract.tokens import TokenStore
from dreamkeeper.stores.contract.working import WorkingMemoryStore
from dreamkeeper.stores.vectors.embedder import Embedder

FILES = "files"
POSTGRESQL = "postgresql"


class StoreBackend(Protocol):
    kind: str  # FILES or POSTGRESQL
    location: str  # where, for messages (a database URL without its password)

    def memory(
        self,
        agent_id: str,
        *,
        embeddings: Embedder | None = None,
        clock: Callable[[], datetime] = utc_now,
    ) -> MemoryStore: ...

    def working(
        self,
        agent_id: str,
        *,
        embeddings: Embedder | None = None,
        clock: Callable[[], datetime] = utc_now,
    ) -> WorkingMemoryStore: ...

    def tokens(self) -> TokenStore:
        """Where `serve`'s access tokens are kept (`stores.tokens`)."""
        ...

    def conversations(self, agent_id: str, **options: Any) -> ConversationStore: ...

    def identity(self) -> StoreIdentity:
        """The store's identity, made on first use of a data directory."""
        ...

    def read_identity(self) -> StoreIdentity | None:
        """The identity if the store has one yet (None: nothing was ever stored)."""
        ...

    def agents(self) -> list[str]:
        """Agents with a long-term store, sorted."""
        ...

    def has_agent(self, agent_id: str) -> bool: ...

    def check_ready(self) -> None:
        """Refuse (`InvalidInput` or `SettingsError`, exit 2) with what to do unless a
        worker can use the store: a writable directory, a database at this schema."""
        ...

    def check_reachable(self) -> None:
        """Raise `DatabaseUnavailable` unless the store answers now: a database, one round
        trip; a data directory has nothing to ask."""
        ...

    def failure(self) -> str | None:
        """Why the store's last attempt to reach it failed, without asking it again (None:
        it did not, or there is nothing to reach)."""
        ...

    def holds_agent_keys(self) -> bool:
        """Whether any agent's payload data key is kept here: some process of this
        deployment sealed payloads (client.agent_keys), so they must be sealed."""
        ...
