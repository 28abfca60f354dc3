from __future__ import annotations

import base64
import json
import subprocess
import sys
from pathlib import Path

import pytest

from dreamkeeper.cli.main import main


@pytest.fixture
def cli(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("DREAMKEEPER_DATA", raising=False)
    monkeypatch.delenv("DREAMKEEPER_AGENT", raising=False)

    def run(*args: str) -> tuple[int, str, str]:
        code = main(["--data", str(tmp_path), "--agent", "cli-test", *args])
        out, err = capsys.readouterr()
        return code, out, err

    return run


def test_save_search_show_delete_restore(cli):
    code, out, _ = cli(
        "save",
        "User lives in Chicago",
        "--category",
        "user/location",
        "--tag",
        "home",
        "--source",
        "user",
        "--importance",
        "0.9",
        "--direct",
    )
    assert code == 0
    entry_id = out.strip()
    assert len(entry_id) == 12

    code, out, _ = cli("search", "chicago")
    assert code == 0 and f"[{entry_id}]" in out and "source=user" in out

    code, out, _ = cli("search", "chicago", "--json")
    hits = json.loads(out)
    assert (
        hits[0]["id"] == entry_id
        and hits[0]["importanceScore"] == 0.9
        and isinstance(hits[0]["score"], float)
    )

    code, out, _ = cli("show", entry_id, "--json")
    assert json.loads(out)["content"] == "User lives in Chicago"

    code, out, _ = cli("delete", entry_id, "--direct")
    assert code == 0 and "archived" in out and "restore" in out
    code, out, _ = cli("search", "chicago")
    assert entry_id not in out and "search_working_memory" in out
    code, out, _ = cli("archived", "--json")
    assert [e["archiveReason"] for e in json.loads(out)] == ["deleted by agent tool"]

    assert cli("restore", entry_id, "--direct")[0] == 0
    assert f"[{entry_id}]" in cli("search", "chicago")[1]


def test_browse_appends_the_taxonomy_even_when_nothing_matched(cli):
    cli("save", "fact one", "--category", "a/b", "--direct")
    code, out, _ = cli("search", "--category", "zzz")
    assert code == 0 and "No live memories" in out and "a/b (1)" in out


def test_search_filters_by_created_date_inclusive_at_the_bound(cli):
    entry_id = cli("save", "Dentist on Friday", "--direct")[1].strip()
    created = json.loads(cli("show", entry_id, "--json")[1])["createdAt"]
    for args, found in (
        (("--created-after", created), True),
        (("--created-before", created), True),
        (("--created-before", "2000-01-01"), False),
        (("--created-after", "2000-01-01", "--created-before", "2999-12-31"), True),
    ):
        code, out, _ = cli("search", "dentist", *args)
        assert code == 0 and (f"[{entry_id}]" in out) is found, args
    code, out, _ = cli("search", "--created-before", "2000-01-01")
    assert code == 0 and "No live memories" in out


def test_tags_lists_the_distinct_tags_of_live_entries_sorted(cli):
    cli("save", "one", "--tag", "work", "--tag", "Travel", "--direct")
    cli("save", "two", "--tag", "travel", "--tag", "anniversary", "--direct")
    gone = cli("save", "three", "--tag", "zebra", "--direct")[1].strip()
    cli("delete", gone, "--direct")
    code, out, _ = cli("tags")
    assert code == 0 and out.splitlines() == ["anniversary", "Travel", "work"]
    assert json.loads(cli("tags", "--json")[1]) == ["anniversary", "Travel", "work"]


def test_unknown_source_is_dropped_and_said(cli):
    code, out, err = cli("save", "a fact", "--source", "rumour", "--direct")
    assert code == 0 and "'rumour'" in err and "dropped" in err
    assert json.loads(cli("show", out.strip(), "--json")[1])["metadata"] == {}


@pytest.mark.parametrize(
    "args",
    [
        ("save", "x", "--category", "../etc"),
        ("save", "x", "--importance", "7"),
        ("save", "x", "--importance", "lots"),
        ("show", "nothex"),
        ("show", "0123456789ab"),
        ("search", "x", "--limit", "0"),
        ("search", "x", "--created-after", "tuesday"),
        ("frobnicate",),
    ],
)
def test_bad_input_exits_2_with_one_line(cli, args):
    code, out, err = cli(*args)
    assert code == 2
    assert out == "" and len(err.strip().splitlines()) == 1 and err.startswith("error: ")


def test_bad_agent_from_the_environment_exits_2(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("DREAMKEEPER_AGENT", "../../root")
    assert main(["--data", str(tmp_path), "stats"]) == 2
    assert "DREAMKEEPER_AGENT" in capsys.readouterr().err


def test_purge_and_stats(cli):
    entry_id = cli("save", "short lived", "--direct")[1].strip()
    cli("delete", entry_id, "--direct")
    code, out, _ = cli("purge", "--retention-days", "90")
    assert code == 0 and "purged 0 of 1 archived (1 within retention" in out
    stats = json.loads(cli("stats")[1])
    assert stats["live"] == 0 and stats["archived"] == 1 and stats["skippedFiles"] == {}


def test_unexpected_failure_exits_1(cli, tmp_path):
    (tmp_path / "agents").write_text("a file where a directory should be")
    code, _, err = cli("save", "anything", "--direct")
    assert code == 1 and err.startswith("error: ")


def test_console_script_is_installed():
    exe = Path(sys.executable).parent / "dreamkeeper"
    assert exe.is_file(), "the dreamkeeper console script should be installed in the venv"
    proc = subprocess.run([exe, "--help"], capture_output=True, text=True)
    assert proc.returncode == 0 and "save" in proc.stdout


def test_demo_runs(capsys, tmp_path):
    from dreamkeeper.cli.demo import run_demo

    run_demo(data_dir=tmp_path)
    out = capsys.readouterr().out
    assert "Restore" in out and "archived" in out and "created" in out


def test_writes_without_a_reachable_server_say_how_to_proceed(cli, monkeypatch):
    monkeypatch.setenv("TEMPORAL_ADDRESS", "127.0.0.1:1")
    code, _, err = cli("save", "a fact")
    assert code == 1 and "dreamkeeper dev" in err and "--direct" in err


def test_search_filters_by_metadata(cli):
    mine = cli("save", "Dentist on Friday", "--source", "user", "--direct")[1].strip()
    other = cli("save", "Dentist reviews found online", "--source", "tool:web", "--direct")[
        1
    ].strip()
    code, out, _ = cli("search", "dentist", "--meta", "source=user")
    assert code == 0 and f"[{mine}]" in out and f"[{other}]" not in out
    code, _, err = cli("search", "dentist", "--meta", "source")
    assert code == 2 and "KEY=VALUE" in err


def test_config_prints_the_effective_settings_with_secrets_hidden(cli, tmp_path, monkeypatch):
    monkeypatch.setenv("DREAMKEEPER_LLM_API_KEY", "sk-very-secret")
    key = base64.b64encode(b"k" * 32).decode()
    monkeypatch.setenv("DREAMKEEPER_PAYLOAD_KEY", key)
    monkeypatch.setenv("DREAMKEEPER_DECAY_HALF_LIFE_DAYS", "12")
    code, out, _ = cli("config", "--json")
    shown = json.loads(out)
    assert code == 0
    assert shown["store"]["agent_id"] == "cli-test" and shown["store"]["data_dir"] == str(tmp_path)
    assert shown["store"]["decay.half_life"] == "12 days"
    assert (
        shown["llm"]["api_key"] == "set (hidden)"
        and shown["codec"]["payload_key"] == "set (hidden)"
    )
    assert "sk-very-secret" not in out and key not in out


def test_config_refuses_an_out_of_range_setting_with_exit_2(cli, monkeypatch):
    monkeypatch.setenv("DREAMKEEPER_DECAY_FLOOR", "7")
    code, _, err = cli("config")
    assert code == 2 and "DREAMKEEPER_DECAY_FLOOR" in err


def test_config_shows_what_the_settings_imply(cli, tmp_path, monkeypatch):
    """The data directory's key in use, TLS implied by an API key, and the activity
    slots the worker really gets (threads less the local-activity reserve)."""
    (tmp_path / "payload-key").write_text("k1:" + "00" * 32 + "\n")
    monkeypatch.setenv("TEMPORAL_API_KEY", "api-secret")
    monkeypatch.setenv("DREAMKEEPER_WORKER_ACTIVITY_THREADS", "8")
    code, out, _ = cli("config", "--json")
    shown = json.loads(out)
    assert code == 0 and "api-secret" not in out
    assert shown["codec"]["payload_key_file"].startswith(str(tmp_path / "payload-key"))
    assert shown["temporal"]["tls"].startswith("True")
    assert shown["worker"]["activity_slots"] == "6"


def test_save_replaces_is_checked_by_subject_and_force_replace_overrides(cli, tmp_path):
    from dreamkeeper.stores.files.memory_store import FileMemoryStore

    cats = cli("save", "Mei is allergic to cats.", "--direct")[1].strip()
    code, out, err = cli("save", "Mei started a new job.", "--replaces", cats, "--direct")
    assert code == 2 and out == ""
    assert "another attribute (employer, not allergy)" in err and "force_replace" in err
    store = FileMemoryStore(tmp_path, "cli-test")
    assert [e.id for e in store.entries()] == [cats]
    code, out, err = cli(
        "save",
        "Mei started a new job.",
        "--replaces",
        cats,
        "--force-replace",
        "--valid-from",
        "2026-02-01",
        "--direct",
    )
    assert code == 0, err
    new = FileMemoryStore(tmp_path, "cli-test").require(out.strip())
    assert new.valid_from is not None and new.valid_from.isoformat().startswith("2026-02-01")
    assert f"replaced {cats} over the subject check" in err
    assert FileMemoryStore(tmp_path, "cli-test").require(cats).superseded_by == new.id
    code, _, err = cli("save", "Mei moved.", "--valid-from", "someday", "--direct")
    assert code == 2 and "--valid-from" in err


def test_a_replaces_the_check_cannot_tell_is_saved_beside_it_with_a_note(cli, tmp_path):
    from dreamkeeper.stores.files.memory_store import FileMemoryStore

    old = cli("save", "Ana Costa lives in Lisbon.", "--direct")[1].strip()
    code, out, err = cli(
        "save", "Ana Costa is renting in Ghent these days.", "--replaces", old, "--direct"
    )
    assert code == 0, err
    assert f"kept {old} current, linked as possibly replaced" in err
    store = FileMemoryStore(tmp_path, "cli-test")
    assert store.require(old).is_current and store.require(out.strip()).is_current
    code, out, _ = cli("search", "Ana Costa Lisbon Ghent")
    assert "may be replaced by: [" in out


def test_a_change_saved_directly_is_shown_with_its_dated_conflict(cli, tmp_path):
    old = cli(
        "save", "Omar Haddad's manager is Ana Ruiz.", "--direct", "--valid-from", "2025-06-01"
    )[1].strip()
    new = cli(
        "save", "Li Wei is now Omar Haddad's manager.", "--direct", "--valid-from", "2026-01-02"
    )[1].strip()
    code, out, _ = cli("search", "Who is Omar Haddad's manager?")
    assert code == 0
    lines = [line for line in out.splitlines() if line.startswith("- [")]
    assert lines[0].startswith(f"- [{new}]") and lines[1].startswith(f"- [{old}]")
    assert f"newer: [{new}], 2026-01-02" in lines[1]
    assert f"older: [{old}], 2025-06-01" in lines[0]
