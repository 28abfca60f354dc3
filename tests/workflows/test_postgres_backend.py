"""Workers and clients on a database (DREAMKEEPER_DATABASE_URL): saves, reads and entry
operations end to end through a real worker; a client with no access to any worker's
files; and several workers on one task queue and one database, each serving the same
agent (the real Temporal dev server, a real PostgreSQL)."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from dreamkeeper.agent.client import MemoryClient
from dreamkeeper.core.settings import StoreSettings, TemporalSettings
from dreamkeeper.stores.backends import PostgresBackend
from dreamkeeper.worker.runtime import running_worker


def _memory_files(root: Path) -> list[Path]:
    return [p for p in root.rglob("*") if "agents" in p.parts] if root.exists() else []


async def test_save_search_archive_restore_on_a_database_with_no_shared_files(
    worker, database_url, tmp_path
):
    client, queue, settings = worker
    # The client's own data directory does not even exist: everything it reads comes
    # from the database.
    elsewhere = StoreSettings(data_dir=tmp_path / "client-host", database_url=database_url)
    memory = MemoryClient(client, elsewhere, queue)
    await memory.check_store()
    agent = f"pg-{uuid.uuid4().hex[:6]}"
    ack = await memory.save_memory(agent, "The deploy window is Friday at 14:00 UTC")
    hits = memory.search_memory(agent, "deploy window")
    assert [h.entry.id for h in hits] == [ack.entry_id]
    again = await memory.save_memory(
        agent, "The deploy window is Friday at 14:00 UTC", entry_id=ack.entry_id
    )
    assert again.entry_id == ack.entry_id and len(memory.store(agent)) == 1
    await memory.delete_memory(agent, ack.entry_id)
    assert memory.search_memory(agent, "deploy window") == []
    await memory.restore_memory(agent, ack.entry_id)
    served = await memory.search_on_worker(agent, "deploy window")
    assert [h.entry.id for h in served.hits] == [ack.entry_id]
    assert served.served_by == PostgresBackend(database_url).identity().store_id
    assert PostgresBackend(database_url).agents() == [agent]
    assert _memory_files(settings.data_dir) == [] and not (tmp_path / "client-host").exists()


@pytest.fixture
def clean_env(monkeypatch):
    import os

    for name in list(os.environ):
        if name.startswith("DREAMKEEPER_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("DREAMKEEPER_EMBEDDING_BACKEND", "none")
    monkeypatch.setenv("DREAMKEEPER_WORKER_ACTIVITY_THREADS", "4")


async def test_two_workers_on_one_queue_and_one_database_each_serve_the_same_agent(
    temporal_env, database_url, tmp_path, clean_env
):
    """Worker A alone saves; worker B alone, with another data directory, serves the same
    agent from where A left it; then both run at once on the one task queue (the second
    is not refused by the queue's store claim) and every save lands once."""
    temporal = TemporalSettings(
        address=temporal_env.client.service_client.config.target_host,
        task_queue=f"pg-{uuid.uuid4().hex[:8]}",
    )
    a = StoreSettings(data_dir=tmp_path / "host-a", database_url=database_url)
    b = StoreSettings(data_dir=tmp_path / "host-b", database_url=database_url)
    agent = "shared"

    async with running_worker(a, temporal) as client:
        memory = MemoryClient(client, a, temporal.task_queue)
        first = await memory.save_memory(agent, "The payments on-call owner is Dana")

    async with running_worker(b, temporal) as client:
        memory = MemoryClient(client, b, temporal.task_queue)
        second = await memory.save_memory(agent, "Staging restarts every Sunday at 03:00")
        for query, entry_id in (("payments owner", first.entry_id), ("staging", second.entry_id)):
            served = await memory.search_on_worker(agent, query)
            assert [h.entry.id for h in served.hits] == [entry_id]

    async with running_worker(a, temporal) as client, running_worker(b, temporal):
        memory = MemoryClient(client, a, temporal.task_queue)
        facts = [
            "Invoices are archived after seven years",
            "The VPN gateway lives in Frankfurt",
            "Marco prefers tea over coffee",
            "Quarterly planning starts in the second week of March",
            "The mobile app targets Android 12 and newer",
            "Backups are encrypted with age keys",
        ]
        acks = [await memory.save_memory(agent, fact) for fact in facts]
        stored = memory.store(agent).entries()
        assert {e.id for e in stored} == {first.entry_id, second.entry_id} | {
            ack.entry_id for ack in acks
        }
    assert _memory_files(a.data_dir) == [] and _memory_files(b.data_dir) == []


async def test_what_one_host_sealed_opens_on_another_and_one_forget_erases_it_everywhere(
    temporal_env, database_url, tmp_path, clean_env, monkeypatch
):
    """With a payload key, each agent's payloads are sealed with its data key. On a
    database that key is a row, not a file of the sealing host: a save made through
    worker A (data directory host-a) opens on host B (host-b), and a forget run by a
    worker on a third directory destroys the key for both (all three share the keyring)."""
    import base64
    import os

    from dreamkeeper.client.codec import AGENT, EncryptionCodec, PayloadErased
    from dreamkeeper.core.forgetting import ForgetRequest
    from dreamkeeper.core.names import save_workflow_id
    from tests.workflows.test_forgetting import _histories

    monkeypatch.setenv("DREAMKEEPER_PAYLOAD_KEY", base64.b64encode(os.urandom(32)).decode())
    # The hosts share the payload key and the keyring (a shared volume), not their data
    # directories: the data key rows are wrapped by the keyring's key-encryption key.
    monkeypatch.setenv("DREAMKEEPER_KEYRING", str(tmp_path / "shared-keyring"))
    temporal = TemporalSettings(
        address=temporal_env.client.service_client.config.target_host,
        task_queue=f"pg-{uuid.uuid4().hex[:8]}",
    )
    a = StoreSettings(data_dir=tmp_path / "host-a", database_url=database_url)
    b = StoreSettings(data_dir=tmp_path / "host-b", database_url=database_url)
    agent = "sealed"

    async with running_worker(a, temporal) as client:
        memory = MemoryClient(client, a, temporal.task_queue)
        ack = await memory.save_memory(agent, "The safe's combination is 31-7-22")

    async with running_worker(b, temporal) as client:
        memory = MemoryClient(client, b, temporal.task_queue)
        served = await memory.search_on_worker(agent, "safe combination")
        assert [h.entry.id for h in served.hits] == [ack.entry_id]
        histories = await _histories(client, [save_workflow_id(agent, ack.entry_id)])
        codec = client.data_converter.payload_codec
        assert isinstance(codec, EncryptionCodec)
        sealed = [p for found in histories.values() for p in found if AGENT in p.metadata]
        assert sealed
        for payload in sealed:  # host B opens what host A sealed
            codec.decode_sync([payload])
    assert not (a.data_dir / "agent-keys").exists() and not (b.data_dir / "agent-keys").exists()

    c = StoreSettings(data_dir=tmp_path / "cli-host", database_url=database_url)
    async with running_worker(c, temporal) as client:
        memory = MemoryClient(client, c, temporal.task_queue)
        receipt = await memory.forget(agent, ForgetRequest(whole_agent=True))
    assert receipt.history_keys_destroyed == 1 and receipt.verified
    for payload in sealed:
        with pytest.raises(PayloadErased, match="forgotten"):
            codec.decode_sync([payload])
