"""A worker in a child process, so a test can SIGKILL it mid-workflow.

`freeze` names an activity the child replaces with one that announces itself on stdout
and then hangs: the test then knows exactly which step the worker dies in.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

from dreamkeeper.testing.scripted_llm import ScriptedLLM

SCRIPT = textwrap.dedent(
    """
    import asyncio, sys, time
    from concurrent.futures import ThreadPoolExecutor
    from pathlib import Path
    from temporalio import activity
    from temporalio.client import Client
    from temporalio.contrib.pydantic import pydantic_data_converter
    from dreamkeeper.core.settings import LLMSettings
    from dreamkeeper.core.settings import StoreSettings
    from dreamkeeper.worker.temporal_worker import build_worker, worker_activities

    async def main(address, queue, data, llm_url, freeze):
        client = await Client.connect(address, data_converter=pydantic_data_converter)
        settings = StoreSettings(data_dir=Path(data))
        activities = worker_activities(settings, LLMSettings(base_url=llm_url, timeout_seconds=60))
        if freeze:
            @activity.defn(name=freeze)
            def frozen(*args):
                print("frozen", flush=True)
                time.sleep(3600)
            activities = [a for a in activities if a.__temporal_activity_definition.name != freeze]
            activities.append(frozen)
        with ThreadPoolExecutor(4) as pool:
            worker = build_worker(client, settings, task_queue=queue, executor=pool,
                                  activities=activities)
            print("ready", flush=True)
            await worker.run()

    asyncio.run(main(*sys.argv[1:]))
    """
)


def spawn_worker(
    address: str, queue: str, data: Path, llm: ScriptedLLM, *, freeze: str = ""
) -> subprocess.Popen:
    proc = subprocess.Popen(
        [sys.executable, "-c", SCRIPT, address, queue, str(data), llm.base_url, freeze],
        stdout=subprocess.PIPE,
        text=True,
        cwd=Path(__file__).resolve().parents[2],
    )
    assert proc.stdout.readline().strip() == "ready"
    return proc
