"""Save latency and throughput: SaveMemory's update-with-start (returns once the original
is durable) against a no-op update-with-start workflow on the same dev server, same run.

    .venv/bin/python bench/save.py [--saves 200] [--agents 1,4,16,64] [--seconds 8]
    .venv/bin/python bench/save.py --backend postgres [--saves 200] [--agents 1,4,16,64]

1. Latency: `--saves` sequential saves on one agent, interleaved with no-op starts; p50
   and p99 of both and their ratio.
2. Throughput: for each concurrency N, N agents each saving in a closed loop (an agent
   waits for its ack before its next save) for `--seconds`, then the same with N loops
   of no-op update-with-starts. Each prints saves/s and p50; SaveMemory's figures are
   also given against its own 1-agent figure and against the no-op at the same N.
   A SaveMemory keeps working after its ack (dedup, embeddings): that work competes
   with later saves, as it does in production. Between rounds the bench waits until the
   previous round's workflows are done, so a round does not pay for the one before.

`--backend postgres` first compares the long-term store's save itself on both backends,
in one process and one run: the dedup save a SaveMemory activity makes (`save_fact`:
search for a duplicate, then create, or reinforce by op id) on a file store and on a
PostgreSQL store (a durable server started for the run), each over the same 1,000
entries, interleaved; p50/p99 of both and the p50 ratio (target <= 1.3x the file
backend). Then 1. and 2. again with the worker's stores in that database.

Where a save's time goes: after each throughput round, the worker's time in each
activity type per save (the store steps, fsync and the store lock included), and, from
the histories of that round's workflows, workflow tasks and activity tasks per save and
per no-op (the server's work per call).

No LLM is configured, so after the ack each save deduplicates its original. Embeddings
are off unless `--embeddings local` (the in-process model: CPU-bound on a small host).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from noop_workflow import BenchNoop
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WithStartWorkflowOperation
from temporalio.common import WorkflowIDConflictPolicy
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import (
    ActivityInboundInterceptor,
    ExecuteActivityInput,
    Interceptor,
    Worker,
)

from dreamkeeper.agent.client import MemoryClient
from dreamkeeper.client.attributes import SEARCH_ATTRIBUTES
from dreamkeeper.core.settings import EmbeddingSettings, LLMSettings, StoreSettings
from dreamkeeper.worker.temporal_worker import build_worker, worker_tuning

NOOP_QUEUE = "bench-noop"


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1e3


async def one_noop(client: Client) -> None:
    await client.execute_update_with_start_workflow(
        BenchNoop.save,
        start_workflow_operation=WithStartWorkflowOperation(
            BenchNoop.run,
            "x",
            id=f"noop-{uuid.uuid4().hex}",
            id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
            task_queue=NOOP_QUEUE,
        ),
    )


def store_saves(saves: int) -> None:
    """The store-level save on files and on PostgreSQL, interleaved (see the docstring)."""
    from postgres_backend import database_url, open_store

    from dreamkeeper.policies.dedup import Candidate
    from dreamkeeper.stores.contract.records import NewEntry
    from dreamkeeper.stores.files.memory_store import FileMemoryStore
    from dreamkeeper.stores.longterm.dedup_save import save_fact

    seed = [
        NewEntry(f"seed fact {i} about topic {i % 37} and item{i}", category="bench")
        for i in range(1_000)
    ]
    with database_url() as url:
        stores = {
            "files": FileMemoryStore(Path(tempfile.mkdtemp(prefix="dk-bench-save-")), "bench"),
            "postgres": open_store(url, "bench"),
        }
        times: dict[tuple[str, str], list[float]] = {}
        for store in stores.values():
            store.create_many(seed)
        for i in range(-20, saves):  # 20 warm-up rounds, then interleaved: drift hits both
            text = f"benchmark fact {i} about topic {i % 37} with detail {uuid.uuid4().hex[:8]}"
            for name, store in stores.items():
                t = time.perf_counter()
                save_fact(
                    store, Candidate(text, "bench"), new_id=uuid.uuid4().hex[:12], op_id=f"s{i}"
                )
                saved = time.perf_counter() - t
                t = time.perf_counter()
                store.create(f"plain {text}", category="plain")  # the write alone
                created = time.perf_counter() - t
                if i >= 0:
                    times.setdefault(("save_fact", name), []).append(saved)
                    times.setdefault(("create", name), []).append(created)
        print(f"{saves} sequential saves on one agent of 1,000 entries, each backend in turn")
        for op in ("save_fact", "create"):
            for name in stores:
                values = times[(op, name)]
                print(
                    f"  {op:<9} {name:<9} p50 {pct(values, 0.5):7.2f} ms  "
                    f"p99 {pct(values, 0.99):7.2f} ms"
                )
            ratio = statistics.median(times[(op, "postgres")]) / statistics.median(
                times[(op, "files")]
            )
            print(f"  {op:<9} postgres / files p50 {ratio:.2f}x (target <= 1.3x)")


class ActivityTime(Interceptor):
    """The worker's time in each activity type (local ones too): count and seconds."""

    def __init__(self) -> None:
        self.seconds: dict[str, list[float]] = {}

    def intercept_activity(self, next: ActivityInboundInterceptor) -> ActivityInboundInterceptor:
        seconds = self.seconds

        class Timed(ActivityInboundInterceptor):
            async def execute_activity(self, input: ExecuteActivityInput) -> Any:
                t = time.perf_counter()
                try:
                    return await super().execute_activity(input)
                finally:
                    name = getattr(input.fn, "__name__", "?")
                    seconds.setdefault(name, []).append(time.perf_counter() - t)

        return Timed(next)


async def tasks_per_run(client: Client, query: str, sample: int = 20) -> tuple[float, float]:
    """Workflow tasks and activity tasks (local ones excluded: they run inside a
    workflow task) per run, over up to `sample` runs matching `query`."""
    wfts = acts = runs = 0
    async for execution in client.list_workflows(query, limit=sample):
        runs += 1
        handle = client.get_workflow_handle(execution.id, run_id=execution.run_id)
        async for event in handle.fetch_history_events():
            if event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED:
                wfts += 1
            elif event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
                acts += 1
    return (wfts / runs, acts / runs) if runs else (0.0, 0.0)


def breakdown(timing: ActivityTime, saves: int) -> str:
    """Activity time per save, by type: `name n/save x ms`."""
    parts = []
    for name, took in sorted(timing.seconds.items()):
        parts.append(
            f"{name} {len(took) / saves:.2f}/save x {1e3 * statistics.median(took):.1f} ms"
        )
    return ", ".join(parts) or "none"


async def closed_loop(n: int, seconds: float, call) -> tuple[float, list[float]]:
    """`n` loops calling `call(loop, i)` back to back for `seconds`: calls/s, latencies."""
    latencies: list[float] = []
    stop = time.perf_counter() + seconds

    async def loop(a: int) -> None:
        i = 0
        while time.perf_counter() < stop:
            t = time.perf_counter()
            await call(a, i)
            latencies.append(time.perf_counter() - t)
            i += 1

    t0 = time.perf_counter()
    await asyncio.gather(*(loop(a) for a in range(n)))
    return len(latencies) / (time.perf_counter() - t0), latencies


async def drain(client: Client) -> None:
    """Wait until no workflow of an earlier round is still running."""
    for _ in range(600):
        running = await client.count_workflows("ExecutionStatus = 'Running'")
        if running.count <= 0:
            return
        await asyncio.sleep(0.5)


async def main(args: argparse.Namespace, database_url: str | None = None) -> None:
    temporal = Path(sys.executable).parent / "temporal"
    env = await WorkflowEnvironment.start_local(
        dev_server_existing_path=str(temporal),
        data_converter=pydantic_data_converter,
        search_attributes=SEARCH_ATTRIBUTES,
        dev_server_extra_args=["--headless"],
    )
    data = Path(tempfile.mkdtemp(prefix="dk-bench-save-"))
    queue = "bench-save"
    embeddings = (
        EmbeddingSettings(local=True, model="all-MiniLM-L6-v2-int8")
        if args.embeddings == "local"
        else EmbeddingSettings()
    )
    tuning = worker_tuning()
    try:
        with ThreadPoolExecutor(tuning.activity_threads) as pool:
            settings = StoreSettings(data_dir=data, database_url=database_url)
            timing = ActivityTime()
            dk = build_worker(
                env.client,
                settings,
                task_queue=queue,
                executor=pool,
                llm=LLMSettings(),
                embeddings=embeddings,
                tuning=tuning,
                interceptors=[timing],
            )
            noop = Worker(env.client, task_queue=NOOP_QUEUE, workflows=[BenchNoop])
            async with dk, noop:
                memory = MemoryClient(env.client, settings, queue)

                async def one_save(agent: str, i: int) -> None:
                    await memory.save_memory(
                        agent,
                        f"benchmark fact {i} about topic {i % 37} "
                        f"with detail {uuid.uuid4().hex[:8]}",
                    )

                print(
                    f"worker: {tuning.describe()}; embeddings {args.embeddings}; "
                    f"stores in {'the database' if database_url else 'files'}"
                )
                for i in range(20):  # warm-up both paths
                    await one_noop(env.client)
                    await one_save("warmup", i)
                noop_t, save_t = [], []
                for i in range(args.saves):  # interleaved: drift hits both
                    t = time.perf_counter()
                    await one_noop(env.client)
                    noop_t.append(time.perf_counter() - t)
                    t = time.perf_counter()
                    await one_save("latency", i)
                    save_t.append(time.perf_counter() - t)
                print(f"{args.saves} sequential saves on one agent (ack on durable original)")
                print(
                    f"  no-op      p50 {pct(noop_t, 0.5):6.2f} ms  p99 {pct(noop_t, 0.99):6.2f} ms"
                )
                print(
                    f"  SaveMemory p50 {pct(save_t, 0.5):6.2f} ms  p99 {pct(save_t, 0.99):6.2f} ms"
                )
                print(
                    f"  ratio p50 {statistics.median(save_t) / statistics.median(noop_t):.2f}x "
                    "(target <= 1.2x)"
                )
                print(
                    f"throughput, closed loops of {args.seconds:.0f} s "
                    "(N agents, each waiting for its ack)"
                )
                print(
                    f"  {'N':>3} {'SaveMemory/s':>12} {'p50':>8} {'no-op/s':>9} {'p50':>8} "
                    f"{'vs 1 agent':>10} {'vs no-op':>9} {'p50 ratio':>9}"
                )
                first = None
                for n in args.agents:
                    await drain(env.client)
                    timing.seconds.clear()
                    rate, lat = await closed_loop(
                        n, args.seconds, lambda a, i, n=n: one_save(f"tp{n}-{a}", i)
                    )
                    await drain(env.client)
                    where = breakdown(timing, len(lat))
                    noop_rate, noop_lat = await closed_loop(
                        n, args.seconds, lambda a, i: one_noop(env.client)
                    )
                    first = first or rate
                    print(
                        f"  {n:>3} {rate:>12.1f} {pct(lat, 0.5):>6.1f}ms {noop_rate:>9.1f} "
                        f"{pct(noop_lat, 0.5):>6.1f}ms {rate / first:>9.2f}x "
                        f"{rate / noop_rate:>8.2f}x {pct(lat, 0.5) / pct(noop_lat, 0.5):>8.2f}x"
                    )
                    print(f"        worker time per save: {where}")
                    if n == 16:
                        save_tasks = await tasks_per_run(
                            env.client,
                            "WorkflowType = 'SaveMemory' AND WorkflowId STARTS_WITH 'save-tp16-'",
                        )
                        noop_tasks = await tasks_per_run(env.client, "WorkflowType = 'BenchNoop'")
                        print(
                            f"        server work per call: SaveMemory {save_tasks[0]:.1f} "
                            f"workflow tasks + {save_tasks[1]:.1f} activity tasks, no-op "
                            f"{noop_tasks[0]:.1f} + {noop_tasks[1]:.1f}"
                        )
                print("  targets at 16: >= 2x its 1-agent figure, >= 0.7x the no-op")
    finally:
        await env.shutdown()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--saves", type=int, default=200)
    parser.add_argument("--agents", default="1,4,16,64")
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--embeddings", choices=["none", "local"], default="none")
    parser.add_argument("--backend", choices=["files", "postgres"], default="files")
    parsed = parser.parse_args()
    parsed.agents = [int(a) for a in parsed.agents.split(",")]
    if parsed.backend == "postgres":
        store_saves(parsed.saves)
        from postgres_backend import database_url

        with database_url() as url:
            asyncio.run(main(parsed, url))
        sys.exit(0)
    asyncio.run(main(parsed))
