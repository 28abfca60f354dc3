"""The agent-facing API, one interface for both clients: `MemoryBackend` is what a client
does for any agent by its id (`MemoryClient` on the same host as the worker,
`RemoteMemoryClient` over HTTP), `AgentHandle` what `client.agent("a1")` gives an agent
loop. `BoundAgent` implements the handle once, over either client, so an agent moves
between same-host and remote by configuration only:

    async with connect_memory() as memory:   # DREAMKEEPER_URL set: remote; unset: local
        me = memory.agent("a1")
        await me.save("User lives in Chicago", category="user/location", source="user")
        hits = me.search("where does the user live", category="user")
        plan = (await me.dream(dry_run=True)).plan

Reads are synchronous (the local client reads files); writes and dreams are async. A
client is an async context manager: leaving the block closes it (`aclose`). This
module needs only the core: the remote client imports it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Coroutine, Generator
from types import TracebackType
from typing import Any, Generic, Protocol, Self, TypeVar, Unpack

from dreamkeeper.agent.session import SessionContext
from dreamkeeper.core.agent_api import SaveOptions, SearchHit, SearchOptions
from dreamkeeper.core.dream_payloads import DreamResult
from dreamkeeper.core.dream_plan import ApplyPlanResult, DreamPlan, UndoResult
from dreamkeeper.core.errors import InvalidInput
from dreamkeeper.core.models import MemoryEntry
from dreamkeeper.core.payloads import EntryOpResult, SaveAck
from dreamkeeper.core.validation import validate_agent_id


class LocalClientRequired(InvalidInput):
    """A call the memory service has no route for: it needs a `MemoryClient` where the
    worker's data directory is (connect without DREAMKEEPER_URL)."""


class Toolbox(Protocol):
    """The memory tools for one session, as an agent loop offers them to its model."""

    @property
    def names(self) -> list[str]: ...

    def specs(self) -> list[dict]: ...

    async def call(self, name: str, arguments: str | dict[str, Any] | None) -> str: ...


class AgentHandle(Protocol):
    """One agent's memory, bound: the calls an agent loop makes, without its id."""

    @property
    def agent_id(self) -> str: ...

    async def save(self, content: str, **options: Unpack[SaveOptions]) -> SaveAck:
        """Returns once the original is durable (and searchable)."""
        ...

    def search(self, query: str | None = None, **filters: Unpack[SearchOptions]) -> list[SearchHit]:
        """Ranked hits for the query; without one, the newest entries the filters admit."""
        ...

    def get(self, entry_id: str) -> MemoryEntry:
        """The entry, live or archived (`NotFound` if neither)."""
        ...

    def archived(self) -> list[MemoryEntry]: ...

    async def delete(self, entry_id: str) -> EntryOpResult:
        """Archive: hidden from search, recoverable until purged."""
        ...

    async def restore(self, entry_id: str, *, force: bool = False) -> EntryOpResult: ...

    async def set_importance(self, entry_id: str, importance: float) -> EntryOpResult: ...

    async def dream(self, *, dry_run: bool = False) -> DreamResult:
        """Run (or join) the agent's dream cycle and wait for its result. `dry_run`: change
        nothing; the result's `plan` says what a cycle would do."""
        ...

    async def apply_plan(self, plan: DreamPlan) -> ApplyPlanResult:
        """Apply a dry run's plan; each part whose entries changed since is refused."""
        ...

    async def undo_dream(self, run_id: str) -> UndoResult:
        """Undo a dream cycle (or an applied plan) by its workflow run id."""
        ...

    def tools(self, session: SessionContext) -> Toolbox: ...


class MemoryBackend(Protocol):
    """What a client does for any agent, by its id: `AgentHandle`'s calls, and the handle.
    `async with` closes it at the end of the block."""

    def agent(self, agent_id: str) -> AgentHandle: ...

    async def aclose(self) -> None:
        """Release what the client holds; idempotent."""
        ...

    async def __aenter__(self) -> Self: ...

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None: ...

    async def save_memory(
        self, agent_id: str, content: str, **options: Unpack[SaveOptions]
    ) -> SaveAck: ...

    def search_memory(
        self, agent_id: str, query: str | None = None, **filters: Unpack[SearchOptions]
    ) -> list[SearchHit]: ...

    def get_memory(self, agent_id: str, entry_id: str) -> MemoryEntry: ...

    def archived(self, agent_id: str) -> list[MemoryEntry]: ...

    async def delete_memory(self, agent_id: str, entry_id: str) -> EntryOpResult: ...

    async def restore_memory(
        self, agent_id: str, entry_id: str, *, force: bool = False
    ) -> EntryOpResult: ...

    async def update_memory_importance(
        self, agent_id: str, entry_id: str, importance: float
    ) -> EntryOpResult: ...

    async def run_dream(self, agent_id: str) -> DreamResult: ...

    async def dry_run_dream(self, agent_id: str) -> DreamResult: ...

    async def apply_dream_plan(self, plan: DreamPlan) -> ApplyPlanResult: ...

    async def undo_dream(self, agent_id: str, run_id: str) -> UndoResult: ...


class Closeable(Protocol):
    async def aclose(self) -> None: ...


ClientT = TypeVar("ClientT", bound=Closeable)


class Opening(Generic[ClientT], Awaitable[ClientT]):
    """What `connect()` returns: await it for the client (closed by the caller), or use
    it as `async with connect() as memory:`, which closes the client when the block ends,
    however it ends."""

    def __init__(self, opening: Coroutine[Any, Any, ClientT]) -> None:
        self._opening = opening
        self._client: ClientT | None = None

    def __await__(self) -> Generator[Any, None, ClientT]:
        return self._opening.__await__()

    async def __aenter__(self) -> ClientT:
        self._client = await self._opening
        return self._client

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if self._client is not None:
            client, self._client = self._client, None
            await client.aclose()


class BoundAgent:
    """`AgentHandle` over either client: each call is the client's, with this agent's id.
    A client's handle adds its `tools` (and the local one its stores)."""

    def __init__(self, client: MemoryBackend, agent_id: str) -> None:
        self._backend = client
        self._agent_id = validate_agent_id(agent_id)

    @property
    def agent_id(self) -> str:
        return self._agent_id

    async def save(self, content: str, **options: Unpack[SaveOptions]) -> SaveAck:
        return await self._backend.save_memory(self.agent_id, content, **options)

    def search(self, query: str | None = None, **filters: Unpack[SearchOptions]) -> list[SearchHit]:
        return self._backend.search_memory(self.agent_id, query, **filters)

    def get(self, entry_id: str) -> MemoryEntry:
        return self._backend.get_memory(self.agent_id, entry_id)

    def archived(self) -> list[MemoryEntry]:
        return self._backend.archived(self.agent_id)

    async def delete(self, entry_id: str) -> EntryOpResult:
        return await self._backend.delete_memory(self.agent_id, entry_id)

    async def restore(self, entry_id: str, *, force: bool = False) -> EntryOpResult:
        return await self._backend.restore_memory(self.agent_id, entry_id, force=force)

    async def set_importance(self, entry_id: str, importance: float) -> EntryOpResult:
        return await self._backend.update_memory_importance(self.agent_id, entry_id, importance)

    async def dream(self, *, dry_run: bool = False) -> DreamResult:
        if dry_run:
            return await self._backend.dry_run_dream(self.agent_id)
        return await self._backend.run_dream(self.agent_id)

    async def apply_plan(self, plan: DreamPlan) -> ApplyPlanResult:
        if plan.agent_id != self.agent_id:
            raise InvalidInput(f"the plan is for agent {plan.agent_id!r}, not {self.agent_id!r}")
        return await self._backend.apply_dream_plan(plan)

    async def undo_dream(self, run_id: str) -> UndoResult:
        return await self._backend.undo_dream(self.agent_id, run_id)
