"""Every command gets its stores from the one switch (`stores.backends.open_backend`):
against a database, no command that writes to an agent's store from here leaves anything
under the data directory (the `dream --set-approval` of old wrote its file there, and the
database's workers never saw it); and the per-agent documents the command line writes
land where the workers read them, on both backends."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from dreamkeeper.cli.main import build_parser
from dreamkeeper.core.settings import StoreSettings
from dreamkeeper.stores.backends import open_backend
from dreamkeeper.stores.dream_state.dream_settings import read_approval
from dreamkeeper.stores.forget import exported_files

AGENT = "a1"
FACT = "Quillon keeps the spare key of the Orion 7 shed under the blue heron statue."

# Every command of the parser, by what it does to an agent's store when it runs here:
# a write made by this process (run below against a database), or not (a read, a write
# through the worker, the whole store's tables, or no store at all).
LOCAL_AGENT_WRITES = (
    "save",
    "delete",
    "restore",
    "purge",
    "import",
    "export",  # notes the file it wrote in the agent's documents
    "dream",  # --set-approval
)
OTHERS = (
    "search",
    "tags",
    "show",
    "archived",
    "stats",
    "dream undo",  # through the worker
    "forget",  # through the worker (the Forget workflow: tests/cli/test_forget_cli.py)
    "dream pending",
    "dream approve",
    "dream reject",
    "config",
    "db",
    "db upgrade",
    "db status",
    "migrate",  # from a data directory, which it reads
    "token",
    "token create",  # the store's tokens, not an agent's
    "token list",
    "token revoke",
    "worker",
    "serve",
    "mcp",
    "embed-server",
    "codec-server",
    "dev",
    "demo",  # a throwaway directory of its own
)


def _commands(parser: argparse.ArgumentParser, prefix: str = "") -> list[str]:
    found = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, child in action.choices.items():
                found.append(f"{prefix}{name}")
                found += _commands(child, f"{prefix}{name} ")
    return found


def _files(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*")) if root.exists() else []


def test_every_command_of_the_parser_is_classified():
    commands = _commands(build_parser())
    assert len(commands) > 30, commands  # the walk found the parser's commands
    assert sorted(commands) == sorted(LOCAL_AGENT_WRITES + OTHERS)


def test_no_agent_write_of_the_command_line_lands_under_the_data_directory_of_a_database(
    run, tmp_path, monkeypatch, database_url
):
    monkeypatch.setenv("DREAMKEEPER_DATABASE_URL", database_url)
    data = tmp_path / "data"
    export = tmp_path / "export.jsonl"

    def cli(*args: str, agent: str = AGENT) -> str:
        code, out, err = run("--data", str(data), "--agent", agent, *args)
        assert code == 0, (args, err)
        return out

    ran = set()
    cli("save", "--direct", "--category", "places", FACT)
    gone = cli("save", "--direct", "an Orion 7 note to archive and bring back").strip()
    ran.add("save")
    cli("delete", "--direct", gone)
    ran.add("delete")
    cli("restore", "--direct", gone)
    ran.add("restore")
    cli("purge")
    ran.add("purge")
    cli("export", "--output", str(export))
    ran.add("export")
    cli("import", str(export), agent="a2")
    ran.add("import")
    cli("dream", "--set-approval", "all")
    ran.add("dream")
    assert ran == set(LOCAL_AGENT_WRITES)
    assert _files(data) == []
    backend = open_backend(StoreSettings(data_dir=data, database_url=database_url))
    assert read_approval(backend.documents(AGENT)) == "all"
    assert [e.content for e in backend.memory("a2").entries()] != []


@pytest.mark.parametrize("kind", ["file", "postgres"])
def test_the_approval_setting_round_trips_through_the_command_line(run, tmp_path, kind, request):
    store = StoreSettings(data_dir=tmp_path / "data")
    args = ["--data", str(store.data_dir), "--agent", AGENT]
    if kind == "postgres":
        url = request.getfixturevalue("database_url")
        request.getfixturevalue("monkeypatch").setenv("DREAMKEEPER_DATABASE_URL", url)
        store = StoreSettings(data_dir=store.data_dir, database_url=url)
    assert run(*args, "save", "--direct", FACT)[0] == 0
    for mode in ("risky", "all", "off"):
        code, out, err = run(*args, "dream", "--set-approval", mode)
        assert code == 0, err
        # Where every cycle of the agent reads it: the agent's documents on its backend.
        assert read_approval(open_backend(store).memory(AGENT).documents) == mode
        assert read_approval(open_backend(store).documents(AGENT)) == mode


@pytest.mark.parametrize("kind", ["file", "postgres"])
def test_an_export_is_noted_where_forget_reads_it_on_both_backends(run, tmp_path, kind, request):
    store = StoreSettings(data_dir=tmp_path / "data")
    args = ["--data", str(store.data_dir), "--agent", AGENT]
    if kind == "postgres":
        url = request.getfixturevalue("database_url")
        request.getfixturevalue("monkeypatch").setenv("DREAMKEEPER_DATABASE_URL", url)
        store = StoreSettings(data_dir=store.data_dir, database_url=url)
    export = tmp_path / "export.jsonl"
    code, out, err = run(*args, "save", "--direct", FACT)
    assert code == 0, err
    assert run(*args, "export", "--output", str(export))[0] == 0
    assert FACT in export.read_text()
    assert exported_files(open_backend(store).documents(AGENT)) == [export.resolve()]
    # The forgetting a worker on this backend runs (the CLI's forget starts it there).
    receipt = open_backend(store).forgetting().forget_match(AGENT, "blue heron")
    assert receipt.verification.files_containing == []
    assert FACT not in export.read_text()
