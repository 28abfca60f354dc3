"""Many agents on one worker: 1,000 agents of 200 entries each (by default) hosted by one
in-process worker against the dev server.

    .venv/bin/python bench/agents.py [--agents 1000] [--entries 200] [--parallelism 8]
        [--active 0.1] [--backend postgres]

Prints, in one run:
  - the time to write the stores (once; kept under bench/.data/);
  - a search on a cold agent (its store not open in the worker): open + first search,
    p50/max over 20 agents, and the same search once the store is open;
  - four no-LLM dream sweeps over every agent (DreamSweep, `--parallelism` dreams at
    once): a first one with no work (it opens every store and leaves an idle mark), one
    with `--active` of the agents given work (a conversation turn, an exact duplicate,
    an archive past retention and an entry whose decay is due: every pass has
    something to do), one with none (the previous sweep used it up), and one with all
    of them given that work: wall time, workflows and activities per agent, and the cost
    of an idle agent against an active one (targets: <= 10%, and the `--active` sweep
    <= 300 s);
  - the worker process's peak RSS, and how many stores its LRU kept open (with their
    approximate size) against DREAMKEEPER_MAX_OPEN_STORES / _MAX_STORE_MEMORY_MB.
Targets: sweep <= 5 minutes, RSS <= 1.5 GB.

`--backend postgres` runs the same on a database (a durable throwaway server started for
the run, bench/postgres_backend.py; the stores are written again every run), the worker
and its idle check reading every store from there.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import resource
import statistics
import sys
import tempfile
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from postgres_backend import database_url
from search import _vocabulary, _zipf_weights
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import (
    ActivityInboundInterceptor,
    ExecuteActivityInput,
    Interceptor,
)

from dreamkeeper.activities.stores import StoreRegistry
from dreamkeeper.client.attributes import SEARCH_ATTRIBUTES
from dreamkeeper.core.payloads import SweepInput
from dreamkeeper.core.settings import EmbeddingSettings, LLMSettings, StoreSettings, WorkerSettings
from dreamkeeper.stores.backends import open_backend
from dreamkeeper.stores.contract.backend import StoreBackend
from dreamkeeper.stores.contract.records import NewEntry
from dreamkeeper.stores.conversation.conversation_log import ConversationLog
from dreamkeeper.stores.search.query import search
from dreamkeeper.worker.temporal_worker import build_worker, worker_activities
from dreamkeeper.workflows.sweep import DreamSweep

DATA = Path(__file__).resolve().parent / ".data"


def rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


class CountActivities(Interceptor):
    """Counts the activities the worker runs, by type."""

    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()

    def intercept_activity(self, next: ActivityInboundInterceptor) -> ActivityInboundInterceptor:
        counts = self.counts

        class Counting(ActivityInboundInterceptor):
            async def execute_activity(self, input: ExecuteActivityInput) -> Any:
                counts[getattr(input.fn, "__name__", "?")] += 1
                return await super().execute_activity(input)

        return Counting(next)


def give_work(backend: StoreBackend, agent: str, now: datetime) -> None:
    """Something for every pass of a no-LLM cycle to do."""
    store = backend.memory(agent)
    store.create("Twin note for the fold.", category="notes")
    store.create("Twin  note for the fold.", category="notes")
    ConversationLog(store.documents).append("bench", "user", "Please answer briefly.", now)
    old = backend.memory(agent, clock=lambda: now - timedelta(days=200))
    gone = old.create("An old note past retention.", importance=0.2)
    old.archive(gone.id, "deleted by agent tool")
    old.create("An old note whose decay is due.", importance=0.5)


async def sweep(env: WorkflowEnvironment, label: str, args, counter: CountActivities) -> dict:  # noqa: ANN001
    before = (await env.client.count_workflows("TaskQueue = 'bench-agents'")).count
    counter.counts.clear()
    t0 = time.perf_counter()
    result = await env.client.execute_workflow(
        DreamSweep.run,
        SweepInput(parallelism=args.parallelism),
        id=f"bench-agents-sweep-{label}",
        task_queue="bench-agents",
    )
    took = time.perf_counter() - t0
    workflows = (await env.client.count_workflows("TaskQueue = 'bench-agents'")).count - before
    activities = sum(counter.counts.values())
    print(
        f"sweep, {label}: {len(result.started)} dreamed, {len(result.idle)} idle, "
        f"{len(result.failed)} failed, {len(result.already_running)} skipped in {took:.1f}s "
        f"({took / args.agents * 1e3:.1f} ms an agent); {workflows} workflows and "
        f"{activities} activities ({workflows / args.agents:.2f} and "
        f"{activities / args.agents:.2f} an agent)",
        flush=True,
    )
    return {"took": took, "workflows": workflows, "activities": activities}


def build(backend: StoreBackend, done: Path | None, agents: int, entries: int) -> float:
    """Write the stores (once for files: `done` marks them complete)."""
    if done is not None and done.exists():
        return 0.0
    rng = random.Random(7)
    vocab = _vocabulary(rng, 5_000)
    weights = _zipf_weights(len(vocab))
    t0 = time.perf_counter()
    for a in range(agents):
        store = backend.memory(f"agent-{a:04d}")
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
    if done is not None:
        done.write_text("ok")
    return time.perf_counter() - t0


async def main(args: argparse.Namespace) -> None:
    if args.backend == "postgres":
        with database_url() as url, tempfile.TemporaryDirectory(prefix="dk-bench-") as tmp:
            await run(args, StoreSettings(data_dir=Path(tmp), database_url=url))
        return
    await run(args, StoreSettings(data_dir=DATA / f"agents-{args.agents}x{args.entries}"))


async def run(args: argparse.Namespace, settings: StoreSettings) -> None:
    backend = open_backend(settings)
    on_files = settings.database_url is None
    done = settings.data_dir / ".complete" if on_files else None
    took = build(backend, done, args.agents, args.entries)
    print(
        f"{args.agents} agents x {args.entries} entries in {backend.location}"
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
    try:
        with ThreadPoolExecutor(tuning.activity_threads) as pool:
            registry = StoreRegistry(
                backend,
                None,
                max_open=tuning.max_open_stores,
                max_memory_mb=tuning.max_store_memory_mb,
            )
            activities = worker_activities(
                settings, LLMSettings(), EmbeddingSettings(), tuning, stores=registry
            )
            counter = CountActivities()
            worker = build_worker(
                env.client,
                settings,
                task_queue="bench-agents",
                executor=pool,
                activities=activities,
                tuning=tuning,
                interceptors=[counter],
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
                names = [f"agent-{a:04d}" for a in range(args.agents)]
                step = max(1, round(1 / args.active)) if args.active > 0 else 0
                active = names[::step] if step else []
                now = datetime.now(UTC)
                first = await sweep(env, "first (idle marks made)", args, counter)
                for agent in active:
                    give_work(backend, agent, now)
                mixed = await sweep(env, f"{len(active)} active", args, counter)
                idle = await sweep(env, "all idle (marked)", args, counter)
                for agent in names:
                    give_work(backend, agent, now)
                busy = await sweep(env, "all active", args, counter)
                ratio = idle["took"] / busy["took"]
                print(
                    f"an idle agent costs {ratio:.1%} of an active one (target <= 10%); "
                    f"per idle agent {idle['workflows'] / args.agents:.3f} workflows and "
                    f"{idle['activities'] / args.agents:.3f} activities, per active agent "
                    f"{busy['workflows'] / args.agents:.2f} and "
                    f"{busy['activities'] / args.agents:.2f}; the {len(active)}-active sweep "
                    f"took {mixed['took']:.0f}s (target <= 300 s), "
                    f"{mixed['took'] / busy['took']:.2f}x the all-active one; the first "
                    f"sweep (every store opened to make its mark) took {first['took']:.0f}s"
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
    parser.add_argument(
        "--active", type=float, default=0.1, help="share of agents given work for a cycle"
    )
    parser.add_argument("--backend", choices=["files", "postgres"], default="files")
    asyncio.run(main(parser.parse_args()))
