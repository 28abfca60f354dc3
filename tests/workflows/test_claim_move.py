"""A task queue moves with its store: after `dreamkeeper migrate` copied a data directory
into a database (and verified it), a worker of that database takes over the queue the
directory's workers claimed, by itself. Invariant 19 still holds for everything else: a
database the migration did not fill, another data directory, and the directory itself
once it moved are refused, naming both stores. Real Temporal, real PostgreSQL."""

from __future__ import annotations

import os
import uuid

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dreamkeeper.cli.main import main
from dreamkeeper.client.claims import claimed_store
from dreamkeeper.core.errors import StoreMismatch
from dreamkeeper.stores.contract.identity import StoreIdentity
from dreamkeeper.stores.files.identity import IDENTITY_FILE, ensure_identity, record_move
from dreamkeeper.stores.files.memory_store import FileMemoryStore
from dreamkeeper.stores.postgres.backend import PostgresBackend
from dreamkeeper.stores.postgres.database import Database
from dreamkeeper.stores.postgres.migrations import upgrade
from dreamkeeper.worker.claim import claim_task_queue, moved_here


@pytest.fixture
def clean_env(monkeypatch):
    for name in list(os.environ):
        if name.startswith("DREAMKEEPER_"):
            monkeypatch.delenv(name)


def _file_store_with_a_memory(data_dir) -> StoreIdentity:
    FileMemoryStore(data_dir, "a1").create("The deploy window is Tuesday 14:00.", category="ops")
    return ensure_identity(data_dir)  # as its first worker made it


def _migrate(data_dir, url) -> None:
    assert main(["--data", str(data_dir), "migrate", "--to", url]) == 0


def _another_database(postgres_cluster) -> str:
    url = postgres_cluster.create_database(f"dk_other_{uuid.uuid4().hex[:8]}")
    db = Database(url, max_size=1)
    try:
        upgrade(db)
    finally:
        db.close()
    return url


async def _release(client, queue: str) -> None:
    await client.get_workflow_handle(f"dreamkeeper-store-{queue}").terminate()


async def test_a_queue_moves_with_its_store_into_the_database_migrate_filled(
    temporal_env, tmp_path, database_url, clean_env, capsys
):
    client, queue = temporal_env.client, f"move-{uuid.uuid4().hex[:6]}"
    files = _file_store_with_a_memory(tmp_path / "data")
    assert await claim_task_queue(client, queue, files) == "claimed"
    database = PostgresBackend(database_url).identity()
    with pytest.raises(StoreMismatch):  # before the migration: another store
        await claim_task_queue(client, queue, database)
    _migrate(tmp_path / "data", database_url)
    assert "records the move" in capsys.readouterr().out
    taken = await claim_task_queue(client, queue, database)
    assert taken == f"taken over from store {files.store_id} at {files.location}, which moved here"
    assert (await claimed_store(client, queue))[0] == database.store_id
    # Every other worker of the database now finds the queue its own.
    assert await claim_task_queue(client, queue, database) == "already held by this store"
    await _release(client, queue)


async def test_the_move_is_read_in_the_workers_own_data_directory_too(
    temporal_env, tmp_path, database_url, clean_env
):
    """The directory is not where its workers claimed from (a volume mounted elsewhere):
    the worker's DREAMKEEPER_DATA holding the same store, with the move, is the proof."""
    client, queue = temporal_env.client, f"move-{uuid.uuid4().hex[:6]}"
    files = _file_store_with_a_memory(tmp_path / "data")
    await claim_task_queue(client, queue, files)
    _migrate(tmp_path / "data", database_url)
    (tmp_path / "data").rename(tmp_path / "mounted-elsewhere")
    database = PostgresBackend(database_url).identity()
    with pytest.raises(StoreMismatch):
        await claim_task_queue(client, queue, database)
    taken = await claim_task_queue(client, queue, database, data_dir=tmp_path / "mounted-elsewhere")
    assert taken.startswith(f"taken over from store {files.store_id}")
    await _release(client, queue)


async def test_no_store_the_migration_did_not_fill_takes_the_queue_and_the_old_one_stays_out(
    temporal_env, tmp_path, database_url, postgres_cluster, clean_env
):
    client, queue = temporal_env.client, f"move-{uuid.uuid4().hex[:6]}"
    files = _file_store_with_a_memory(tmp_path / "data")
    await claim_task_queue(client, queue, files)
    _migrate(tmp_path / "data", database_url)
    # Another database (migrated from another directory), and another directory.
    elsewhere = _file_store_with_a_memory(tmp_path / "elsewhere")
    other_url = _another_database(postgres_cluster)
    _migrate(tmp_path / "elsewhere", other_url)
    other = PostgresBackend(other_url).identity()
    for stranger, where in ((other, other.location), (elsewhere, str(tmp_path / "elsewhere"))):
        with pytest.raises(StoreMismatch) as refused:
            await claim_task_queue(client, queue, stranger, data_dir=tmp_path / "elsewhere")
        assert str(tmp_path / "data") in str(refused.value) and where in str(refused.value)
    assert (await claimed_store(client, queue))[0] == files.store_id
    # Moved: the database holds the queue, and the directory cannot take it back.
    database = PostgresBackend(database_url).identity()
    await claim_task_queue(client, queue, database)
    with pytest.raises(StoreMismatch) as refused:
        await claim_task_queue(client, queue, files, data_dir=tmp_path / "data")
    assert database.location in str(refused.value)
    assert (await claimed_store(client, queue))[0] == database.store_id
    await _release(client, queue)


@settings(max_examples=60, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    store_id=st.text(min_size=0, max_size=40),
    location=st.one_of(
        st.text(max_size=80),
        st.builds(lambda p: f"host:{p}", st.text(max_size=60)),
        st.sampled_from(["host:/", "host:/etc", ":/", "host::/x", "/abs/only"]),
    ),
)
def test_no_claimed_store_or_location_makes_a_store_take_a_queue_nothing_moved_into(
    tmp_path, store_id, location
):
    """Whatever a claim says (a worker of any version, hostile text), only a directory
    that records a move into this very store hands the queue over."""
    mine = StoreIdentity(uuid.uuid4().hex[:16], "postgresql://dk@127.0.0.1:5432/dk")
    assert moved_here((store_id, location), mine, None) is False
    assert moved_here((store_id, location), mine, tmp_path) is False


def test_a_directory_that_holds_another_store_or_no_move_hands_nothing_over(tmp_path):
    mine = StoreIdentity(uuid.uuid4().hex[:16], "postgresql://dk@127.0.0.1:5432/dk")
    files = ensure_identity(tmp_path / "a")
    held = (files.store_id, files.location)
    assert moved_here(held, mine, None) is False  # no move recorded
    record_move(tmp_path / "a", StoreIdentity("0" * 16, "postgresql://other"))
    assert moved_here(held, mine, None) is False  # a move into another store
    record_move(tmp_path / "a", mine)
    assert moved_here(held, mine, None) is True
    assert moved_here(("f" * 16, files.location), mine, None) is False  # another store's claim
    (tmp_path / "a" / IDENTITY_FILE).write_text("{not json")
    assert moved_here(held, mine, None) is False  # damaged: nothing is proved
    assert record_move(tmp_path / "never-used", mine) is False
    assert not (tmp_path / "never-used").exists()
