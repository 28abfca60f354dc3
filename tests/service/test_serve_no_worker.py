"""`serve --no-worker` (DREAMKEEPER_SERVE_WORKER=0): the memory service without a worker
in its process. Reads are its own; every write is a workflow that only the task queue's
`dreamkeeper worker` processes run."""

from __future__ import annotations

import subprocess

from tests.service.conftest import start_serve, stop_serve
from tests.workflows.subprocess_worker import spawn_worker

AGENT = "no-worker-agent"


def _save(served, text: str) -> object:
    with served.client() as http:
        return http.post(f"/v1/agents/{AGENT}/memories", json={"content": text})


def test_serve_without_a_worker_leaves_saves_to_the_queue_s_workers(temporal_env, llm, tmp_path):
    served = start_serve(
        temporal_env,
        tmp_path,
        DREAMKEEPER_SERVE_WORKER="0",
        DREAMKEEPER_SAVE_TIMEOUT_SECONDS="2",
    )
    worker: subprocess.Popen | None = None
    try:
        # Nobody polls the queue: serve's own process runs no worker, so the save waits
        # and is answered "no worker answered", queued.
        queued = _save(served, "User lives in Chicago")
        assert queued.status_code == 503, queued.text
        assert "no worker answered" in queued.text
        # A worker of the queue's own takes the save; serve reads it back.
        address = temporal_env.client.service_client.config.target_host
        worker = spawn_worker(address, served.queue, served.data_dir, llm)
        saved = _save(served, "User works at Initech")
        assert saved.status_code in (200, 201), saved.text
        with served.client() as http:
            found = http.post(f"/v1/agents/{AGENT}/search", json={"query": "Initech"})
        assert found.status_code == 200, found.text
        assert "Initech" in found.text
    finally:
        stop_serve(served)
        if worker is not None:
            worker.terminate()
            worker.wait(timeout=30)
    log = (tmp_path / "serve.log").read_text()
    assert "no worker in this process" in log
