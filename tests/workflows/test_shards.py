"""Agents sharded across two workers — two task queues, two data directories — with one
client routing by agent id: every save, search and dream of an agent lands on its own
host, and a call routed by another map is refused by the worker."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from concurrent.futures import ThreadPoolExecutor

import pytest

from dreamkeeper.agent.client import MemoryClient
from dreamkeeper.core.errors import StoreMismatch
from dreamkeeper.core.settings import EmbeddingSettings, LLMSettings, StoreSettings
from dreamkeeper.core.shards import ShardMap
from dreamkeeper.stores.files.identity import ensure_identity
from dreamkeeper.stores.files.memory_store import FileMemoryStore
from dreamkeeper.worker.temporal_worker import build_worker


@contextlib.asynccontextmanager
async def _shard_workers(client, shards: ShardMap, dirs: dict):
    pools, workers = [], []
    for name, queue in shards.shards.items():
        ensure_identity(dirs[name])
        pool = ThreadPoolExecutor(max_workers=4)
        pools.append(pool)
        workers.append(
            build_worker(
                client,
                StoreSettings(data_dir=dirs[name]),
                task_queue=queue,
                executor=pool,
                llm=LLMSettings(),
                embeddings=EmbeddingSettings(),
                shard=(shards, name),
            )
        )
    running = [asyncio.create_task(w.run()) for w in workers]
    try:
        yield
    finally:
        for w in workers:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(w.shutdown(), timeout=60)
        for task in running:
            with contextlib.suppress(BaseException):
                await task
        for pool in pools:
            pool.shutdown()


@pytest.fixture
def sharded(tmp_path):
    tag = uuid.uuid4().hex[:6]
    shards = ShardMap(
        {"host-a": f"dk-a-{tag}", "host-b": f"dk-b-{tag}"},
        {f"pinned-{tag}": "host-b"},
    )
    dirs = {"host-a": tmp_path / "a", "host-b": tmp_path / "b"}
    agents = [f"agent-{tag}-{i}" for i in range(9)] + [f"pinned-{tag}"]
    return shards, dirs, agents, tmp_path / "client"


async def test_each_agents_saves_searches_and_dreams_land_on_its_own_host(temporal_env, sharded):
    shards, dirs, agents, client_dir = sharded
    owners = {a: shards.shard_for(a) for a in agents}
    assert set(owners.values()) == {"host-a", "host-b"}  # ten agents use both hosts
    assert owners[agents[-1]] == "host-b"  # the pin wins over the hash
    memory = MemoryClient(
        temporal_env.client, StoreSettings(data_dir=client_dir), "unused", shards=shards
    )
    stores = {name: ensure_identity(d).store_id for name, d in dirs.items()}
    async with _shard_workers(temporal_env.client, shards, dirs):
        for agent in agents:
            await memory.save_memory(agent, f"{agent} prefers tea over coffee")
        for agent in agents:
            found = await memory.search_on_worker(agent, "tea coffee")
            assert found.served_by == stores[owners[agent]]
            assert [h.entry.content for h in found.hits] == [f"{agent} prefers tea over coffee"]
        dreams = await asyncio.gather(*(memory.run_dream(a) for a in agents))
        assert [d.agent_id for d in dreams] == agents
    for agent in agents:
        home, other = (
            dirs[owners[agent]],
            dirs[{"host-a": "host-b", "host-b": "host-a"}[owners[agent]]],
        )
        assert len(FileMemoryStore(home, agent).entries()) == 1
        assert not (other / "agents" / agent).exists()  # nothing of it on the other host
        assert (home / "agents" / agent / "journal.jsonl").exists()
    assert not (client_dir / "agents").exists()  # the client kept no files


async def test_a_call_routed_by_another_map_is_refused_by_the_worker(temporal_env, sharded):
    shards, dirs, agents, client_dir = sharded
    on_b = next(a for a in agents if shards.shard_for(a) == "host-b")
    # The same shard names with their queues swapped: every agent goes to the other host.
    wrong = ShardMap({"host-a": shards.shards["host-b"], "host-b": shards.shards["host-a"]})
    misrouting = MemoryClient(
        temporal_env.client, StoreSettings(data_dir=client_dir), "unused", shards=wrong
    )
    assert misrouting.queue_for(on_b) == shards.shards["host-a"]
    async with _shard_workers(temporal_env.client, shards, dirs):
        with pytest.raises(StoreMismatch, match="belongs to shard 'host-b'"):
            await misrouting.save_memory(on_b, "this must not land on host a")
    assert not (dirs["host-a"] / "agents" / on_b).exists()
