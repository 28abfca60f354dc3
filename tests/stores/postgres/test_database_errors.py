"""A database that cannot be reached is said at once, by name: a port with nothing
listening, a database that does not exist, a wrong password, and a server stopped while
in use (then started again: the same `Database` serves again, no restart needed). Real
PostgreSQL servers throughout."""

from __future__ import annotations

import logging
import uuid

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from psycopg import conninfo

from dreamkeeper.core.errors import DatabaseUnavailable
from dreamkeeper.stores.postgres.database import ConnectionLost, Database, describe
from dreamkeeper.stores.postgres.memory_store import PostgresMemoryStore
from dreamkeeper.stores.postgres.migrations import upgrade
from tests.harness.postgres import PostgresCluster, find_bindir, free_port

PASSWORD = "right-Pa55word"
REFUSED = (
    "Connection refused (Is the server running on that host and accepting TCP/IP connections?)"
)


@pytest.fixture(scope="module")
def password_url(postgres_cluster):
    """A database whose owner must give PASSWORD (scram-sha-256); its URL, no password."""
    return postgres_cluster.add_password_role(f"dk_pw_{uuid.uuid4().hex[:8]}", PASSWORD)


def _with_password(url: str, password: str) -> str:
    return conninfo.make_conninfo(url, password=password)


def _unreachable_cases(postgres_cluster, password_url):
    role = conninfo.conninfo_to_dict(password_url)["user"]
    return {
        "nothing listens on the port": (
            f"postgresql://postgres@127.0.0.1:{free_port()}/dreamkeeper",
            REFUSED,
        ),
        "the database does not exist": (
            postgres_cluster.url("dk_no_such_database"),
            'database "dk_no_such_database" does not exist',
        ),
        "the password is wrong": (
            _with_password(password_url, "wrong-" + PASSWORD),
            f'password authentication failed for user "{role}"',
        ),
    }


@pytest.mark.parametrize(
    "case",
    ["nothing listens on the port", "the database does not exist", "the password is wrong"],
)
def test_an_unreachable_database_is_named_with_postgresqls_cause_at_first_use(
    postgres_cluster, password_url, case, caplog
):
    url, cause = _unreachable_cases(postgres_cluster, password_url)[case]
    db = Database(url, max_size=2)
    expected = f"cannot connect to the database at {describe(url)}: {cause}"
    caplog.set_level(logging.INFO)
    try:
        for use in (
            lambda: db.transaction().__enter__(),
            lambda: db.fetch("SELECT 1"),
            lambda: db.dedicated().__enter__(),
            db.ping,
        ):
            with pytest.raises(DatabaseUnavailable) as refused:
                use()
            assert str(refused.value) == expected
            assert refused.value.exit_code == 2
            assert "\n" not in str(refused.value) and "wrong-" not in str(refused.value)
        assert db.failure == cause
        # Said by the first connection, not after a pool retried in the background.
        assert not [r for r in caplog.records if r.name.startswith("psycopg.pool")]
    finally:
        db.close()


def test_the_right_password_connects(password_url):
    db = Database(_with_password(password_url, PASSWORD), max_size=1)
    try:
        assert (
            db.fetch("SELECT current_user")[0][0] == conninfo.conninfo_to_dict(password_url)["user"]
        )
        assert db.failure is None
    finally:
        db.close()


@settings(max_examples=25, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    wrong=st.text(
        st.characters(exclude_characters="\x00", exclude_categories=["Cs"]), min_size=1, max_size=40
    )
)
def test_no_wrong_password_ever_reaches_the_message(password_url, wrong):
    password = "Zq9#" + wrong  # never a word the message would hold anyway
    url = _with_password(password_url, password)
    db = Database(url, max_size=1)
    try:
        with pytest.raises(DatabaseUnavailable) as refused:
            db.fetch("SELECT 1")
        assert password not in str(refused.value)
        assert describe(url) in str(refused.value) and "password authentication failed" in str(
            refused.value
        )
    finally:
        db.close()


def test_a_server_stopped_in_use_is_named_at_once_and_served_again_once_it_is_back():
    bindir = find_bindir()
    if bindir is None:
        pytest.skip("no PostgreSQL server binaries")  # the session fixture reports it in CI
    cluster = PostgresCluster(bindir)  # our own: stopping it disturbs no other test
    cluster.start()
    try:
        url = cluster.create_database("dk_outage")
        db = Database(url, max_size=4)
        upgrade(db)
        store = PostgresMemoryStore(db, "a1")
        saved = store.create("The deploy window is Tuesday 14:00.", category="ops")
        assert [e.id for e in store.entries()] == [saved.id]
        cluster.stop()
        for use in (
            store.entries,
            lambda: PostgresMemoryStore(db, "a1").get(saved.id),
            lambda: store.create("Another fact.", category="ops"),
            lambda: db.fetch("SELECT 1"),
            db.ping,
        ):
            with pytest.raises(DatabaseUnavailable) as down:
                use()
            assert describe(url) in str(down.value), str(down.value)
            assert "Connection refused" in str(down.value) or isinstance(down.value, ConnectionLost)
            assert isinstance(down.value, psycopg.OperationalError) is isinstance(
                down.value, ConnectionLost
            )
        assert db.failure is not None and "Connection refused" in db.failure
        cluster.start()
        db.ping()  # the same Database: no restart of its process
        assert db.failure is None
        again = store.create("Another fact.", category="ops")
        assert PostgresMemoryStore(db, "a1").get(again.id) == again
        assert PostgresMemoryStore(db, "a1").get(saved.id) == saved
        db.close()
    finally:
        cluster.destroy()
