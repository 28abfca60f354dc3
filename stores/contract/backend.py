"""A backend's contract (`StoreBackend`): what holds every tier of every agent — files
under one data directory (`stores.files`) or one PostgreSQL database
(`stores.postgres`) — and answers for the whole store: its identity, which agents it
holds, and whether it is ready for a worker. `stores.backends.open_backend` is the one
place that chooses one."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Protocol, TypedDict, Unpack, runtime_checkable

from dreamkeeper.client.agent_keys import AgentKeyStore, WrappedKey, Wrapping
from dreamkeeper.stores.contract.conversation import ConversationStore
from dreamkeeper.stores.contract.documents import AgentDocuments
from dreamkeeper.stores.contract.forgetting import Forgetter, HistoryKeys
from dreamkeeper.stores.contract.identity import StoreIdentity
from dreamkeeper.stores.contract.idle_marks import IdleMarks
from dreamkeeper.stores.contract.memory import MemoryStore
from dreamkeeper.stores.contract.tokens import TokenStore
from dreamkeeper.stores.contract.working import WorkingMemoryStore
from dreamkeeper.stores.vectors.embedder import Embedder

FILES = "files"
POSTGRESQL = "postgresql"


class TierOptions(TypedDict, total=False):
    """What an agent's long-term or working store is opened with, besides the agent:
    `embeddings`, the embedding model (none: keyword search only), and `clock`, the time
    the store goes by (`core.models.utc_now` unless a test holds it)."""

    embeddings: Embedder | None
    clock: Callable[[], datetime]


class StoreBackend(Protocol):
    """Every tier of every agent on one backend, and the store as a whole."""

    kind: str  # FILES or POSTGRESQL
    location: str  # where, for messages (a database URL without its password)

    # -- one agent's tiers -------------------------------------------------------------

    def memory(self, agent_id: str, **options: Unpack[TierOptions]) -> MemoryStore: ...

    def working(self, agent_id: str, **options: Unpack[TierOptions]) -> WorkingMemoryStore: ...

    def conversations(self, agent_id: str, **options: Any) -> ConversationStore: ...

    def documents(self, agent_id: str) -> AgentDocuments:
        """The agent's documents: the dream state (ledgers, settled clusters, the
        approval setting), the coverage vocabulary and the conversation log — the same
        medium as `memory(agent_id).documents`, without opening the long-term store."""
        ...

    # -- what the whole store keeps ----------------------------------------------------

    def idle_marks(self) -> IdleMarks:
        """Where the dream sweep's idle marks are kept (`stores.dream_state.workload`)."""
        ...

    def agent_keys(self, wrapping: Wrapping, data_dir: Path | None) -> AgentKeyStore:
        """The per-agent payload data keys (`client.agent_keys`), wrapped by `wrapping`;
        a codec takes this method as its key store (`PayloadKeys.key_store`). `data_dir`:
        the process's data directory (where a database's keyring is kept by default)."""
        ...

    def tokens(self) -> TokenStore:
        """Where `serve`'s access tokens are kept (`stores.contract.tokens`)."""
        ...

    def forgetting(self, *, history_keys: HistoryKeys | None = None) -> Forgetter:
        """The forget runner of this store (`stores.forget`): `history_keys`, the
        process's per-agent payload data keys, destroyed by a forget (a database that
        seals content at rest uses its own, which seal the rows too)."""
        ...

    # -- the store as a whole ----------------------------------------------------------

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


@dataclass
class AgentKeyExport:
    """A store's payload data keys as stored (wrapped: no key in clear), for `migrate`:
    per agent its key, the ids of destroyed keys, and what could not be read."""

    keys: list[tuple[str, WrappedKey]] = field(default_factory=list)
    destroyed: set[str] = field(default_factory=set)
    unreadable: list[str] = field(default_factory=list)


@runtime_checkable
class ExportsAgentKeys(Protocol):
    """A backend whose data keys `migrate` can carry elsewhere (a data directory: its
    keys are wrapped by the payload key itself)."""

    def export_agent_keys(self) -> AgentKeyExport: ...


@runtime_checkable
class ImportsAgentKeys(Protocol):
    """A backend that takes data keys carried from elsewhere, as stored (a database)."""

    def import_destroyed_keys(self, key_ids: set[str]) -> int:
        """List these key ids as destroyed; how many were new here."""
        ...

    def import_agent_key(self, agent_id: str, stored: WrappedKey) -> bool:
        """Keep the agent's key as stored, unless it is here or destroyed; True when new."""
        ...

    def held_agent_keys(self) -> tuple[set[tuple[str, str]], set[str]]:
        """(agent, key id) of every key held, and the ids listed as destroyed."""
        ...
