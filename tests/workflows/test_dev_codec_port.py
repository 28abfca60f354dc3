"""`dreamkeeper dev`'s codec server keeps one port across restarts (8234, or
DREAMKEEPER_DEV_CODEC_PORT), falls back to a free one with a message when that port is
busy, and prints the `temporal … --codec-endpoint` line that reads the sealed schedule."""

from __future__ import annotations

import asyncio
import shlex
import socket
import subprocess
import sys
import uuid
from pathlib import Path

from dreamkeeper.client.connection import connect
from dreamkeeper.core.settings import TemporalSettings
from dreamkeeper.service.codec_server import DEV_PORT, DevCodecServer
from dreamkeeper.worker.schedules import ensure_dream_schedule, schedule_id_for

TEMPORAL = Path(sys.executable).parent / "temporal"
UI = ("http://localhost:8233",)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_the_dev_codec_port_is_stable_and_a_busy_one_falls_back_saying_so(tmp_path, monkeypatch):
    monkeypatch.delenv("DREAMKEEPER_DEV_CODEC_PORT", raising=False)
    from dreamkeeper.service.codec_server import CodecServerSettings

    assert DEV_PORT == 8234 and CodecServerSettings.from_env().dev_port == 8234
    port = _free_port()  # the default may be taken by another dev on this machine
    monkeypatch.setenv("DREAMKEEPER_DEV_CODEC_PORT", str(port))
    first = DevCodecServer(tmp_path, UI)
    try:
        assert first.endpoint == f"http://127.0.0.1:{port}" and first.fallback is None
        second = DevCodecServer(tmp_path, UI)  # the port is busy now
        try:
            assert second.endpoint != first.endpoint
            assert second.fallback is not None
            assert f"port {port}" in second.fallback
            assert "DREAMKEEPER_DEV_CODEC_PORT" in second.fallback
        finally:
            second.close()
    finally:
        first.close()
    again = DevCodecServer(tmp_path, UI)  # a restart: the same endpoint
    try:
        assert again.endpoint == f"http://127.0.0.1:{port}"
    finally:
        again.close()


def _run(args: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run([str(TEMPORAL), *args], capture_output=True, text=True, timeout=60)


async def test_the_printed_codec_endpoint_line_describes_the_sealed_schedule(
    temporal_env, tmp_path, monkeypatch
):
    for name in ("DREAMKEEPER_PAYLOAD_KEY", "DREAMKEEPER_PAYLOAD_KEY_FILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("DREAMKEEPER_DEV_CODEC_PORT", str(_free_port()))
    codec = DevCodecServer(tmp_path, UI)  # generates {data}/payload-key, as dev does
    address = temporal_env.client.service_client.config.target_host
    client = await connect(TemporalSettings(address=address), tmp_path)  # sealing with it
    queue = f"codec-port-{uuid.uuid4().hex[:6]}"
    await ensure_dream_schedule(client, queue, "0 3 * * *")
    try:
        line = codec.cli_hint(schedule_id_for(queue))
        assert f"--codec-endpoint {codec.endpoint}" in line
        command = shlex.split(line.split("Temporal CLI: ", 1)[1].split("  (", 1)[0])
        assert command[:3] == ["temporal", "schedule", "describe"]
        done = await asyncio.to_thread(_run, [*command[1:], "--address", address])
        assert done.returncode == 0, done.stderr
        assert '"Workflow":"DreamSweep"' in done.stdout
        # The schedule's summary holds no content, so it is not sealed: describe works
        # without the codec too (before, "could not decode user metadata summary").
        bare = await asyncio.to_thread(
            _run,
            ["schedule", "describe", "--schedule-id", schedule_id_for(queue)]
            + ["--address", address],
        )
        assert bare.returncode == 0, bare.stderr
        assert "dream cycle for every agent with a store" in bare.stdout
    finally:
        await client.get_schedule_handle(schedule_id_for(queue)).delete()
        codec.close()
