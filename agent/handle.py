"""`AgentMemory`: one agent's memory, bound — `memory.agent("a1")` — so an agent loop
never repeats its id, and gets its context builder and tools wired to the same stores.

    memory = await MemoryClient.connect()
    me = memory.agent("a1")
    await me.save("User lives in Chicago", category="user/location", source="user")
    hits = me.search("where does the user live")
    session = SessionContext.user("s1")
    messages = me.context.build(session, "What time is it for me?").messages
    tools = me.tools(session)            # OpenAI function specs: tools.specs()
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from dreamkeeper.agent.context import ContextBuilder
from dreamkeeper.agent.session import SessionContext
from dreamkeeper.agent.stash import ToolResultStash
from dreamkeeper.agent.tools import MemoryTools
from dreamkeeper.core.dream_payloads import DreamResult
from dreamkeeper.core.payloads import EntryOpResult, SaveAck
from dreamkeeper.core.validation import validate_agent_id
from dreamkeeper.stores.contract import ConversationStore, MemoryStore, WorkingMemoryStore
from dreamkeeper.stores.search.query import SearchHit

if TYPE_CHECKING:
    from dreamkeeper.agent.client import MemoryClient


class AgentMemory:
    def __init__(self, client: MemoryClient, agent_id: str) -> None:
        self.client = client
        self.agent_id = validate_agent_id(agent_id)
        self._context: ContextBuilder | None = None

    @property
    def store(self) -> MemoryStore:
        return self.client.store(self.agent_id)

    @property
    def working(self) -> WorkingMemoryStore:
        return self.client.working_memory(self.agent_id)

    @property
    def conversations(self) -> ConversationStore:
        return self.client.conversations(self.agent_id)

    @property
    def context(self) -> ContextBuilder:
        """The per-turn context builder (one per agent: it remembers what each session
        was already shown)."""
        if self._context is None:
            self._context = ContextBuilder(self.store, self.working, self.conversations)
        return self._context

    def tools(
        self, session: SessionContext, *, stash: ToolResultStash | None = None
    ) -> MemoryTools:
        """The memory tools for one session; writes go through this client's workflows."""
        return MemoryTools(
            self.agent_id,
            session,
            memory=self.store,
            working=self.working,
            writer=self.client,
            stash=stash,
        )

    async def save(self, content: str, **options: Any) -> SaveAck:
        """`MemoryClient.save_memory` for this agent (category, tags, source, importance,
        entry_id or idempotency_key)."""
        return await self.client.save_memory(self.agent_id, content, **options)

    def search(self, query: str | None = None, **filters: Any) -> list[SearchHit]:
        return self.client.search_memory(self.agent_id, query, **filters)

    async def delete(self, entry_id: str) -> EntryOpResult:
        return await self.client.delete_memory(self.agent_id, entry_id)

    async def restore(self, entry_id: str, *, force: bool = False) -> EntryOpResult:
        return await self.client.restore_memory(self.agent_id, entry_id, force=force)

    async def set_importance(self, entry_id: str, importance: float) -> EntryOpResult:
        return await self.client.update_memory_importance(self.agent_id, entry_id, importance)

    async def dream(self) -> DreamResult:
        return await self.client.run_dream(self.agent_id)
