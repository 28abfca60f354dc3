"""Which agents have a store: the dream sweep's work list."""

from __future__ import annotations

from pathlib import Path

from temporalio import activity

from dreamkeeper.core.errors import InvalidInput
from dreamkeeper.core.validation import validate_agent_id


class AgentActivities:
    def __init__(self, data_dir: Path) -> None:
        self._agents_dir = Path(data_dir) / "agents"

    @activity.defn(name="list_agents")
    def list_agents(self) -> list[str]:
        if not self._agents_dir.is_dir():
            return []
        agents = []
        for child in sorted(self._agents_dir.iterdir()):
            try:
                validate_agent_id(child.name)
            except InvalidInput:
                activity.logger.warning("skipping %s: not a valid agent id", child)
                continue
            if (child / "memory").is_dir():
                agents.append(child.name)
        return agents
