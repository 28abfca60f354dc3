"""README's agent example is examples/quickstart.py, and it runs as written against a
worker (its own process, settings from the environment as a user's would be); run
against a worker of another store, it ends with the StoreMismatch, exit 1, every time."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

from dreamkeeper.stores.files.identity import ensure_identity
from dreamkeeper.worker.claim import claim_task_queue

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "quickstart.py"
# The example run as written, with the GIL handed between threads as often as Python
# allows: the SDK's thread that hands back connect()'s last answer is then as likely as
# it can be to still be in Python when the script's exception ends the interpreter.
EXAMPLE_SWITCHING = (
    "import runpy, sys; sys.setswitchinterval(1e-6); "
    f"runpy.run_path({str(EXAMPLE)!r}, run_name='__main__')"
)
RUNS = 20


def test_the_readme_shows_the_example_verbatim():
    code = EXAMPLE.read_text().split('"""', 2)[2].strip()
    assert code in (ROOT / "README.md").read_text()


async def test_the_example_runs_against_a_worker(worker):
    client, queue, settings = worker
    env = {
        **os.environ,
        "TEMPORAL_ADDRESS": client.service_client.config.target_host,
        "DREAMKEEPER_TASK_QUEUE": queue,
        "DREAMKEEPER_DATA": str(settings.data_dir),
        "DREAMKEEPER_EMBEDDING_BACKEND": "none",
    }
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        str(EXAMPLE),
        env=env,
        cwd=ROOT,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(process.communicate(), timeout=120)
    text = out.decode()
    assert process.returncode == 0, err.decode()[-2000:]
    saved = text.split("saved ", 1)[1].split()[0]
    assert f"found {saved} The user lives in Chicago" in text
    assert "system | Recalled from long-term memory" in text
    assert "tools: search_memory, search_working_memory, save_memory" in text


async def test_the_example_on_another_store_exits_1_with_the_mismatch_every_time(worker, tmp_path):
    client, queue, settings = worker
    await claim_task_queue(client, queue, ensure_identity(settings.data_dir))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {
        **os.environ,
        "TEMPORAL_ADDRESS": client.service_client.config.target_host,
        "DREAMKEEPER_TASK_QUEUE": queue,
        "DREAMKEEPER_DATA": str(elsewhere),
        "DREAMKEEPER_EMBEDDING_BACKEND": "none",
    }
    gate = asyncio.Semaphore(2)  # two at a time, as on the two cores of CI

    async def run_once() -> tuple[int | None, str]:
        async with gate:
            process = await asyncio.create_subprocess_exec(
                sys.executable,
                "-c",
                EXAMPLE_SWITCHING,
                env=env,
                cwd=elsewhere,
                stdout=asyncio.subprocess.DEVNULL,
                stderr=asyncio.subprocess.PIPE,
            )
            _, err = await asyncio.wait_for(process.communicate(), timeout=120)
            return process.returncode, err.decode()

    try:
        results = await asyncio.gather(*(run_once() for _ in range(RUNS)))
    finally:
        await client.get_workflow_handle(f"dreamkeeper-store-{queue}").terminate()
    codes = [code for code, _ in results]
    assert codes == [1] * RUNS, [err[-600:] for code, err in results if code != 1]
    for _, err in results:
        assert "dreamkeeper.core.errors.StoreMismatch: this client reads" in err
        assert "Fatal Python error" not in err
