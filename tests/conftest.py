from __future__ import annotations

import pytest

from dreamkeeper.stores.memory_store import FileMemoryStore
from tests.helpers import FakeClock


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def store(tmp_path, clock) -> FileMemoryStore:
    return FileMemoryStore(tmp_path, "agent-1", clock=clock)
