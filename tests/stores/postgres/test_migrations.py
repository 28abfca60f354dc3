"""The schema's versioned migrations and the start-time check (a real PostgreSQL)."""

from __future__ import annotations

import threading
import uuid

import pytest

from dreamkeeper.core.errors import SettingsError
from dreamkeeper.stores.postgres.database import Database, describe
from dreamkeeper.stores.postgres.migrations import (
    MIGRATIONS,
    SCHEMA_VERSION,
    check_schema,
    current_version,
    upgrade,
)


@pytest.fixture
def empty_db(postgres_cluster):
    db = Database(postgres_cluster.create_database(f"dk_empty_{uuid.uuid4().hex[:12]}"), max_size=2)
    yield db
    db.close()


def test_an_empty_database_is_refused_until_upgraded_then_accepted(empty_db):
    with pytest.raises(SettingsError, match="has no Dreamkeeper schema.*dreamkeeper db upgrade"):
        check_schema(empty_db)
    applied = upgrade(empty_db)
    assert [m.version for m in applied] == [m.version for m in MIGRATIONS]
    assert current_version(empty_db) == SCHEMA_VERSION
    check_schema(empty_db)  # no longer raises
    assert upgrade(empty_db) == []  # idempotent: a second run applies nothing


def test_a_database_newer_than_the_code_is_refused_by_check_and_upgrade(empty_db):
    upgrade(empty_db)
    with empty_db.transaction() as conn:
        conn.execute(
            "INSERT INTO dreamkeeper_schema (version, name) VALUES (%s, 'from the future')",
            (SCHEMA_VERSION + 1,),
        )
    for attempt in (check_schema, upgrade):
        with pytest.raises(SettingsError, match="newer than this Dreamkeeper"):
            attempt(empty_db)


def test_concurrent_upgrades_apply_each_migration_once(empty_db):
    results: list[int] = []
    errors: list[BaseException] = []

    def run() -> None:
        db = Database(empty_db.url, max_size=1)
        try:
            results.append(len(upgrade(db)))
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)
        finally:
            db.close()

    threads = [threading.Thread(target=run) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert sorted(results) == [0, 0, 0, len(MIGRATIONS)]
    with empty_db.transaction() as conn:
        rows = conn.execute("SELECT version FROM dreamkeeper_schema ORDER BY version").fetchall()
    assert [r[0] for r in rows] == [m.version for m in MIGRATIONS]


def test_the_store_identity_is_made_once_by_the_first_migration(empty_db):
    upgrade(empty_db)
    with empty_db.transaction() as conn:
        rows = conn.execute("SELECT store_id FROM dreamkeeper_store").fetchall()
    assert len(rows) == 1 and rows[0][0].isalnum() and len(rows[0][0]) == 16


def test_messages_never_show_the_password():
    shown = describe("postgresql://dk:s3cret@db.example:5433/memories")
    assert "s3cret" not in shown
    assert shown == "postgresql://dk@db.example:5433/memories"
