"""The worker's open stores: a bounded LRU (count and approximate memory), lazily opened,
never dropping a store an activity holds."""

from __future__ import annotations

from dreamkeeper.activities.stores import StoreRegistry
from dreamkeeper.stores.files.memory_store import FileMemoryStore


def _seed(tmp_path, agents: list[str], entries: int = 3) -> None:
    for agent in agents:
        store = FileMemoryStore(tmp_path, agent)
        for i in range(entries):
            store.create(f"{agent} remembers fact {i}")


def test_the_least_recently_used_stores_go_beyond_the_count(tmp_path):
    _seed(tmp_path, ["a", "b", "c"])
    registry = StoreRegistry(tmp_path, max_open=2)
    for agent in ["a", "b", "a", "c"]:
        with registry.using(agent, heartbeat=False) as store:
            assert len(store.entries()) == 3
    assert registry.open_agents() == ["a", "c"]  # b was the least recently used
    assert registry.evicted == 1


def test_a_store_is_opened_lazily_and_reopened_after_eviction(tmp_path):
    _seed(tmp_path, ["a", "b"])
    registry = StoreRegistry(tmp_path, max_open=1)
    with registry.using("a", heartbeat=False) as store:
        assert not store.loaded  # nothing read until the activity asks
        store.create("a new fact for a")
    with registry.using("b", heartbeat=False):
        pass
    assert registry.open_agents() == ["b"]
    with registry.using("a", heartbeat=False) as store:
        assert len(store.entries()) == 4  # reopened from the files: nothing lost


def test_a_store_in_use_is_never_dropped(tmp_path):
    _seed(tmp_path, ["a", "b", "c"])
    registry = StoreRegistry(tmp_path, max_open=1)
    with registry.using("a", heartbeat=False) as held:
        held.entries()
        for agent in ["b", "c"]:
            with registry.using(agent, heartbeat=False):
                pass
        assert "a" in registry.open_agents()
        held.create("still writable while the others came and went")
    assert registry.open_agents() == ["a"]  # b and c, idle, went instead


def test_the_memory_bound_drops_stores_by_their_approximate_size(tmp_path):
    _seed(tmp_path, ["a", "b", "c"], entries=200)
    size = FileMemoryStore(tmp_path, "a")
    size.entries()
    one = size.approx_bytes()
    registry = StoreRegistry(tmp_path, max_open=100, max_memory_mb=1)
    registry.max_bytes = int(one * 2.5)  # room for two loaded stores, not three
    for agent in ["a", "b", "c"]:
        with registry.using(agent, heartbeat=False) as store:
            store.entries()
    assert registry.open_agents() == ["b", "c"]
    assert registry.approx_bytes() <= registry.max_bytes
