"""Ctrl-C ends a CLI command with exit 130, as documented: a long-running `worker` stops
cleanly first; SIGTERM (a supervisor's stop) still ends it with 0."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess

import pytest

from tests.workflows.test_cli_through_worker import DREAMKEEPER, _env

pytestmark = pytest.mark.slow  # a worker process


def _stop_worker(env: dict[str, str], sig: signal.Signals) -> tuple[int, str]:
    proc = subprocess.Popen(
        [str(DREAMKEEPER), "worker"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # the signal goes to its group, as a terminal's does
    )
    try:
        assert proc.stderr is not None
        seen = []
        for line in proc.stderr:  # until it polls (the signal handlers are in place)
            seen.append(line)
            if "worker.runtime: worker on " in line:
                break
        else:
            raise AssertionError("".join(seen))
        os.killpg(proc.pid, sig)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
    return proc.returncode, "".join(seen) + err


async def test_ctrl_c_stops_the_worker_with_exit_130_and_sigterm_with_0(temporal_env, tmp_path):
    env = _env(temporal_env, f"interrupt-{tmp_path.name}", tmp_path / "data")
    code, err = await asyncio.to_thread(_stop_worker, env, signal.SIGINT)
    assert code == 130, err
    assert "Traceback" not in err and "shutting down" in err
    code, err = await asyncio.to_thread(_stop_worker, env, signal.SIGTERM)
    assert code == 0, err
