"""`AgentMemory`: one agent's memory on the local `MemoryClient`, bound —
`memory.agent("a1")` — so an agent loop never repeats its id, and gets its context
builder and tools wired to the same stores. Its calls are `agent.api.AgentHandle`'s
(the remote client's handle has the same); the stores are local only.

    async with MemoryClient.connect() as memory:
        me = memory.agent("a1")
        await me.save("User lives in Chicago", category="user/location", source="user")
        hits = me.search("where does the user live")
        session = SessionContext.user("s1")
        messages = me.context.build(session, "What time is it for me?").messages
        tools = me.tools(session)        # OpenAI function specs: tools.specs()
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from dreamkeeper.agent.api import BoundAgent
from dreamkeeper.agent.context import ContextBuilder
from dreamkeeper.agent.session import SessionContext
from dreamkeeper.agent.stash import ToolResultStash
from dreamkeeper.agent.tools import MemoryTools
from dreamkeeper.stores.contract import ConversationStore, MemoryStore, WorkingMemoryStore

if TYPE_CHECKING:
    from dreamkeeper.agent.client import MemoryClient


class AgentMemory(BoundAgent):
    def __init__(self, client: MemoryClient, agent_id: str) -> None:
        super().__init__(client, agent_id)
        self.client = client
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
