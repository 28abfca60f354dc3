"""The console script against a real worker: every exit code is the documented one."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from dreamkeeper.stores.files.identity import ensure_identity
from dreamkeeper.stores.files.memory_store import FileMemoryStore
from dreamkeeper.worker.claim import claim_task_queue

pytestmark = pytest.mark.slow  # a CLI process per call

DREAMKEEPER = Path(sys.executable).parent / "dreamkeeper"


def _env(temporal_env, queue: str, data: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DREAMKEEPER_")}
    env.update(
        TEMPORAL_ADDRESS=temporal_env.client.service_client.config.target_host,
        DREAMKEEPER_TASK_QUEUE=queue,
        DREAMKEEPER_DATA=str(data),
        DREAMKEEPER_AGENT="cli",
        **extra,
    )
    return env


async def _cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    """In a thread: the in-process worker runs on this test's event loop."""
    return await asyncio.to_thread(
        subprocess.run,
        [str(DREAMKEEPER), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.slow
async def test_two_hundred_consecutive_saves_all_exit_zero(worker, temporal_env):
    _, queue, settings = worker
    env = _env(temporal_env, queue, settings.data_dir)

    async def one(n: int) -> tuple[int, str, str]:
        # Distinct words, so save-time dedup keeps every one.
        done = await _cli(env, "save", f"note {uuid.uuid4().hex} {uuid.uuid4().hex}")
        return done.returncode, done.stdout.strip(), done.stderr

    results = []
    for start in range(0, 200, 2):  # two at a time: the machine has two cores
        results += await asyncio.gather(one(start), one(start + 1))
    codes = [code for code, _, _ in results]
    assert codes == [0] * 200, [(c, err[-300:]) for c, _, err in results if c != 0][:3]
    ids = {out for _, out, _ in results}
    assert len(ids) == 200 and all(len(i) == 12 for i in ids)
    store = FileMemoryStore(settings.data_dir, "cli")
    assert len(store.entries()) == 200


async def test_a_retried_save_with_its_key_saves_once(worker, temporal_env):
    _, queue, settings = worker
    env = _env(temporal_env, queue, settings.data_dir)
    first = await _cli(env, "save", "User lives in Chicago", "--idempotency-key", "turn-17")
    again = await _cli(env, "save", "User lives in Chicago", "--idempotency-key", "turn-17")
    assert first.returncode == again.returncode == 0
    assert first.stdout == again.stdout
    assert len(FileMemoryStore(settings.data_dir, "cli").entries()) == 1


async def test_an_unknown_id_through_the_worker_exits_2_like_direct(worker, temporal_env):
    _, queue, settings = worker
    ensure_identity(settings.data_dir)
    env = _env(temporal_env, queue, settings.data_dir)
    FileMemoryStore(settings.data_dir, "cli").create("an entry, so the store exists")
    for command in ("delete", "restore"):
        through = await _cli(env, command, "0123456789ab")
        direct = await _cli(env, command, "0123456789ab", "--direct")
        assert through.returncode == direct.returncode == 2
        assert through.stderr == direct.stderr
        assert through.stderr.count("\n") == 1 and "Traceback" not in through.stderr


async def test_a_client_whose_data_differs_from_the_worker_s_exits_2_naming_both(
    worker, temporal_env, tmp_path
):
    client, queue, settings = worker
    await claim_task_queue(client, queue, ensure_identity(settings.data_dir))
    try:
        other = tmp_path / "other-data"
        done = await _cli(_env(temporal_env, queue, other), "save", "User lives in Chicago")
        assert done.returncode == 2
        assert str(settings.data_dir) in done.stderr and "other-data" in done.stderr
        assert not (other / "agents").exists()
    finally:
        await client.get_workflow_handle(f"dreamkeeper-store-{queue}").terminate()


async def test_a_save_with_no_worker_exits_1_naming_the_entry(temporal_env, tmp_path):
    env = _env(
        temporal_env,
        f"nobody-{uuid.uuid4().hex[:6]}",
        tmp_path,
        DREAMKEEPER_SAVE_TIMEOUT_SECONDS="2",
    )
    done = await _cli(env, "save", "User lives in Chicago", "--entry-id", "0123456789ab")
    assert done.returncode == 1
    assert "0123456789ab" in done.stderr and "queued" in done.stderr
    assert done.stderr.count("\n") == 1, done.stderr  # one line: no SDK noise


async def test_no_server_exits_1_with_one_line(tmp_path):
    env = {**os.environ, "TEMPORAL_ADDRESS": "127.0.0.1:1", "DREAMKEEPER_DATA": str(tmp_path)}
    FileMemoryStore(tmp_path, "a1").create("a fact")  # a known agent: the server is asked
    done = await _cli(env, "--agent", "a1", "delete", "0123456789ab")
    assert done.returncode == 1 and "cannot reach Temporal" in done.stderr
    assert done.stderr.count("\n") == 1


async def test_a_worker_on_an_unwritable_data_directory_exits_2(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    env = {
        **os.environ,
        "TEMPORAL_ADDRESS": "127.0.0.1:1",
        "DREAMKEEPER_DATA": str(blocker / "data"),
    }
    done = await _cli(env, "worker")
    assert done.returncode == 2 and "not writable" in done.stderr
    assert "Traceback" not in done.stderr
