"""An operator's first day, as typed: `dreamkeeper dev` on a data directory, then `db
upgrade`, `migrate --to "$DREAMKEEPER_DATABASE_URL"` (exit 0), then `dreamkeeper dev` on
the database just works — the dev server kept the first run's task-queue claim (its
history is in the data directory), and the database's worker takes the queue over
because the store moved there. Real processes, a real PostgreSQL."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

DREAMKEEPER = Path(sys.executable).parent / "dreamkeeper"
NOTE = "The deploy window is Tuesday 14:00."


def _env(data_dir: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DREAMKEEPER_", "TEMPORAL_"))}
    env.update(DREAMKEEPER_DATA=str(data_dir), DREAMKEEPER_EMBEDDING_BACKEND="none", **extra)
    return env


def _free_ports(count: int) -> list[int]:
    """`count` distinct free ports: held open together while the system picks them."""
    with contextlib.ExitStack() as held:
        sockets = [held.enter_context(socket.socket()) for _ in range(count)]
        for sock in sockets:
            sock.bind(("127.0.0.1", 0))
        return [sock.getsockname()[1] for sock in sockets]


class Dev:
    """`dreamkeeper dev` on free ports, in its own session (stopped like Ctrl-C)."""

    def __init__(self, data_dir: Path, log: Path, **extra: str) -> None:
        self.port, codec, grpc, ui = _free_ports(4)
        env = _env(
            data_dir,
            DREAMKEEPER_SERVE_PORT=str(self.port),
            DREAMKEEPER_DEV_CODEC_PORT=str(codec),
            **extra,
        )
        self.log = log
        self.proc = subprocess.Popen(
            [str(DREAMKEEPER), "dev", "--port", str(grpc), "--ui-port", str(ui)],
            env=env,
            stdout=log.open("wb"),
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self.url = f"http://127.0.0.1:{self.port}"

    def ready(self) -> dict:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, self.log.read_text()
            try:
                answer = httpx.get(f"{self.url}/v1/health", timeout=2)
                if answer.status_code == 200:
                    return answer.json()
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        raise AssertionError(f"dev did not answer: {self.log.read_text()}")

    def stop(self) -> int:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGINT)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=10)
        return self.proc.returncode


def _cli(data_dir: Path, *args: str, **extra: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(DREAMKEEPER), *args],
        env=_env(data_dir, **extra),
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_dev_just_works_after_db_upgrade_and_migrate(tmp_path, database_url):
    data = tmp_path / "data"
    data.mkdir()
    first = Dev(data, tmp_path / "dev-files.log")
    try:
        on_files = first.ready()
        saved = httpx.post(f"{first.url}/v1/agents/a1/memories", json={"content": NOTE}, timeout=60)
        assert saved.status_code == 201, saved.text
    finally:
        first.stop()
    upgraded = _cli(data, "db", "upgrade", DREAMKEEPER_DATABASE_URL=database_url)
    assert upgraded.returncode == 0, upgraded.stderr
    migrated = _cli(data, "migrate", "--to", database_url, DREAMKEEPER_DATABASE_URL=database_url)
    assert migrated.returncode == 0, migrated.stdout + migrated.stderr
    assert "records the move" in migrated.stdout

    second = Dev(data, tmp_path / "dev-database.log", DREAMKEEPER_DATABASE_URL=database_url)
    try:
        on_database = second.ready()
        assert on_database["store_id"] != on_files["store_id"]
        found = httpx.post(
            f"{second.url}/v1/agents/a1/search", json={"query": "deploy window"}, timeout=60
        )
        assert found.status_code == 200 and [
            h["entry"]["content"] for h in found.json()["hits"]
        ] == [NOTE]
        again = httpx.post(
            f"{second.url}/v1/agents/a1/memories", json={"content": "Release notes go out Friday."}
        )
        assert again.status_code == 201, again.text  # the database's worker holds the queue
    finally:
        second.stop()
    log = (tmp_path / "dev-database.log").read_text()
    assert "already serves store" not in log
    assert f"taken over from store {on_files['store_id']}" in log
