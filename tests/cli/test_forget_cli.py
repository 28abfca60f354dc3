"""`dreamkeeper forget`: the receipt printed, the exit codes, the whole agent, and a
payload key's agent data key destroyed. The command goes through a real worker (the
Forget workflow), a `dreamkeeper worker` process started on the test's data directory
when the test first runs the command (after it has set the store up: a payload key, a
database URL)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from dreamkeeper.cli.main import main
from dreamkeeper.client.codec import PayloadKeys, generate_key_file
from dreamkeeper.policies.merge import MERGED_FROM
from dreamkeeper.stores.longterm.memory_store import FileMemoryStore
from tests.workflows.conftest import temporal_env  # noqa: F401 - the session's dev server

AGENT = "cli-forget"
FACT = "Ysolde Brack's passport number is X4481922 and it expires in 2031."
DREAMKEEPER = Path(sys.executable).parent / "dreamkeeper"


@pytest.fixture
def cli(tmp_path, capsys, monkeypatch, temporal_env):  # noqa: F811 - the imported fixture
    for name in (
        "DREAMKEEPER_DATA",
        "DREAMKEEPER_AGENT",
        "DREAMKEEPER_URL",
        "DREAMKEEPER_PAYLOAD_KEY",
        "DREAMKEEPER_PAYLOAD_KEY_FILE",
        "DREAMKEEPER_DATABASE_URL",
        "DREAMKEEPER_KEYRING",
    ):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("TEMPORAL_ADDRESS", temporal_env.client.service_client.config.target_host)
    monkeypatch.setenv("DREAMKEEPER_TASK_QUEUE", f"forget-cli-{uuid.uuid4().hex[:8]}")
    workers: list[subprocess.Popen] = []

    def run(*args: str) -> tuple[int, str, str]:
        if not workers:
            workers.append(
                subprocess.Popen(
                    [str(DREAMKEEPER), "--data", str(tmp_path), "worker"],
                    env=dict(os.environ),
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
            )
        code = main(["--data", str(tmp_path), "--agent", AGENT, *args])
        out, err = capsys.readouterr()
        return code, out, err

    yield run
    for worker in workers:
        worker.send_signal(signal.SIGTERM)
        try:
            worker.wait(timeout=30)
        except subprocess.TimeoutExpired:
            worker.kill()
            worker.wait()


def _bytes_anywhere(root: Path, text: str) -> bool:
    return any(
        text.encode() in (Path(d) / n).read_bytes() for d, _, names in os.walk(root) for n in names
    )


def test_forget_by_id_prints_the_receipt_and_verifies(cli, tmp_path):
    generate_key_file(tmp_path / "payload-key")
    keys = PayloadKeys.from_env({}, data_dir=tmp_path).agent_keys()
    assert keys is not None
    first = keys.current(AGENT)  # the agent's payloads have been sealed with this
    entry = FileMemoryStore(tmp_path, AGENT).create(FACT)
    code, out, err = cli("forget", entry.id)
    assert code == 0, err
    assert f"forgot 1 memory of agent {AGENT}" in out
    assert f"removed 1 entry files from agents/{AGENT}/memory" in out
    assert "removed 1 Temporal history keys from payload data keys" in out
    assert "verified:" in out
    assert not _bytes_anywhere(tmp_path, "X4481922")
    assert keys.current(AGENT).key_id != first.key_id  # a new key for what comes next


def test_a_kept_derived_entry_fails_the_verification_until_it_is_forgotten_too(cli, tmp_path):
    store = FileMemoryStore(tmp_path, AGENT)
    entry = store.create(FACT)
    merged = store.create(
        f"{FACT} She travels often.", metadata={MERGED_FROM: json.dumps([entry.id, "0" * 12])}
    )
    code, out, _ = cli("forget", entry.id, "--dry-run")
    assert code == 0 and "would forget 1 memory" in out and merged.id in out
    code, out, _ = cli("forget", entry.id)
    assert code == 1
    assert "NOT verified" in out and merged.id in out
    code, out, _ = cli("forget", "--match", "X4481922", "--derived", "forget", "--json")
    assert code == 0
    receipt = json.loads(out)
    assert receipt["entries"] == [merged.id] and receipt["verification"]["filesContaining"] == []
    assert not _bytes_anywhere(tmp_path, "X4481922")


def test_forget_the_whole_agent(cli, tmp_path):
    FileMemoryStore(tmp_path, AGENT).create(FACT)
    code, out, _ = cli("forget", "--whole-agent")
    assert code == 0 and "forgot the whole agent" in out
    assert not (tmp_path / "agents" / AGENT).exists()
    assert not _bytes_anywhere(tmp_path, "X4481922")


@pytest.mark.parametrize(
    "args",
    [
        ("forget",),
        ("forget", "0123456789ab", "--whole-agent"),
        ("forget", "not-an-id"),
        ("forget", "--match", "x"),
        ("forget", "--derived", "maybe", "--whole-agent"),
    ],
)
def test_bad_forget_arguments_exit_2_and_change_nothing(cli, tmp_path, args):
    entry = FileMemoryStore(tmp_path, AGENT).create(FACT)
    code, _, err = cli(*args)
    assert code == 2, err
    assert FileMemoryStore(tmp_path, AGENT).get(entry.id) is not None


def test_forget_takes_the_entry_out_of_an_export_dreamkeeper_wrote(cli, tmp_path):
    store = FileMemoryStore(tmp_path, AGENT)
    entry = store.create(FACT)
    other = store.create("The user likes rowing on Sundays.")
    out_dir = tmp_path.parent / f"{tmp_path.name}-exports"
    out_dir.mkdir()
    export = out_dir / "a.jsonl"
    assert cli("export", "-o", str(export))[0] == 0
    assert b"X4481922" in export.read_bytes()
    code, out, _ = cli("forget", entry.id, "--json")
    assert code == 0
    receipt = json.loads(out)
    assert {"place": str(export.resolve()), "what": "export lines", "count": 1} in receipt[
        "removed"
    ]
    assert b"X4481922" not in export.read_bytes()
    lines = export.read_text().splitlines()
    assert len(lines) == 2 and other.id in lines[1]  # the header and the other entry
    # Forgetting the whole agent deletes the export it wrote.
    assert cli("forget", "--whole-agent")[0] == 0
    assert not export.exists()


def test_forget_with_a_database_url_erases_the_rows(cli, tmp_path, monkeypatch, database_url):
    from dreamkeeper.stores.postgres.database import Database
    from dreamkeeper.stores.postgres.memory_store import PostgresMemoryStore

    monkeypatch.setenv("DREAMKEEPER_DATABASE_URL", database_url)
    db = Database(database_url, max_size=2)
    try:
        entry = PostgresMemoryStore(db, AGENT).create(FACT)
        code, out, err = cli("forget", entry.id)
        assert code == 0, err
        assert f"forgot 1 memory of agent {AGENT}" in out and "verified:" in out
        assert "rows the database keeps for the agent" in out and "file" not in out
        # No payload key: nothing was sealed, and the receipt says what that leaves.
        assert "left to the operator: memory content is not sealed at rest" in out
        assert "may still hold the forgotten text" in out
        with db.transaction() as conn:
            rows = conn.execute(
                "SELECT count(*) FROM dk_memory WHERE doc LIKE '%X4481922%'"
            ).fetchone()
            journal = conn.execute("SELECT record FROM dreamkeeper_forget_journal").fetchall()
        assert rows is not None and rows[0] == 0
        assert journal and all("X4481922" not in r[0] for r in journal)
        assert not (tmp_path / "forget-journal.jsonl").exists()  # on the database
    finally:
        db.close()


def test_forget_on_a_database_that_seals_prints_the_checks_and_what_is_left(
    cli, tmp_path, monkeypatch, database_url
):
    from dreamkeeper.stores.backends import PostgresBackend

    monkeypatch.setenv("DREAMKEEPER_DATABASE_URL", database_url)
    generate_key_file(tmp_path / "payload-key")
    entry = PostgresBackend(database_url, tmp_path).memory(AGENT).create(FACT)
    code, out, err = cli("forget", entry.id)
    assert code == 0, err
    assert "removed 1 entry rows from" in out and "file" not in out.replace("keyring", "")
    assert "retired key-encryption keys" in out
    assert "checked: every remaining row of the agent is sealed with its new data key" in out
    assert "left to the operator: PostgreSQL keeps deleted rows as dead tuples" in out
