from __future__ import annotations

import pytest

from dreamkeeper.agent.context import ContextBuilder
from dreamkeeper.stores.files.conversation_memory import FileConversationStore
from dreamkeeper.stores.files.working_memory import FileWorkingMemoryStore


@pytest.fixture
def working(tmp_path, clock) -> FileWorkingMemoryStore:
    return FileWorkingMemoryStore(tmp_path, "agent-1", clock=clock)


@pytest.fixture
def conversations(tmp_path, clock) -> FileConversationStore:
    return FileConversationStore(tmp_path, "agent-1", clock=clock)


@pytest.fixture
def builder(store, working, conversations) -> ContextBuilder:
    return ContextBuilder(store, working, conversations)
