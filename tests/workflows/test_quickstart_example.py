"""README's agent example is examples/quickstart.py, and it runs as written against a
worker (its own process, settings from the environment as a user's would be)."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "quickstart.py"


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
