"""Dreamkeeper: long-term, working and conversation memory for LLM agents, maintained
by durable Temporal workflows — and never losing a memory by mistake.

What an agent needs is here::

    from dreamkeeper import SessionContext, connect_memory

    async with connect_memory() as memory:  # DREAMKEEPER_URL: a serve; else MemoryClient
        me = memory.agent("a1")             # an AgentHandle, the same calls either way
        await me.save("User lives in Chicago", source="user")
        hits = me.search("where does the user live")

Importing this package loads no workflow, activity or worker code (the worker lives in
`dreamkeeper.worker`; test doubles in `dreamkeeper.testing`).
"""

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from dreamkeeper.agent.api import AgentHandle, LocalClientRequired, MemoryBackend
    from dreamkeeper.agent.client import MemoryClient, entry_id_for
    from dreamkeeper.agent.connect import connect_memory
    from dreamkeeper.agent.context import ContextBuilder, TurnContext
    from dreamkeeper.agent.handle import AgentMemory
    from dreamkeeper.agent.remote import RemoteMemoryClient
    from dreamkeeper.agent.session import ContextKind, SessionContext
    from dreamkeeper.agent.stash import ToolResultStash
    from dreamkeeper.agent.tools import MemoryTools, tool_specs
    from dreamkeeper.core.agent_api import SaveOptions, SearchHit, SearchOptions
    from dreamkeeper.core.errors import (
        Conflict,
        DreamkeeperError,
        InvalidInput,
        NotFound,
        ReplaceRefused,
        SettingsError,
        StoreMismatch,
        Unavailable,
    )
    from dreamkeeper.core.models import MemoryEntry
    from dreamkeeper.core.settings import Settings, load_settings

# Loaded on first use (PEP 562): `import dreamkeeper` costs nothing — the workflow
# sandbox imports this package for every workflow it runs — and `from dreamkeeper import
# MemoryClient` loads the agent side only.
_EXPORTS = {
    "AgentHandle": "dreamkeeper.agent.api",
    "AgentMemory": "dreamkeeper.agent.handle",
    "Conflict": "dreamkeeper.core.errors",
    "ContextBuilder": "dreamkeeper.agent.context",
    "ContextKind": "dreamkeeper.agent.session",
    "DreamkeeperError": "dreamkeeper.core.errors",
    "InvalidInput": "dreamkeeper.core.errors",
    "LocalClientRequired": "dreamkeeper.agent.api",
    "MemoryBackend": "dreamkeeper.agent.api",
    "MemoryClient": "dreamkeeper.agent.client",
    "MemoryEntry": "dreamkeeper.core.models",
    "MemoryTools": "dreamkeeper.agent.tools",
    "NotFound": "dreamkeeper.core.errors",
    "RemoteMemoryClient": "dreamkeeper.agent.remote",
    "ReplaceRefused": "dreamkeeper.core.errors",
    "SaveOptions": "dreamkeeper.core.agent_api",
    "SearchHit": "dreamkeeper.core.agent_api",
    "SearchOptions": "dreamkeeper.core.agent_api",
    "SessionContext": "dreamkeeper.agent.session",
    "Settings": "dreamkeeper.core.settings",
    "SettingsError": "dreamkeeper.core.errors",
    "StoreMismatch": "dreamkeeper.core.errors",
    "ToolResultStash": "dreamkeeper.agent.stash",
    "TurnContext": "dreamkeeper.agent.context",
    "Unavailable": "dreamkeeper.core.errors",
    "connect_memory": "dreamkeeper.agent.connect",
    "entry_id_for": "dreamkeeper.agent.client",
    "load_settings": "dreamkeeper.core.settings",
    "tool_specs": "dreamkeeper.agent.tools",
}


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'dreamkeeper' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)


__all__ = [
    "AgentHandle",
    "AgentMemory",
    "Conflict",
    "ContextBuilder",
    "ContextKind",
    "DreamkeeperError",
    "InvalidInput",
    "LocalClientRequired",
    "MemoryBackend",
    "MemoryClient",
    "MemoryEntry",
    "MemoryTools",
    "NotFound",
    "RemoteMemoryClient",
    "ReplaceRefused",
    "SaveOptions",
    "SearchHit",
    "SearchOptions",
    "SessionContext",
    "Settings",
    "SettingsError",
    "StoreMismatch",
    "ToolResultStash",
    "TurnContext",
    "Unavailable",
    "connect_memory",
    "entry_id_for",
    "load_settings",
    "tool_specs",
]
