"""Choosing the backend: DREAMKEEPER_DATABASE_URL selects PostgreSQL, unset keeps files;
a database's store identity and readiness (a real PostgreSQL)."""

from __future__ import annotations

import uuid

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dreamkeeper.core.errors import SettingsError
from dreamkeeper.core.settings import StoreSettings, describe, load_settings
from dreamkeeper.stores.backends import open_backend
from dreamkeeper.stores.contract.backend import FILES, POSTGRESQL
from dreamkeeper.stores.files.backend import FileBackend
from dreamkeeper.stores.files.memory_store import FileMemoryStore
from dreamkeeper.stores.postgres.backend import PostgresBackend
from dreamkeeper.stores.postgres.database import Database
from dreamkeeper.stores.postgres.database import describe as describe_url

URL = "postgresql://dk:hunter2@db.example:5433/dreamkeeper"


def test_unset_means_files_and_a_url_means_postgresql(tmp_path):
    assert load_settings({}).database_url is None
    files = open_backend(StoreSettings(data_dir=tmp_path))
    assert files.kind == FILES and isinstance(files.memory("a1"), FileMemoryStore)
    settings = load_settings({"DREAMKEEPER_DATABASE_URL": URL})
    assert settings.database_url == settings.store.database_url == URL
    chosen = open_backend(settings.store)
    assert (
        chosen.kind == POSTGRESQL
        and chosen.location == "postgresql://dk@db.example:5433/dreamkeeper"
    )


@pytest.mark.parametrize(
    "value",
    [
        "mysql://dk:hunter2@db/dreamkeeper",
        "http://dk:hunter2@db/dreamkeeper",
        "postgresql://dk:hunter2@db:notaport/dreamkeeper",
        "host=db password=hunter2 nonsense",
    ],
)
def test_a_bad_database_url_is_refused_naming_the_variable_never_the_password(value):
    with pytest.raises(SettingsError, match=r"^DREAMKEEPER_DATABASE_URL=…: ") as caught:
        load_settings({"DREAMKEEPER_DATABASE_URL": value})
    assert "hunter2" not in str(caught.value)


@given(st.text(min_size=1, max_size=80).filter(lambda s: s.strip()))
def test_any_database_url_is_accepted_or_refused_as_a_settings_error(value):
    try:
        load_settings({"DREAMKEEPER_DATABASE_URL": value})
    except SettingsError as exc:
        assert str(exc).startswith("DREAMKEEPER_DATABASE_URL=…: ")


def test_config_shows_the_database_without_its_password():
    shown = describe(load_settings({"DREAMKEEPER_DATABASE_URL": URL}))["store"]["database_url"]
    assert "hunter2" not in shown and "db.example" in shown
    assert describe(load_settings({}))["store"]["database_url"] == "unset"


def test_a_shard_map_is_refused_with_a_database(tmp_path):
    shards = tmp_path / "shards.json"
    shards.write_text('{"shards": {"a": "qa"}}')
    with pytest.raises(SettingsError, match="SHARD_MAP is for file stores"):
        load_settings({"DREAMKEEPER_DATABASE_URL": URL, "DREAMKEEPER_SHARD_MAP": str(shards)})


def test_the_file_backend_lists_agents_with_a_long_term_store(tmp_path):
    backend = FileBackend(tmp_path)
    assert backend.agents() == [] and backend.read_identity() is None
    backend.memory("b2").create("one")
    backend.memory("a1").create("two")
    (tmp_path / "agents" / "not an id").mkdir()
    assert backend.agents() == ["a1", "b2"]
    assert backend.has_agent("a1") and not backend.has_agent("c3")
    assert backend.identity() == backend.read_identity()


def test_a_database_identity_is_its_store_row_the_same_for_every_worker(database_url):
    one, two = PostgresBackend(database_url), PostgresBackend(database_url)
    db = Database(database_url, max_size=1)
    try:
        with db.transaction() as conn:
            row = conn.execute("SELECT store_id FROM dreamkeeper_store").fetchone()
    finally:
        db.close()
    assert row is not None
    assert one.identity().store_id == two.identity().store_id == row[0]
    assert one.identity().location == describe_url(database_url)
    one.check_ready()  # upgraded by the fixture: ready


def test_a_database_without_the_schema_has_no_identity_and_is_not_ready(postgres_cluster):
    url = postgres_cluster.create_database(f"dk_bare_{uuid.uuid4().hex[:12]}")
    backend = PostgresBackend(url)
    assert backend.read_identity() is None
    for step in (backend.check_ready, backend.identity):
        with pytest.raises(SettingsError, match="no Dreamkeeper schema.*dreamkeeper db upgrade"):
            step()
