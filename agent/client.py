"""`MemoryClient`: what an agent process uses. Writes start workflows; reads go straight
to the store (no workflow round trip on the hot path). With an embedding model
configured, its stores search hybrid (the query is embedded here; entries' vectors are
made by the worker)."""

from __future__ import annotations

from datetime import datetime

from temporalio.client import Client, WithStartWorkflowOperation, WorkflowHandle
from temporalio.common import WorkflowIDConflictPolicy

from dreamkeeper.activities.dream_payloads import DreamInput, DreamResult
from dreamkeeper.activities.payloads import (
    EntryOpInput,
    EntryOpResult,
    SaveAck,
    SaveInput,
)
from dreamkeeper.stores.conversation_memory import ConversationMemory
from dreamkeeper.stores.embedding_client import (
    EmbeddingClient,
    EmbeddingSettings,
    embedding_client,
)
from dreamkeeper.stores.memory_store import FileMemoryStore
from dreamkeeper.stores.search import DEFAULT_LIMIT, SearchHit, search
from dreamkeeper.stores.validation import (
    new_entry_id,
    validate_agent_id,
    validate_category,
    validate_content,
    validate_entry_id,
    validate_importance,
    validate_tags,
)
from dreamkeeper.stores.working_memory import WorkingMemoryStore
from dreamkeeper.worker.runtime import connect
from dreamkeeper.worker.settings import StoreSettings, TemporalSettings, embedding_settings
from dreamkeeper.workflows.dream import Dream, dream_workflow_id
from dreamkeeper.workflows.entry_ops import ArchiveMemory, RestoreMemory, UpdateMemoryImportance
from dreamkeeper.workflows.observability import tagged
from dreamkeeper.workflows.save import SaveMemory, save_workflow_id


class MemoryClient:
    def __init__(
        self,
        client: Client,
        store: StoreSettings,
        task_queue: str,
        embeddings: EmbeddingClient | None = None,
    ) -> None:
        self.client = client
        self.settings = store
        self.task_queue = task_queue
        self.embeddings = embeddings
        self._stores: dict[str, FileMemoryStore] = {}
        self._working: dict[str, WorkingMemoryStore] = {}
        self._conversations: dict[str, ConversationMemory] = {}

    @classmethod
    async def connect(
        cls,
        store: StoreSettings | None = None,
        temporal: TemporalSettings | None = None,
        embeddings: EmbeddingSettings | None = None,
    ) -> MemoryClient:
        """Settings default to the environment (DREAMKEEPER_*, TEMPORAL_*)."""
        store = store or StoreSettings.from_env()
        temporal = temporal or TemporalSettings.from_env()
        client = await connect(temporal)
        embeddings = embeddings or embedding_settings()
        return cls(client, store, temporal.task_queue, embedding_client(embeddings))

    def store(self, agent_id: str) -> FileMemoryStore:
        """The agent's long-term memory, opened once and kept current by every read."""
        if agent_id not in self._stores:
            self._stores[agent_id] = FileMemoryStore(
                self.settings.data_dir, agent_id, embeddings=self.embeddings
            )
        return self._stores[agent_id]

    def working_memory(self, agent_id: str) -> WorkingMemoryStore:
        if agent_id not in self._working:
            self._working[agent_id] = WorkingMemoryStore(
                self.settings.data_dir, agent_id, embeddings=self.embeddings
            )
        return self._working[agent_id]

    def conversations(self, agent_id: str) -> ConversationMemory:
        if agent_id not in self._conversations:
            self._conversations[agent_id] = ConversationMemory(self.settings.data_dir, agent_id)
        return self._conversations[agent_id]

    def search_memory(
        self,
        agent_id: str,
        query: str | None = None,
        *,
        category: str | None = None,
        tags: list[str] | None = None,
        created_after: datetime | str | None = None,
        created_before: datetime | str | None = None,
        limit: int = DEFAULT_LIMIT,
    ) -> list[SearchHit]:
        """Both created bounds are inclusive (ISO 8601 text or datetimes; naive is UTC)."""
        return search(self.store(agent_id), query, category=category, tags=tags, limit=limit,
                      created_after=created_after, created_before=created_before)  # fmt: skip

    async def _entry_op(self, workflow, op: str, inp: EntryOpInput) -> EntryOpResult:
        # Validated here too, so bad input never reaches a workflow history.
        validate_agent_id(inp.agent_id)
        validate_entry_id(inp.entry_id)
        return await self.client.execute_workflow(
            workflow,
            inp,
            id=f"{op}-{inp.agent_id}-{inp.entry_id}",
            task_queue=self.task_queue,
            id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
            static_summary=f"{op} memory {inp.entry_id} of agent {inp.agent_id}",
            search_attributes=tagged(inp.agent_id, op),
        )

    async def delete_memory(self, agent_id: str, entry_id: str) -> EntryOpResult:
        """Archive (recoverable until purged)."""
        inp = EntryOpInput(agent_id=agent_id, entry_id=entry_id)
        return await self._entry_op(ArchiveMemory.run, "archive", inp)

    async def restore_memory(self, agent_id: str, entry_id: str) -> EntryOpResult:
        inp = EntryOpInput(agent_id=agent_id, entry_id=entry_id)
        return await self._entry_op(RestoreMemory.run, "restore", inp)

    async def update_memory_importance(
        self, agent_id: str, entry_id: str, importance: float
    ) -> EntryOpResult:
        inp = EntryOpInput(
            agent_id=agent_id, entry_id=entry_id, importance=validate_importance(importance)
        )
        return await self._entry_op(UpdateMemoryImportance.run, "importance", inp)

    async def save_memory(
        self,
        agent_id: str,
        content: str,
        *,
        category: str | None = None,
        tags: list[str] | None = None,
        source: str | None = None,
        importance: float = 0.5,
    ) -> SaveAck:
        """Returns once the raw original is durable (and searchable); enrichment and
        dedup go on in the SaveMemory workflow."""
        validate_agent_id(agent_id)
        inp = SaveInput(
            agent_id=agent_id, entry_id=new_entry_id(), content=validate_content(content),
            category=validate_category(category), tags=validate_tags(tags),
            source=source, importance=validate_importance(importance),
        )  # fmt: skip
        return await self.client.execute_update_with_start_workflow(
            SaveMemory.save,
            start_workflow_operation=WithStartWorkflowOperation(
                SaveMemory.run,
                inp,
                id=save_workflow_id(agent_id, inp.entry_id),
                id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
                task_queue=self.task_queue,
                static_summary=f"save memory {inp.entry_id} for agent {agent_id}",
                search_attributes=tagged(agent_id, "save"),
            ),
        )

    async def run_dream(self, agent_id: str, *, wait: bool = True) -> DreamResult | WorkflowHandle:
        """Start (or join, if one is running) the agent's dream cycle."""
        validate_agent_id(agent_id)
        handle = await self.client.start_workflow(
            Dream.run,
            DreamInput(agent_id=agent_id),
            id=dream_workflow_id(agent_id),
            task_queue=self.task_queue,
            id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
            static_summary=f"dream cycle for agent {agent_id}",
            search_attributes=tagged(agent_id, "dream"),
        )
        return await handle.result() if wait else handle
