"""Ctrl-C during `dreamkeeper dev --demo` stops the tour, the worker and the dev server,
cleanly: exit 130 (interrupted, as documented), no traceback, the ports free again."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dreamkeeper.worker.runtime import port_in_use

DREAMKEEPER = Path(sys.executable).parent / "dreamkeeper"


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.mark.slow
def test_ctrl_c_during_the_demo_tour_stops_everything_cleanly(tmp_path):
    # Free ports, never the defaults a user's own `dev` may hold (7233, 8233, 8234).
    grpc, ui, codec = _free_port(), _free_port(), _free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DREAMKEEPER_", "TEMPORAL_"))}
    env["DREAMKEEPER_DATA"] = str(tmp_path)
    env["DREAMKEEPER_DEV_CODEC_PORT"] = str(codec)
    # Its own session, so the signal goes to the whole group, as a terminal's Ctrl-C does.
    proc = subprocess.Popen(
        [str(DREAMKEEPER), "dev", "--demo", "--port", str(grpc), "--ui-port", str(ui)],
        env=env,
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 120
        seen = []
        while time.monotonic() < deadline:
            line = proc.stdout.readline()
            seen.append(line)
            if line.startswith("saved [") or not line:
                break
        assert any(line.startswith("saved [") for line in seen), "".join(seen)
        os.killpg(proc.pid, signal.SIGINT)  # in the middle of the tour
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
    assert proc.returncode == 130, err
    assert "Traceback" not in err and "Traceback" not in out
    assert not any(port_in_use(port) for port in (grpc, ui, codec))
