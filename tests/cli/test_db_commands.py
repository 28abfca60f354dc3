"""`dreamkeeper db status` / `db upgrade`, and the schema check that refuses `worker`,
`serve` and `dev` on a database older or newer than the code (a real PostgreSQL)."""

from __future__ import annotations

import json
import os
import socket
import uuid

import pytest

from dreamkeeper.stores.postgres.database import Database, describe
from dreamkeeper.stores.postgres.migrations import SCHEMA_VERSION, upgrade


@pytest.fixture
def bare_url(postgres_cluster):
    """A database Dreamkeeper has never upgraded."""
    return postgres_cluster.create_database(f"dk_cli_{uuid.uuid4().hex[:12]}")


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _ports(command: str) -> list[str]:
    """Free ports for every port the command binds: `serve`'s memory service; `dev`'s
    Temporal gRPC, web UI and memory service (its --port is Temporal's)."""
    if command == "serve":
        return ["--port", str(_free_port())]
    if command == "dev":
        return [
            *("--port", str(_free_port())),
            *("--ui-port", str(_free_port())),
            *("--serve-port", str(_free_port())),
        ]
    return []


def test_status_then_upgrade_then_status(run, bare_url):
    code, out, _ = run("db", "status", "--database", bare_url)
    assert code == 2 and f"schema: version 0 (this Dreamkeeper: {SCHEMA_VERSION})" in out
    assert "needs `dreamkeeper db upgrade`" in out
    code, out, _ = run("db", "upgrade", "--database", bare_url)
    assert code == 0 and "applied 1: store identity" in out
    assert f"upgraded to schema version {SCHEMA_VERSION}" in out
    code, out, _ = run("db", "upgrade", "--database", bare_url)
    assert code == 0 and "already at" in out and "applied" not in out
    code, out, _ = run("db", "--json", "--database", bare_url)  # `db` alone is status
    status = json.loads(out)
    assert code == 0 and status["state"] == "current"
    assert status["database"] == describe(bare_url) and len(status["storeId"]) == 16


def test_the_environment_names_the_database_and_none_is_refused(run, monkeypatch, database_url):
    code, _, err = run("db", "status")
    assert code == 2 and "needs a database: set DREAMKEEPER_DATABASE_URL" in err
    monkeypatch.setenv("DREAMKEEPER_DATABASE_URL", database_url)
    code, out, _ = run("db", "status")
    assert code == 0 and "current" in out


@pytest.mark.parametrize("command", ["worker", "serve", "dev"])
def test_a_database_older_than_the_code_refuses_to_start(run, monkeypatch, bare_url, command):
    monkeypatch.setenv("DREAMKEEPER_DATABASE_URL", bare_url)
    ports = _ports(command)
    code, _, err = run(command, *ports)
    assert code == 2, err
    assert err.strip() == (
        f"error: the database at {describe(bare_url)} has no Dreamkeeper schema; this "
        f"Dreamkeeper needs version {SCHEMA_VERSION}: run `dreamkeeper db upgrade`"
    )


@pytest.mark.parametrize("command", ["worker", "serve", "dev"])
def test_a_database_newer_than_the_code_refuses_to_start(run, monkeypatch, bare_url, command):
    db = Database(bare_url, max_size=1)
    try:
        upgrade(db)
        with db.transaction() as conn:
            conn.execute(
                "INSERT INTO dreamkeeper_schema (version, name) VALUES (%s, 'from the future')",
                (SCHEMA_VERSION + 1,),
            )
    finally:
        db.close()
    monkeypatch.setenv("DREAMKEEPER_DATABASE_URL", bare_url)
    ports = _ports(command)
    code, _, err = run(command, *ports)
    assert code == 2, err
    assert f"has schema version {SCHEMA_VERSION + 1}, newer than this Dreamkeeper's" in err
    code, out, _ = run("db", "status")
    assert code == 2 and "newer than this Dreamkeeper" in out


def test_migrate_copies_a_data_directory_and_a_rerun_adds_nothing(run, tmp_path, database_url):
    from dreamkeeper.stores.files.agent_keys import FileAgentKeyStore
    from tests.stores.test_migrate import generated_store

    generated_store(tmp_path / "data", agents=2)
    FileAgentKeyStore(tmp_path / "data", [("k1", os.urandom(32))]).current("agent-0")
    code, out, err = run("--data", str(tmp_path / "data"), "migrate", "--to", database_url)
    assert code == 0, err
    assert "[1/2] agent agent-0:" in err and "[2/2] agent agent-1:" in err
    assert "payload data keys: 1 (1 new this run)" in err
    assert "migrated 2 agents" in out and "counts and content hashes match" in out
    assert "1 payload data keys" in out
    code, out, err = run("--data", str(tmp_path / "data"), "migrate", "--to", database_url)
    assert code == 0 and "(0 new this run)" in out
    assert "payload data keys: 1 (0 new this run)" in err


def test_migrate_carries_the_access_tokens_and_says_so(run, tmp_path, database_url, monkeypatch):
    from dreamkeeper.policies.access import Access
    from dreamkeeper.stores.files.tokens import FileTokenStore
    from dreamkeeper.stores.tokens import issue
    from tests.stores.test_migrate import generated_store

    generated_store(tmp_path / "data", agents=1)
    record, _ = issue(FileTokenStore(tmp_path / "data"), "bot", ["agent-0"], Access.READ)
    code, out, err = run("--data", str(tmp_path / "data"), "migrate", "--to", database_url)
    assert code == 0, err
    assert "access tokens: 1 (1 new this run" in err and "marked as issuing tokens" in err
    assert "1 access tokens" in out
    monkeypatch.setenv("DREAMKEEPER_DATABASE_URL", database_url)
    code, out, _ = run("token", "list", "--json")
    assert code == 0 and [t["id"] for t in json.loads(out)] == [record.id]


def test_migrate_refuses_a_database_without_the_schema(run, tmp_path, bare_url):
    from tests.stores.test_migrate import generated_store

    generated_store(tmp_path / "data", agents=1)
    code, _, err = run("--data", str(tmp_path / "data"), "migrate", "--to", bare_url)
    assert code == 2 and "run `dreamkeeper db upgrade`" in err
    code, _, err = run("--data", str(tmp_path / "nowhere"), "migrate", "--to", bare_url)
    assert code == 2 and "does not exist" in err


def test_export_from_files_and_import_into_a_database_then_export_again(
    run, tmp_path, monkeypatch, database_url
):
    from dreamkeeper.stores.files.backend import FileBackend
    from dreamkeeper.stores.migrate import content_digest
    from dreamkeeper.stores.postgres.backend import PostgresBackend

    source = FileBackend(tmp_path / "data")
    store = source.memory("a1")
    kept = store.create("Invoices are archived after seven years", category="finance")
    gone = store.create("The VPN gateway lives in Frankfurt")
    store.archive(gone.id, "moved")
    out_file = tmp_path / "a1.jsonl"
    base = ["--data", str(tmp_path / "data"), "--agent", "a1"]
    assert run(*base, "export", "--include-archived", "-o", str(out_file))[0] == 0

    monkeypatch.setenv("DREAMKEEPER_DATABASE_URL", database_url)
    code, out, err = run(*base, "import", str(out_file))
    assert code == 0, err
    ours = PostgresBackend(database_url).memory("a1").entries(include_archived=True)
    assert content_digest(ours) == content_digest(store.entries(include_archived=True))
    assert {e.id for e in ours if e.is_archived} == {gone.id}
    code, again, _ = run(*base, "import", str(out_file))  # idempotent by id
    assert code == 0 and len(PostgresBackend(database_url).memory("a1")) == 1
    code, exported, _ = run(*base, "export", "--include-archived")
    assert code == 0 and kept.id in exported and gone.id in exported
    code, _, err = run(*base[:2], "--agent", "nobody", "export")
    assert code == 2 and "no store in the database" in err


def test_tokens_made_by_the_cli_live_in_the_database_every_server_reads(
    run, monkeypatch, tmp_path, database_url
):
    from dreamkeeper.stores.postgres.database import Database
    from dreamkeeper.stores.postgres.tokens import PostgresTokenStore
    from dreamkeeper.stores.tokens import verify

    monkeypatch.setenv("DREAMKEEPER_DATABASE_URL", database_url)
    monkeypatch.setenv("DREAMKEEPER_DATA", str(tmp_path / "this-host"))
    code, out, _ = run("token", "create", "ci", "--scope", "acme-*", "--json")
    assert code == 0
    created = json.loads(out)
    db = Database(database_url, max_size=1)
    try:
        tokens = PostgresTokenStore(db)  # what another serve on the database reads
        assert verify(tokens, created["token"]) is not None
        code, _, _ = run("token", "revoke", created["id"])
        assert code == 0 and verify(tokens, created["token"]) is None
    finally:
        db.close()
    assert not (tmp_path / "this-host" / "access").exists()  # nothing on this host's disk
