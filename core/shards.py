"""The shard map: which worker host (task queue) owns which agent.

Each host runs one worker on its own task queue with its own data directory, and owns
the agents the map routes to it: their files live on its disk only. Every client and
every worker reads the same map (a JSON file named by DREAMKEEPER_SHARD_MAP):

    {
      "shards": {"host-a": "dreamkeeper-a", "host-b": "dreamkeeper-b"},
      "agents": {"support-bot": "host-b"}
    }

`shards` names each shard's task queue; `agents` pins agents to shards. Every other
agent goes to the shard chosen by rendezvous hashing of its id over the shard names —
stable, no table to keep, and adding a shard moves only the agents that now hash to it
(about 1/N of them). Moving an agent is a file operation followed by a pin: stop its
traffic, copy `agents/{id}/` to the new host, pin it there, restart the workers.

A worker started with DREAMKEEPER_SHARD refuses calls for agents the map routes to
another shard (`StoreMismatch`, non-retryable): a misrouted call fails loudly instead of
creating a second, diverging store for the agent.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dreamkeeper.core.errors import InvalidInput
from dreamkeeper.core.validation import validate_agent_id

MAX_MAP_BYTES = 16 * 1_048_576


@dataclass(frozen=True)
class ShardMap:
    shards: dict[str, str]  # shard name -> task queue
    pinned: dict[str, str] = field(default_factory=dict)  # agent id -> shard name

    def __post_init__(self) -> None:
        if not self.shards:
            raise InvalidInput("a shard map needs at least one shard")
        queues = list(self.shards.values())
        if len(set(queues)) != len(queues):
            raise InvalidInput("two shards share a task queue")
        for agent, shard in self.pinned.items():
            validate_agent_id(agent)
            if shard not in self.shards:
                raise InvalidInput(f"agent {agent!r} is pinned to unknown shard {shard!r}")

    def shard_for(self, agent_id: str) -> str:
        pinned = self.pinned.get(agent_id)
        if pinned is not None:
            return pinned
        return max(self.shards, key=lambda shard: _weight(shard, agent_id))

    def task_queue_for(self, agent_id: str) -> str:
        return self.shards[self.shard_for(agent_id)]

    def shard_of_queue(self, task_queue: str) -> str | None:
        return next((s for s, q in self.shards.items() if q == task_queue), None)

    @classmethod
    def from_json(cls, raw: Any) -> ShardMap:
        if not isinstance(raw, dict) or not isinstance(raw.get("shards"), dict):
            raise InvalidInput('a shard map is {"shards": {name: task queue}, "agents": {...}}')
        shards, pinned = raw["shards"], raw.get("agents", {})
        if not isinstance(pinned, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in [*shards.items(), *pinned.items()]
        ):
            raise InvalidInput("shard names, task queues and agent ids are strings")
        return cls(dict(shards), dict(pinned))

    @classmethod
    def load(cls, path: Path) -> ShardMap:
        try:
            data = path.read_bytes()
        except OSError as exc:
            raise InvalidInput(f"shard map {path}: {exc.strerror or exc}") from None
        if len(data) > MAX_MAP_BYTES:
            raise InvalidInput(f"shard map {path}: larger than {MAX_MAP_BYTES} bytes")
        try:
            raw = json.loads(data)
        except ValueError as exc:
            raise InvalidInput(f"shard map {path}: not JSON ({exc})") from None
        return cls.from_json(raw)


def _weight(shard: str, agent_id: str) -> int:
    digest = hashlib.sha256(f"{shard}\0{agent_id}".encode()).digest()
    return int.from_bytes(digest[:8], "big")
