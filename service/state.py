"""What the service's routes share: the in-process `MemoryClient` (writes through the
worker's workflows, reads straight from the store), one `AgentMemory` per agent (its
context builder remembers what each session was shown), the metrics, and the rule for
which agents this server answers for."""

from __future__ import annotations

import logging
from pathlib import Path

from fastapi import Request

from dreamkeeper.agent.client import MemoryClient
from dreamkeeper.agent.handle import AgentMemory
from dreamkeeper.agent.session import ContextKind, SessionContext
from dreamkeeper.agent.tools import MemoryTools
from dreamkeeper.core.errors import NotFound
from dreamkeeper.core.settings import ServiceSettings
from dreamkeeper.core.validation import validate_agent_id
from dreamkeeper.service.metrics import ServiceMetrics

log = logging.getLogger(__name__)


class ServiceState:
    def __init__(
        self, memory: MemoryClient, settings: ServiceSettings, metrics: ServiceMetrics
    ) -> None:
        self.memory = memory
        self.settings = settings
        self.metrics = metrics
        self._handles: dict[str, AgentMemory] = {}
        self.data_dir = Path(memory.settings.data_dir)
        self.tokens = memory.backend.tokens()
        metrics.watch_stores(
            self.agents,
            memory.store,
            embeddings=memory.embeddings is not None,
            per_agent=settings.metrics_agents,
        )

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

    def agent(self, agent_id: str, *, write: bool = False) -> AgentMemory:
        """The agent, if this server answers for it: one in DREAMKEEPER_SERVE_AGENTS when
        that is set; otherwise any valid id for writes, and an agent with a store here
        for reads (an unknown agent is refused, not answered with an empty store)."""
        agent_id = validate_agent_id(agent_id)
        if self.settings.agents and agent_id not in self.settings.agents:
            raise self.unknown_agent(agent_id)
        if not write and not self.settings.agents and not self.memory.backend.has_agent(agent_id):
            raise self.unknown_agent(agent_id)
        if agent_id not in self._handles:
            self._handles[agent_id] = self.memory.agent(agent_id)
        return self._handles[agent_id]

    def tools(self, agent_id: str, session: str, kind: str = "user") -> MemoryTools:
        handle = self.agent(agent_id, write=True)
        return handle.tools(SessionContext(session, ContextKind(kind)))

    async def close(self) -> None:
        """Nothing to release: outcomes are counted by the worker (metrics.WorkflowOutcomes)."""


async def state_of(request: Request) -> ServiceState:
    # async: a plain function dependency would run on a worker thread (a hop per request).
    return request.app.state.service
