"""A real `dreamkeeper serve` process against the session's Temporal dev server."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.workflows.conftest import llm, memory, temporal_env, worker  # noqa: F401

DREAMKEEPER = Path(sys.executable).parent / "dreamkeeper"
TOKEN = "s3cret-test-token"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@dataclass
class Served:
    url: str
    token: str | None
    data_dir: Path
    queue: str
    proc: subprocess.Popen
    env: dict[str, str]

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"} if self.token else {}

    def client(self) -> httpx.Client:
        return httpx.Client(base_url=self.url, headers=self.headers, timeout=60)


def serve_env(env_: Any, data_dir: Path, queue: str, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DREAMKEEPER_")}
    env.update(
        TEMPORAL_ADDRESS=env_.client.service_client.config.target_host,
        DREAMKEEPER_TASK_QUEUE=queue,
        DREAMKEEPER_DATA=str(data_dir),
        DREAMKEEPER_EMBEDDING_BACKEND="none",
        **extra,
    )
    return env


def start_serve(
    env_: Any, data_dir: Path, *, token: str | None = TOKEN, queue: str | None = None, **extra: str
) -> Served:
    queue = queue or f"serve-{uuid.uuid4().hex[:8]}"
    port = free_port()
    env = serve_env(env_, data_dir, queue, DREAMKEEPER_SERVE_PORT=str(port), **extra)
    if token:
        env["DREAMKEEPER_SERVE_TOKEN"] = token
    log = open(data_dir / "serve.log", "wb")  # noqa: SIM115 - lives with the process
    proc = subprocess.Popen([str(DREAMKEEPER), "serve"], env=env, stdout=log, stderr=log)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:
        if proc.poll() is not None:
            raise RuntimeError(
                f"serve exited {proc.returncode}: {(data_dir / 'serve.log').read_text()}"
            )
        try:
            if httpx.get(f"{url}/v1/health", timeout=1).status_code == 200:
                break
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline:
            proc.kill()
            raise RuntimeError(f"serve did not answer: {(data_dir / 'serve.log').read_text()}")
        time.sleep(0.2)
    return Served(url, token, data_dir, queue, proc, env)


def stop_serve(served: Served) -> None:
    served.proc.terminate()
    try:
        served.proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        served.proc.kill()
        served.proc.wait()


@pytest.fixture(scope="module")
def served(temporal_env, tmp_path_factory):  # noqa: F811 - the imported fixture
    # Store sizes per agent: the metrics tests follow one agent's count.
    served = start_serve(
        temporal_env, tmp_path_factory.mktemp("serve"), DREAMKEEPER_SERVE_METRICS_AGENTS="1"
    )
    yield served
    stop_serve(served)
