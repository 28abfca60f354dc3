"""Save latency: SaveMemory's update-with-start (returns once the original is durable)
against a no-op update-with-start workflow on the same dev server, same run.

    .venv/bin/python bench/save.py [--saves 500]

Prints p50/p99 for both and the ratio, then throughput with 1, 4 and 16 concurrent
agents. No LLM is configured, so after the ack each save deduplicates its original.
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

from noop_workflow import BenchNoop
from temporalio.client import WithStartWorkflowOperation
from temporalio.common import WorkflowIDConflictPolicy
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker

from dreamkeeper.activities.llm import LLMSettings
from dreamkeeper.agent.client import MemoryClient
from dreamkeeper.client.attributes import SEARCH_ATTRIBUTES
from dreamkeeper.core.settings import StoreSettings
from dreamkeeper.worker.temporal_worker import build_worker


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1e3


async def main(n: int) -> None:
    temporal = Path(sys.executable).parent / "temporal"
    env = await WorkflowEnvironment.start_local(
        dev_server_existing_path=str(temporal),
        data_converter=pydantic_data_converter,
        search_attributes=SEARCH_ATTRIBUTES,
        dev_server_extra_args=["--headless"],
    )
    data = Path(tempfile.mkdtemp(prefix="dk-bench-save-"))
    queue = "bench-save"
    try:
        with ThreadPoolExecutor(8) as pool:
            dk = build_worker(
                env.client,
                StoreSettings(data_dir=data),
                task_queue=queue,
                executor=pool,
                llm=LLMSettings(),
            )
            noop = Worker(env.client, task_queue="bench-noop", workflows=[BenchNoop])
            async with dk, noop:
                memory = MemoryClient(env.client, StoreSettings(data_dir=data), queue)

                async def one_noop() -> None:
                    await env.client.execute_update_with_start_workflow(
                        BenchNoop.save,
                        start_workflow_operation=WithStartWorkflowOperation(
                            BenchNoop.run,
                            "x",
                            id=f"noop-{uuid.uuid4().hex}",
                            id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
                            task_queue="bench-noop",
                        ),
                    )

                async def one_save(agent: str, i: int) -> None:
                    await memory.save_memory(
                        agent,
                        f"benchmark fact {i} about topic {i % 37} "
                        f"with detail {uuid.uuid4().hex[:8]}",
                    )

                for i in range(20):  # warm-up both paths
                    await one_noop()
                    await one_save("warmup", i)
                noop_t, save_t = [], []
                for i in range(n):  # interleaved, so drift on a noisy machine hits both
                    t = time.perf_counter()
                    await one_noop()
                    noop_t.append(time.perf_counter() - t)
                    t = time.perf_counter()
                    await one_save("latency", i)
                    save_t.append(time.perf_counter() - t)
                print(
                    f"{n} sequential saves on one agent (update-with-start, ack on durable original)"
                )
                print(
                    f"  no-op baseline  p50 {pct(noop_t, 0.5):6.2f} ms  p99 {pct(noop_t, 0.99):6.2f} ms"
                )
                print(
                    f"  SaveMemory      p50 {pct(save_t, 0.5):6.2f} ms  p99 {pct(save_t, 0.99):6.2f} ms"
                )
                print(
                    f"  ratio p50 {statistics.median(save_t) / statistics.median(noop_t):.2f}x "
                    "(target <= 2x)"
                )
                for agents in (1, 4, 16):
                    per_agent = max(1, 200 // agents)
                    t = time.perf_counter()
                    await asyncio.gather(
                        *(
                            one_save(f"tp{agents}-{a}", i)
                            for a in range(agents)
                            for i in range(per_agent)
                        )
                    )
                    took = time.perf_counter() - t
                    print(
                        f"  throughput, {agents:2d} concurrent agent(s): "
                        f"{agents * per_agent / took:6.1f} saves/s"
                    )
    finally:
        await env.shutdown()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--saves", type=int, default=500)
    asyncio.run(main(parser.parse_args().saves))
