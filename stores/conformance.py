"""Each backend implements the store contract: each function below only type-checks
(`scripts/typecheck.sh`, in CI) while the class has every member of its Protocol with
compatible types. `tests/stores/test_contract.py` checks the same at runtime. Both wings
are named here, and only here besides the switch (`stores.backends`): this module is
read by the type checker, never imported by the product."""

from __future__ import annotations

from dreamkeeper.stores.contract import ConversationStore, MemoryStore, WorkingMemoryStore
from dreamkeeper.stores.contract.backend import ExportsAgentKeys, ImportsAgentKeys, StoreBackend
from dreamkeeper.stores.contract.documents import AgentDocuments
from dreamkeeper.stores.files.backend import FileBackend
from dreamkeeper.stores.files.conversation_memory import FileConversationStore
from dreamkeeper.stores.files.documents import FileDocuments
from dreamkeeper.stores.files.memory_store import FileMemoryStore
from dreamkeeper.stores.files.working_memory import FileWorkingMemoryStore
from dreamkeeper.stores.postgres.backend import PostgresBackend
from dreamkeeper.stores.postgres.conversation_memory import PostgresConversationStore
from dreamkeeper.stores.postgres.documents import PostgresDocuments
from dreamkeeper.stores.postgres.memory_store import PostgresMemoryStore
from dreamkeeper.stores.postgres.working_memory import PostgresWorkingMemoryStore


def long_term(store: FileMemoryStore) -> MemoryStore:
    return store


def long_term_postgres(store: PostgresMemoryStore) -> MemoryStore:
    return store


def working(store: FileWorkingMemoryStore) -> WorkingMemoryStore:
    return store


def conversations(store: FileConversationStore) -> ConversationStore:
    return store


def file_documents(documents: FileDocuments) -> AgentDocuments:
    return documents


def postgres_documents(documents: PostgresDocuments) -> AgentDocuments:
    return documents


def postgres_working(store: PostgresWorkingMemoryStore) -> WorkingMemoryStore:
    return store


def postgres_conversations(store: PostgresConversationStore) -> ConversationStore:
    return store


def file_backend(backend: FileBackend) -> StoreBackend:
    return backend


def postgres_backend(backend: PostgresBackend) -> StoreBackend:
    return backend


def file_keys_leave(backend: FileBackend) -> ExportsAgentKeys:
    return backend


def database_keys_arrive(backend: PostgresBackend) -> ImportsAgentKeys:
    return backend
