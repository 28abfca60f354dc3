"""A client or a second worker without the worker's payload key (another data
directory: the quickstart run from elsewhere, `--data` elsewhere, `dreamkeeper mcp`
started by a desktop client) gets the store-mismatch message naming where the key was
looked for, exit 2 — not `KeyError: 'Unknown payload encoding binary/encrypted'`."""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from temporalio.client import Client

from dreamkeeper.agent.client import MemoryClient
from dreamkeeper.client.claims import claim_of, claimed_store
from dreamkeeper.client.codec import PayloadKey, PayloadKeys, data_converter
from dreamkeeper.core.errors import StoreMismatch
from dreamkeeper.core.names import (
    CLAIM_LOCATION,
    CLAIM_STORE_ID,
    claim_workflow_id,
    save_workflow_id,
)
from dreamkeeper.core.settings import StoreSettings
from dreamkeeper.stores.files.identity import ensure_identity
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


def _cli(
    temporal_env, queue: str, data: Path, *args: str, **extra: str
) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DREAMKEEPER_", "TEMPORAL_"))}
    env.update(
        TEMPORAL_ADDRESS=temporal_env.client.service_client.config.target_host,
        DREAMKEEPER_TASK_QUEUE=queue,
        DREAMKEEPER_EMBEDDING_BACKEND="none",
        **extra,
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


# -- a client that cannot seal starts nothing (issue 32, item 6) ----------------------


def _keyed_converter(data_dir: Path, database_url: str | None, secret: bytes):
    from dreamkeeper.stores.backends import open_backend

    key = PayloadKey("deploy", secret)
    store = StoreSettings(data_dir=data_dir, database_url=database_url)
    return data_converter(
        PayloadKeys((key,), "test", data_dir=data_dir, key_store=open_backend(store).agent_keys)
    )


@contextlib.asynccontextmanager
async def _keyed_worker(temporal_env, settings: StoreSettings, queue: str, monkeypatch):
    """A worker that seals every payload (its key from the environment, as a deployment
    gives it, not from a file a client on the same directory would find), claiming the
    queue for its store."""
    from concurrent.futures import ThreadPoolExecutor

    from dreamkeeper.stores.backends import open_backend
    from dreamkeeper.worker.temporal_worker import build_worker

    address = temporal_env.client.service_client.config.target_host
    secret = os.urandom(32)
    client = await Client.connect(
        address, data_converter=_keyed_converter(settings.data_dir, settings.database_url, secret)
    )
    # The worker's stores find the same key where its codec's came from, the environment
    # (a database seals content at rest with it); `_cli` drops DREAMKEEPER_* variables,
    # so the keyless client never sees it.
    monkeypatch.setenv("DREAMKEEPER_PAYLOAD_KEY", "deploy:" + secret.hex())
    executor = ThreadPoolExecutor(max_workers=4)
    worker = build_worker(client, settings, task_queue=queue, executor=executor)
    running = asyncio.create_task(worker.run())
    await claim_task_queue(client, queue, open_backend(settings).identity())
    try:
        yield client
    finally:
        await client.get_workflow_handle(claim_workflow_id(queue)).terminate()
        await worker.shutdown()
        running.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await running
        executor.shutdown(wait=False, cancel_futures=True)


async def _never_started(client: Client, workflow_id: str) -> None:
    from temporalio.service import RPCError, RPCStatusCode

    with pytest.raises(RPCError) as missing:
        await client.get_workflow_handle(workflow_id).describe()
    assert missing.value.status == RPCStatusCode.NOT_FOUND


@pytest.mark.parametrize("backend", ["file", "postgres"])
async def test_a_client_without_the_key_starts_no_workflow_where_the_worker_seals(
    temporal_env, tmp_path, request, backend, monkeypatch
):
    """The CLI from a directory with no payload key, on the worker's own store (its data
    directory, or its database): before, the save ran with the content as json/plain in
    Temporal history, then failed to read the sealed answer. Now nothing starts: exit 2,
    saying why; the MCP server refuses to start the same way."""
    url = request.getfixturevalue("database_url") if backend == "postgres" else None
    home = tmp_path / "home"
    settings = StoreSettings(data_dir=home, database_url=url)
    queue = f"seal-{uuid.uuid4().hex[:6]}"
    agent = f"pg-{uuid.uuid4().hex[:6]}"
    async with _keyed_worker(temporal_env, settings, queue, monkeypatch) as keyed:
        claim = await claim_of(keyed, queue)
        assert claim is not None and claim.sealed_with == "deploy"
        extra = {"DREAMKEEPER_DATABASE_URL": url} if url else {}
        where = tmp_path / "keyless" if url else home  # a database: any directory will do
        saved = await asyncio.to_thread(
            _cli,
            temporal_env,
            queue,
            where,
            "--agent",
            agent,
            "save",
            "Quillon Varga keeps the spare key under the blue heron statue.",
            "--entry-id",
            "0123456789ab",
            **extra,
        )
        assert saved.returncode == 2, saved.stderr
        assert saved.stderr.count("\n") == 1 and "Traceback" not in saved.stderr
        assert f"the worker serving task queue {queue!r} seals payloads (key deploy)" in (
            saved.stderr
        )
        assert "no payload key" in saved.stderr and "nothing was started" in saved.stderr
        await _never_started(keyed, save_workflow_id(agent, "0123456789ab"))

        served = await asyncio.to_thread(
            _cli, temporal_env, queue, where, "--agent", agent, "mcp", **extra
        )
        assert served.returncode == 2 and "seals payloads" in served.stderr, served.stderr

        # The same client, keyed, saves through the same worker.
        memory = MemoryClient(keyed, settings, queue)
        ack = await memory.save_memory(agent, "a fact the deployment seals", entry_id="a" * 12)
        assert ack.entry_id == "a" * 12


@pytest.mark.parametrize("backend", ["file", "postgres"])
async def test_with_no_worker_yet_a_store_that_keeps_agent_keys_refuses_a_keyless_start(
    temporal_env, tmp_path, request, backend
):
    """No claim to read (no worker has polled the queue yet): the agent keys kept in the
    store say its payloads are sealed, and a keyless client starts nothing."""
    from dreamkeeper.client.codec import EncryptionCodec, PayloadKeyMismatch
    from dreamkeeper.stores.backends import open_backend

    url = request.getfixturevalue("database_url") if backend == "postgres" else None
    settings = StoreSettings(data_dir=tmp_path / "home", database_url=url)
    ensure_identity(settings.data_dir)
    backend_ = open_backend(settings)
    assert not backend_.holds_agent_keys()
    queue = f"unclaimed-{uuid.uuid4().hex[:6]}"
    address = temporal_env.client.service_client.config.target_host
    keyless = await Client.connect(
        address, data_converter=data_converter(PayloadKeys.from_env({}, data_dir=tmp_path))
    )
    memory = MemoryClient(keyless, settings, queue)
    memory.save_timeout = 1  # no worker polls this queue: the start is all there is to see
    with pytest.raises(Exception) as before:
        await memory.save_memory("a1", "a fact", entry_id="b" * 12)
    assert not isinstance(before.value, PayloadKeyMismatch)  # nothing seals here yet
    await keyless.get_workflow_handle(save_workflow_id("a1", "b" * 12)).terminate()

    codec = _keyed_converter(settings.data_dir, url, os.urandom(32)).payload_codec
    assert isinstance(codec, EncryptionCodec) and codec.agent_keys is not None
    codec.agent_keys.current("a1")  # a keyed process sealed a payload of agent a1
    assert backend_.holds_agent_keys()
    with pytest.raises(PayloadKeyMismatch, match="keeps payload data keys"):
        await memory.save_memory("a1", "a fact", entry_id="c" * 12)
    await _never_started(keyless, save_workflow_id("a1", "c" * 12))


async def test_a_worker_whose_sealing_changed_claims_its_queue_again(temporal_env, tmp_path):
    """A store's worker restarted with a key (or without one) updates what its claim
    says, so clients read the sealing that holds now."""
    queue = f"reseal-{uuid.uuid4().hex[:6]}"
    keyed, keyless = await _clients(temporal_env, tmp_path / "elsewhere")
    identity = ensure_identity(tmp_path / "home")
    try:
        assert await claim_task_queue(keyless, queue, identity) == "claimed"
        assert (await claim_of(keyless, queue)).sealed_with is None
        assert await claim_task_queue(keyless, queue, identity) == "already held by this store"
        assert "claimed again" in await claim_task_queue(keyed, queue, identity)
        assert (await claim_of(keyless, queue)).sealed_with == "dev"
        assert await claim_task_queue(keyed, queue, identity) == "already held by this store"
    finally:
        await keyed.get_workflow_handle(claim_workflow_id(queue)).terminate()
