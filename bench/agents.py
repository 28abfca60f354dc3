"""Many agents on one worker: 1,000 agents of 200 entries each (by default) hosted by one
in-process worker against the dev server.

    .venv/bin/python bench/agents.py [--agents 1000] [--entries 200] [--parallelism 8]

Prints, in one run:
  - the time to write the stores (once; kept under bench/.data/);
  - a search on a cold agent (its store not open in the worker): open + first search,
    p50/max over 20 agents, and the same search once the store is open;
  - a no-LLM dream sweep over every agent (DreamSweep, `--parallelism` dreams at once):
    wall time, dreams/s;
  - the worker process's peak RSS, and how many stores its LRU kept open (with their
    approximate size) against DREAMKEEPER_MAX_OPEN_STORES / _MAX_STORE_MEMORY_MB.
Targets: sweep <= 5 minutes, RSS <= 1.5 GB.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import resource
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from search import _vocabulary, _zipf_weights
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.testing import WorkflowEnvironment

from dreamkeeper.activities.stores import StoreRegistry
from dreamkeeper.client.attributes import SEARCH_ATTRIBUTES
from dreamkeeper.core.payloads import SweepInput
from dreamkeeper.core.settings import EmbeddingSettings, LLMSettings, StoreSettings, WorkerSettings
from dreamkeeper.stores.longterm.memory_store import FileMemoryStore, NewEntry
from dreamkeeper.stores.search.query import search
from dreamkeeper.worker.temporal_worker import build_worker, worker_activities
from dreamkeeper.workflows.sweep import DreamSweep

DATA = Path(__file__).resolve().parent / ".data"


def rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def build(root: Path, agents: int, entries: int) -> float:
    done = root / ".complete"
    if done.exists():
        return 0.0
    rng = random.Random(7)
    vocab = _vocabulary(rng, 5_000)
    weights = _zipf_weights(len(vocab))
    t0 = time.perf_counter()
    for a in range(agents):
        store = FileMemoryStore(root, f"agent-{a:04d}", snapshots=False)
        store.create_many(
            NewEntry(
                " ".join(rng.choices(vocab, weights, k=rng.randint(10, 40))).capitalize() + ".",
                category=rng.choice(["people", "projects/work", "preferences", None]),
                importance=round(rng.uniform(0.1, 0.9), 2),
            )
            for _ in range(entries)
        )
        if a % 100 == 99:
            print(f"  wrote {a + 1} agents ({time.perf_counter() - t0:.0f}s)", flush=True)
    done.write_text("ok")
    return time.perf_counter() - t0


async def main(args: argparse.Namespace) -> None:
    root = DATA / f"agents-{args.agents}x{args.entries}"
    took = build(root, args.agents, args.entries)
    print(
        f"{args.agents} agents x {args.entries} entries under {root}"
        + (f" (written in {took:.0f}s)" if took else " (already written)")
    )
    temporal = Path(sys.executable).parent / "temporal"
    env = await WorkflowEnvironment.start_local(
        dev_server_existing_path=str(temporal),
        data_converter=pydantic_data_converter,
        search_attributes=SEARCH_ATTRIBUTES,
        dev_server_extra_args=["--headless"],
    )
    tuning = WorkerSettings()
    settings = StoreSettings(data_dir=root)
    try:
        with ThreadPoolExecutor(tuning.activity_threads) as pool:
            registry = StoreRegistry(
                root,
                None,
                max_open=tuning.max_open_stores,
                max_memory_mb=tuning.max_store_memory_mb,
            )
            activities = worker_activities(
                settings, LLMSettings(), EmbeddingSettings(), tuning, stores=registry
            )
            worker = build_worker(
                env.client,
                settings,
                task_queue="bench-agents",
                executor=pool,
                activities=activities,
                tuning=tuning,
            )
            async with worker:
                base = rss_mb()
                cold, warm = [], []
                for a in range(0, args.agents, max(1, args.agents // 20))[:20]:
                    agent = f"agent-{a:04d}"
                    t = time.perf_counter()
                    with registry.using(agent, heartbeat=False) as store:
                        search(store, "project meeting notes")
                    cold.append(time.perf_counter() - t)
                    t = time.perf_counter()
                    with registry.using(agent, heartbeat=False) as store:
                        search(store, "project meeting notes")
                    warm.append(time.perf_counter() - t)
                print(
                    f"search on a cold agent (open + first search): p50 "
                    f"{1e3 * statistics.median(cold):.1f} ms, max {1e3 * max(cold):.1f} ms; "
                    f"once open: p50 {1e3 * statistics.median(warm):.2f} ms"
                )
                t0 = time.perf_counter()
                result = await env.client.execute_workflow(
                    DreamSweep.run,
                    SweepInput(parallelism=args.parallelism),
                    id="bench-agents-sweep",
                    task_queue="bench-agents",
                )
                sweep = time.perf_counter() - t0
                print(
                    f"dream sweep (no LLM, {args.parallelism} at once): "
                    f"{len(result.started)} dreamed, {len(result.failed)} failed, "
                    f"{len(result.already_running)} skipped in {sweep:.0f}s "
                    f"({len(result.started) / sweep:.1f} dreams/s; target <= 300 s)"
                )
                print(
                    f"worker RSS: {rss_mb():.0f} MB peak (after start {base:.0f} MB; "
                    "target <= 1536 MB); "
                    f"open stores {len(registry.open_agents())} (cap {registry.max_open}), "
                    f"about {registry.approx_bytes() / 1e6:.0f} MB "
                    f"(cap {registry.max_bytes / 1e6:.0f} MB), {registry.evicted} evicted"
                )
    finally:
        await env.shutdown()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--agents", type=int, default=1_000)
    parser.add_argument("--entries", type=int, default=200)
    parser.add_argument("--parallelism", type=int, default=8)
    asyncio.run(main(parser.parse_args()))
