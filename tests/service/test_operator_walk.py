"""The walk of docs/operations.md ("PostgreSQL: an operator's first day"), as an operator
types it, every process real: a data directory served by `dreamkeeper serve`; `db
upgrade`; `migrate --to` (exit 0); then `serve` and two `worker`s on the database, on the
task queue the directory's serve had claimed; saves and searches through serve; the
database server stops (503 with Retry-After, the workers keep running) and starts again
(normal answers, nothing restarted); every process stops cleanly."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from dreamkeeper.stores.postgres.backend import PostgresBackend
from tests.harness.postgres import PostgresCluster, find_bindir
from tests.service.conftest import serve_env, start_serve, stop_serve

DREAMKEEPER = Path(sys.executable).parent / "dreamkeeper"
FACTS = [
    "The payments on-call owner is Dana.",
    "Staging restarts every Sunday at 03:00.",
    "The VPN gateway lives in Frankfurt.",
    "Backups are encrypted with age keys.",
]


@pytest.fixture
def cluster():
    bindir = find_bindir()
    if bindir is None:
        pytest.skip("no PostgreSQL server binaries")  # the session fixture reports it in CI
    cluster = PostgresCluster(bindir)
    cluster.start()
    yield cluster
    cluster.destroy()


def _cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(DREAMKEEPER), *args], env=env, capture_output=True, text=True, timeout=120
    )


def _worker(env: dict[str, str], log: Path) -> subprocess.Popen:
    proc = subprocess.Popen(
        [str(DREAMKEEPER), "worker"], env=env, stdout=log.open("wb"), stderr=subprocess.STDOUT
    )
    deadline = time.monotonic() + 60
    while "worker on " not in log.read_text():  # polling: the line it logs once it polls
        assert proc.poll() is None, log.read_text()
        assert time.monotonic() < deadline, log.read_text()
        time.sleep(0.1)
    return proc


def test_from_a_data_directory_to_serve_and_two_workers_on_the_database_through_an_outage(
    temporal_env, tmp_path, cluster
):
    queue = f"walk-{uuid.uuid4().hex[:6]}"
    data = tmp_path / "data"
    data.mkdir()
    on_files = start_serve(temporal_env, data, queue=queue)
    try:
        with on_files.client() as http:
            first = http.post("/v1/agents/a1/memories", json={"content": FACTS[0]})
            assert first.status_code == 201, first.text
    finally:
        stop_serve(on_files)

    url = cluster.create_database("dreamkeeper")
    env = serve_env(temporal_env, data, queue, DREAMKEEPER_DATABASE_URL=url)
    upgraded = _cli(env, "db", "upgrade")
    assert upgraded.returncode == 0, upgraded.stderr
    migrated = _cli(env, "--data", str(data), "migrate", "--to", url)
    assert migrated.returncode == 0, migrated.stdout + migrated.stderr

    (tmp_path / "serve-host").mkdir()
    served = start_serve(
        temporal_env, tmp_path / "serve-host", queue=queue, DREAMKEEPER_DATABASE_URL=url
    )
    workers: list[subprocess.Popen] = []
    try:
        for host in ("worker-host-1", "worker-host-2"):  # no data directory of their own
            host_env = serve_env(temporal_env, tmp_path / host, queue, DREAMKEEPER_DATABASE_URL=url)
            workers.append(_worker(host_env, tmp_path / f"{host}.log"))
        store_id = PostgresBackend(url).identity().store_id
        serve_log = (tmp_path / "serve-host" / "serve.log").read_text()
        assert "taken over from store" in serve_log and "which moved here" in serve_log
        for host in ("worker-host-1", "worker-host-2"):
            assert "already held by this store" in (tmp_path / f"{host}.log").read_text()
        with served.client() as http:
            assert http.get("/v1/health").json()["store_id"] == store_id
            for fact in FACTS[1:]:
                saved = http.post("/v1/agents/a1/memories", json={"content": fact})
                assert saved.status_code == 201, saved.text
            hits = http.post("/v1/agents/a1/search", json={"query": "", "limit": 20}).json()
            assert sorted(h["entry"]["content"] for h in hits["hits"]) == sorted(FACTS)

            cluster.stop()
            down = http.post("/v1/agents/a1/search", json={"query": "Frankfurt"})
            assert down.status_code == 503 and down.headers["retry-after"], down.text
            assert http.get("/v1/health").json()["database"] == "down"
            assert all(w.poll() is None for w in workers)  # retrying, not dead

            cluster.start()
            up = http.post("/v1/agents/a1/search", json={"query": "Frankfurt"})
            assert up.status_code == 200 and up.json()["hits"][0]["entry"]["content"] == FACTS[2]
            later = http.post(
                "/v1/agents/a1/memories", json={"content": "Planning starts in March."}
            )
            assert later.status_code == 201, later.text
    finally:
        stop_serve(served)
        for proc in workers:
            proc.send_signal(signal.SIGTERM)
        codes = [proc.wait(timeout=60) for proc in workers]
    assert served.proc.returncode == 0 and codes == [0, 0]
