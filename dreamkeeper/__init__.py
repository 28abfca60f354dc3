"""Dreamkeeper: long-term, working and conversation memory for LLM agents, maintained
by durable Temporal workflows — and never losing a memory by mistake.

What an agent needs is here::

    from dreamkeeper import MemoryClient, SessionContext

    memory = await MemoryClient.connect()          # settings from the environment
    me = memory.agent("a1")
    await me.save("User lives in Chicago", source="user")
    hits = me.search("where does the user live")

Importing this package loads no workflow, activity or worker code (the worker lives in
`dreamkeeper.worker`; test doubles in `dreamkeeper.testing`).
"""

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from dreamkeeper.agent.client import MemoryClient, entry_id_for
    from dreamkeeper.agent.context import ContextBuilder, TurnContext
    from dreamkeeper.agent.handle import AgentMemory
    from dreamkeeper.agent.remote import RemoteMemoryClient, connect_memory
    from dreamkeeper.agent.session import ContextKind, SessionContext
    from dreamkeeper.agent.stash import ToolResultStash
    from dreamkeeper.agent.tools import MemoryTools, tool_specs
    from dreamkeeper.core.errors import (
        Conflict,
        DreamkeeperError,
        InvalidInput,
        NotFound,
        SettingsError,
        StoreMismatch,
        Unavailable,
    )
    from dreamkeeper.core.models import MemoryEntry
    from dreamkeeper.core.settings import Settings, load_settings
    from dreamkeeper.stores.search.query import SearchHit

# Loaded on first use (PEP 562): `import dreamkeeper` costs nothing — the workflow
# sandbox imports this package for every workflow it runs — and `from dreamkeeper import
# MemoryClient` loads the agent side only.
_EXPORTS = {
    "AgentMemory": "dreamkeeper.agent.handle",
    "Conflict": "dreamkeeper.core.errors",
    "ContextBuilder": "dreamkeeper.agent.context",
    "ContextKind": "dreamkeeper.agent.session",
    "DreamkeeperError": "dreamkeeper.core.errors",
    "InvalidInput": "dreamkeeper.core.errors",
    "MemoryClient": "dreamkeeper.agent.client",
    "MemoryEntry": "dreamkeeper.core.models",
    "MemoryTools": "dreamkeeper.agent.tools",
    "NotFound": "dreamkeeper.core.errors",
    "RemoteMemoryClient": "dreamkeeper.agent.remote",
    "SearchHit": "dreamkeeper.stores.search.query",
    "SessionContext": "dreamkeeper.agent.session",
    "Settings": "dreamkeeper.core.settings",
    "SettingsError": "dreamkeeper.core.errors",
    "StoreMismatch": "dreamkeeper.core.errors",
    "ToolResultStash": "dreamkeeper.agent.stash",
    "TurnContext": "dreamkeeper.agent.context",
    "Unavailable": "dreamkeeper.core.errors",
    "connect_memory": "dreamkeeper.agent.remote",
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
    "AgentMemory",
    "Conflict",
    "ContextBuilder",
    "ContextKind",
    "DreamkeeperError",
    "InvalidInput",
    "MemoryClient",
    "MemoryEntry",
    "MemoryTools",
    "NotFound",
    "RemoteMemoryClient",
    "SearchHit",
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
