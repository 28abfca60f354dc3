"""What the service's routes share: the in-process `MemoryClient` (writes through the
worker's workflows, reads straight from the store), one `AgentMemory` per agent (its
context builder remembers what each session was shown), the metrics, and the rule for
which agents this server answers for.

Reads never create an agent: a read for an agent with no store here is the unknown-agent
answer, and opens nothing. The open agents are a bounded LRU
(DREAMKEEPER_SERVE_MAX_OPEN_AGENTS): the least recently used is closed, its stores
released from the `MemoryClient` too, so serve's memory stays flat however many agents
callers name."""

from __future__ import annotations

import logging
from collections import OrderedDict
from pathlib import Path

from fastapi import Request

from dreamkeeper.agent.client import MemoryClient
from dreamkeeper.agent.handle import AgentMemory
from dreamkeeper.agent.session import ContextKind, SessionContext
from dreamkeeper.agent.tools import MemoryTools
from dreamkeeper.core.errors import DreamkeeperError, NotFound, Unavailable
from dreamkeeper.core.settings import ServiceSettings
from dreamkeeper.core.validation import validate_agent_id
from dreamkeeper.service.metrics import ServiceMetrics
from dreamkeeper.stores.contract.backend import POSTGRESQL
from dreamkeeper.stores.contract.tokens import TokenStoreDamaged

log = logging.getLogger(__name__)


class ServiceState:
    def __init__(
        self, memory: MemoryClient, settings: ServiceSettings, metrics: ServiceMetrics
    ) -> None:
        self.memory = memory
        self.settings = settings
        self.metrics = metrics
        self._handles: OrderedDict[str, AgentMemory] = OrderedDict()
        self.data_dir = Path(memory.settings.data_dir)
        self.tokens = memory.backend.tokens()
        damage = self.tokens.snapshot().damage
        if damage is not None:
            raise TokenStoreDamaged(
                f"serve does not start while its access tokens are damaged: {damage}. Repair "
                f"{self.tokens.where} or restore it from a backup (see docs/service.md, "
                '"Access tokens")'
            )
        metrics.watch_stores(
            self.open_agent_ids,
            memory.store,
            embeddings=memory.embeddings is not None,
            per_agent=settings.metrics_agents,
        )
        if memory.backend.kind == POSTGRESQL:
            metrics.watch_database(memory.backend.check_reachable)

    def database_state(self) -> str | None:
        """ "up" or "down" on a database (None on files): how its last use went, without
        a round trip while it works; while it is down, asked again (a refused connection
        answers at once), so the first answer after an outage says "up"."""
        backend = self.memory.backend
        if backend.kind != POSTGRESQL:
            return None
        if backend.failure() is not None:
            try:
                backend.check_reachable()
            except DreamkeeperError:
                return "down"
        return "down" if backend.failure() is not None else "up"

    def check_ready(self) -> None:
        """`Unavailable` (503) unless the store answers now. Its text names no host, user
        or cause: the readiness probe answers without a token; an operator finds those in
        the server's log and in the answers to authorized requests."""
        try:
            self.memory.backend.check_reachable()
        except DreamkeeperError:
            raise Unavailable(
                "the store's database does not answer: requests that need it are answered "
                "503 until it does"
            ) from None

    def agents(self) -> list[str]:
        found = self.memory.backend.agents()
        if self.settings.agents:
            return [a for a in found if a in self.settings.agents]
        return found

    def unknown_agent(self, agent_id: str) -> NotFound:
        """The one answer for an agent this server does not answer for, has no store
        for, or the caller's token does not reach (the guard sends it for the last):
        the same text in every case, so it tells a caller nothing about which. It names
        no other agent: it may go to a token scoped to one."""
        return NotFound(f"unknown agent {agent_id!r}: it has no store here yet")

    def answers_for(self, agent_id: str) -> str:
        """The valid id of an agent this server answers for (any, unless
        DREAMKEEPER_SERVE_AGENTS names them), without opening anything of it."""
        agent_id = validate_agent_id(agent_id)
        if self.settings.agents and agent_id not in self.settings.agents:
            raise self.unknown_agent(agent_id)
        return agent_id

    def agent(self, agent_id: str, *, write: bool = False) -> AgentMemory:
        """The agent, if this server answers for it (`answers_for`): for a write any such
        agent (the write creates it), for a read only one with a store here: an unknown
        agent is refused, not answered with an empty store, and nothing is opened for it."""
        agent_id = self.answers_for(agent_id)
        if not write and not self.memory.backend.has_agent(agent_id):
            raise self.unknown_agent(agent_id)
        handle = self._handles.get(agent_id)
        if handle is not None:
            self._handles.move_to_end(agent_id)
            return handle
        handle = self._handles[agent_id] = self.memory.agent(agent_id)
        while len(self._handles) > self.settings.max_open_agents:
            closed, _ = self._handles.popitem(last=False)
            self.memory.release(closed)
        return handle

    def release(self, agent_id: str) -> None:
        """Close the agent here (a whole-agent forget): its next use opens it afresh."""
        self._handles.pop(agent_id, None)
        self.memory.release(agent_id)

    @property
    def open_agents(self) -> int:
        return len(self._handles)

    def open_agent_ids(self) -> list[str]:
        """The agents open here now, the store-size metrics' agents: a scrape reads what
        serve holds and opens nothing."""
        return list(self._handles)

    def tools(
        self, agent_id: str, session: str, kind: str = "user", *, write: bool = True
    ) -> MemoryTools:
        """The memory tools of one session; `write=False` for a read-only tool, which, as
        every read, needs the agent to have a store here."""
        handle = self.agent(agent_id, write=write)
        return handle.tools(SessionContext(session, ContextKind(kind)))

    async def close(self) -> None:
        """Nothing to release: outcomes are counted by the worker (metrics.WorkflowOutcomes)."""


async def state_of(request: Request) -> ServiceState:
    # async: a plain function dependency would run on a worker thread (a hop per request).
    return request.app.state.service
