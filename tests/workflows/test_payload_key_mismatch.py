"""A client or a second worker without the worker's payload key (another data
directory: the quickstart run from elsewhere, `--data` elsewhere, `dreamkeeper mcp`
started by a desktop client) gets the store-mismatch message naming where the key was
looked for, exit 2 — not `KeyError: 'Unknown payload encoding binary/encrypted'`."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from temporalio.client import Client

from dreamkeeper.agent.client import MemoryClient
from dreamkeeper.client.claims import claimed_store
from dreamkeeper.client.codec import PayloadKey, PayloadKeys, data_converter
from dreamkeeper.core.errors import StoreMismatch
from dreamkeeper.core.names import CLAIM_LOCATION, CLAIM_STORE_ID, claim_workflow_id
from dreamkeeper.core.settings import StoreSettings
from dreamkeeper.stores.identity import ensure_identity
from dreamkeeper.worker.claim import claim_task_queue
from dreamkeeper.workflows.store_claim import StoreClaim

DREAMKEEPER = Path(sys.executable).parent / "dreamkeeper"


async def _clients(temporal_env, elsewhere: Path) -> tuple[Client, Client]:
    address = temporal_env.client.service_client.config.target_host
    keyed = await Client.connect(
        address,
        data_converter=data_converter(PayloadKeys((PayloadKey("dev", os.urandom(32)),), "test")),
    )
    keyless = await Client.connect(
        address, data_converter=data_converter(PayloadKeys.from_env({}, data_dir=elsewhere))
    )
    return keyed, keyless


def _cli(temporal_env, queue: str, data: Path, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DREAMKEEPER_", "TEMPORAL_"))}
    env.update(
        TEMPORAL_ADDRESS=temporal_env.client.service_client.config.target_host,
        DREAMKEEPER_TASK_QUEUE=queue,
        DREAMKEEPER_EMBEDDING_BACKEND="none",
    )
    return subprocess.run(
        [str(DREAMKEEPER), "--data", str(data), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


async def test_a_client_and_a_second_worker_without_the_key_get_the_store_mismatch(
    temporal_env, tmp_path
):
    queue = f"keyless-{uuid.uuid4().hex[:6]}"
    home, elsewhere = tmp_path / "home", tmp_path / "elsewhere"
    keyed, keyless = await _clients(temporal_env, elsewhere)
    # The worker with a key claims the queue for its store.
    await claim_task_queue(keyed, queue, ensure_identity(home))
    try:
        client = MemoryClient(keyless, StoreSettings(data_dir=elsewhere), queue)
        with pytest.raises(StoreMismatch) as refused:
            await client.check_store()
        message = str(refused.value)
        assert str(home) in message and str(elsewhere) in message
        assert "no payload key" in message and str(elsewhere / "payload-key") in message

        # The CLI: the message and exit 2, no traceback and no KeyError.
        saved = await asyncio.to_thread(_cli, temporal_env, queue, elsewhere, "save", "a fact")
        assert saved.returncode == 2, saved.stderr
        assert saved.stderr.startswith("error: this client reads no store at")
        assert str(home) in saved.stderr and str(elsewhere / "payload-key") in saved.stderr
        assert "KeyError" not in saved.stderr and "Traceback" not in saved.stderr

        # A second worker without the key, on another data directory.
        second = await asyncio.to_thread(_cli, temporal_env, queue, elsewhere, "worker")
        assert second.returncode == 2, second.stderr
        assert f"task queue {queue!r} already serves store" in second.stderr
        assert str(home) in second.stderr and "KeyError" not in second.stderr
    finally:
        await keyed.get_workflow_handle(claim_workflow_id(queue)).terminate()


async def test_a_claim_sealed_by_an_older_worker_names_where_the_key_was_looked_for(
    temporal_env, tmp_path
):
    queue = f"sealed-{uuid.uuid4().hex[:6]}"
    keyed, keyless = await _clients(temporal_env, tmp_path / "elsewhere")
    identity = ensure_identity(tmp_path / "home")
    # What workers wrote before claims were plain: the memo through the codec.
    await keyed.start_workflow(
        StoreClaim.run,
        args=[identity.store_id, identity.location],
        id=claim_workflow_id(queue),
        task_queue=queue,
        memo={CLAIM_STORE_ID: identity.store_id, CLAIM_LOCATION: identity.location},
    )
    try:
        assert await claimed_store(keyed, queue) == (identity.store_id, identity.location)
        with pytest.raises(StoreMismatch) as refused:
            await claimed_store(keyless, queue)
        message = str(refused.value)
        assert f"task queue {queue!r}" in message and "key id 'dev'" in message
        assert "DREAMKEEPER_PAYLOAD_KEY and DREAMKEEPER_PAYLOAD_KEY_FILE are unset" in message
        assert str(tmp_path / "elsewhere" / "payload-key") in message
    finally:
        await keyed.get_workflow_handle(claim_workflow_id(queue)).terminate()
