from __future__ import annotations

import pytest

from dreamkeeper.agent.context import ContextBuilder
from dreamkeeper.stores.conversation_memory import ConversationMemory
from dreamkeeper.stores.working_memory import WorkingMemoryStore


@pytest.fixture
def working(tmp_path, clock) -> WorkingMemoryStore:
    return WorkingMemoryStore(tmp_path, "agent-1", clock=clock)


@pytest.fixture
def conversations(tmp_path, clock) -> ConversationMemory:
    return ConversationMemory(tmp_path, "agent-1", clock=clock)


@pytest.fixture
def builder(store, working, conversations) -> ContextBuilder:
    return ContextBuilder(store, working, conversations)
