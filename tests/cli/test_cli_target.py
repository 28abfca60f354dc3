"""What the CLI refuses before it touches anything: an unknown agent or data directory,
--url where no serve route does the work, a busy port, a bad setting; and the parser's
shape (global options after the subcommand, help on every option)."""

from __future__ import annotations

import argparse
import io
import json
import logging
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from dreamkeeper.cli.main import build_parser, main
from dreamkeeper.core.errors import NotFound, SettingsError
from dreamkeeper.core.settings import load_settings
from dreamkeeper.core.validation import MAX_CONTENT_CHARS
from dreamkeeper.worker.logs import configure_logging

DREAMKEEPER = Path(sys.executable).parent / "dreamkeeper"


def _files(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


READS_AND_CHANGES = [
    ("search", "anything"),
    ("search",),
    ("tags",),
    ("show", "0123456789ab"),
    ("archived",),
    ("stats",),
    ("export",),
    ("purge",),
    ("delete", "0123456789ab"),
    ("delete", "0123456789ab", "--direct"),
    ("restore", "0123456789ab"),
    ("restore", "0123456789ab", "--direct"),
    ("dream",),
    ("dream", "--dry-run"),
    ("dream", "pending"),
    ("dream", "approve"),
    ("dream", "undo", "0123456789ab"),
    ("dream", "--set-approval", "all"),
]


@pytest.mark.parametrize("args", READS_AND_CHANGES, ids=" ".join)
def test_an_unknown_agent_is_refused_and_nothing_is_written(run, tmp_path, args):
    assert run("--data", str(tmp_path), "--agent", "real", "save", "a fact", "--direct")[0] == 0
    before = _files(tmp_path)
    code, out, err = run("--data", str(tmp_path), "--agent", "reel", *args)
    assert code == 2, err
    assert "unknown agent 'reel'" in err and "real" in err  # names the agents there
    assert out == "" and len(err.strip().splitlines()) == 1
    assert _files(tmp_path) == before  # no agents/reel, no .lock


@pytest.mark.parametrize("args", READS_AND_CHANGES, ids=" ".join)
def test_a_missing_data_directory_is_named_and_not_created(run, tmp_path, args):
    missing = tmp_path / "typo"
    code, out, err = run("--data", str(missing), *args)
    assert code == 2 and f"data directory {missing} does not exist" in err, err
    assert not missing.exists()


def test_a_plan_for_an_unknown_agent_is_refused_before_the_worker(run, tmp_path):
    run("--data", str(tmp_path), "--agent", "real", "save", "a fact", "--direct")
    plan = tmp_path.parent / f"{tmp_path.name}-plan.json"
    plan.write_text(json.dumps({"agent_id": "gone", "as_of": "2026-03-01T00:00:00Z"}))
    before = _files(tmp_path)
    code, _, err = run("--data", str(tmp_path), "dream", "--apply", str(plan))
    assert code == 2 and "unknown agent 'gone'" in err, err
    assert _files(tmp_path) == before


def test_save_and_import_still_make_a_new_agent(run, tmp_path):
    code, out, _ = run("--data", str(tmp_path), "--agent", "fresh", "save", "x y", "--direct")
    assert code == 0
    dump = tmp_path.parent / f"{tmp_path.name}-dump.jsonl"
    assert run("--data", str(tmp_path), "--agent", "fresh", "export", "-o", str(dump))[0] == 0
    code, _, err = run("--data", str(tmp_path / "new"), "--agent", "copy", "import", str(dump))
    assert code == 0, err
    code, found, _ = run("--data", str(tmp_path / "new"), "--agent", "copy", "show", out.strip())
    assert code == 0 and "x y" in found


@pytest.mark.parametrize(
    "args",
    [
        ("export",),
        ("import", "-"),
        ("stats",),
        ("tags",),
        ("purge",),
        ("dream", "--dry-run"),
        ("dream", "--apply", "plan.json"),
        ("dream", "undo", "0123456789ab"),
        ("dream", "--set-approval", "off"),
        ("dream", "pending", "--run", "dream-x-consolidation"),
    ],
    ids=" ".join,
)
@pytest.mark.parametrize("how", ["--url", "DREAMKEEPER_URL"])
def test_url_is_refused_where_no_serve_route_does_the_work(run, tmp_path, monkeypatch, args, how):
    run("--data", str(tmp_path), "--agent", "a1", "save", "a fact", "--direct")
    before = _files(tmp_path)
    url = "http://127.0.0.1:1"
    if how == "--url":
        code, out, err = run("--data", str(tmp_path), "--agent", "a1", "--url", url, *args)
    else:
        monkeypatch.setenv("DREAMKEEPER_URL", url)
        code, out, err = run("--data", str(tmp_path), "--agent", "a1", *args)
    assert code == 2 and how in err and url in err, err
    assert out == "" and _files(tmp_path) == before


def test_every_global_option_works_before_and_after_the_subcommand(run, tmp_path):
    run("--data", str(tmp_path), "--agent", "a1", "save", "Chicago is windy", "--direct")
    before = run("--data", str(tmp_path), "--agent", "a1", "-v", "search", "chicago", "--json")
    after = run("search", "chicago", "--json", "--data", str(tmp_path), "--agent", "a1", "-v")
    assert before[0] == after[0] == 0 and before[1] == after[1]
    assert json.loads(after[1])[0]["content"] == "Chicago is windy"
    # --url after the subcommand is the same --url (an unreachable one: exit 1, named).
    code, _, err = run("--agent", "a1", "search", "x", "--url", "http://127.0.0.1:1")
    assert code == 1 and "http://127.0.0.1:1" in err
    # Given only before the subcommand, an option is not reset by the subcommand's parser.
    args = build_parser().parse_args(["--agent", "a1", "--data", "d", "-v", "mcp"])
    assert (args.agent, args.data, args.verbose) == ("a1", "d", True)
    args = build_parser().parse_args(["mcp", "--agent", "a1", "--url", "http://h:1"])
    assert (args.agent, args.url, args.verbose) == ("a1", "http://h:1", False)


def test_every_option_has_help():
    missing = []

    def walk(parser: argparse.ArgumentParser, name: str) -> None:
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for sub, child in action.choices.items():
                    walk(child, sub)
            elif not action.help:
                missing.append(f"{name} {'/'.join(action.option_strings) or action.dest}")

    walk(build_parser(), "dreamkeeper")
    assert missing == []


def test_verbose_lets_an_error_propagate_with_the_same_exit_code(run, tmp_path):
    (tmp_path / "agents").mkdir()
    (tmp_path / "agents" / "a1").write_text("a file where the agent's directory should be")
    base = ("--data", str(tmp_path), "--agent", "a1")
    code, _, err = run(*base, "save", "x", "--direct")
    assert code == 1 and "Traceback" not in err and err.startswith("error: ")
    # main() re-raises: a debugger or a caller sees the exception itself.
    with pytest.raises(OSError):
        main([*base, "-v", "save", "x", "--direct"])
    unknown = ("--data", str(tmp_path), "--agent", "a2", "show", "0123456789ab")
    with pytest.raises(NotFound, match="unknown agent 'a2'"):
        main(["-v", *unknown])
    # The console script: Python's own traceback and report, and the documented exit
    # codes (1 for the unexpected, 2 for a request that cannot be done as asked).
    env = {k: v for k, v in os.environ.items() if not k.startswith("DREAMKEEPER_")}
    for argv, want in (((*base, "save", "x", "--direct"), 1), (unknown, 2)):
        code, _, quiet = run(*argv)
        proc = subprocess.run([DREAMKEEPER, "-v", *argv], capture_output=True, text=True, env=env)
        assert code == proc.returncode == want, proc.stderr
        lines = proc.stderr.strip().splitlines()
        assert lines[0] == "Traceback (most recent call last):" and "error: " not in proc.stderr
        assert quiet.strip().removeprefix("error: ") in lines[-1]  # "module.Type: message"


def test_a_file_over_the_limit_is_said_to_be_over_it_not_given_a_wrong_size(run, tmp_path):
    big = tmp_path / "big.txt"
    big.write_text("x" * 5_000_000)
    code, _, err = run("--data", str(tmp_path), "save", "--file", str(big), "--direct")
    assert code == 2 and f"more than {MAX_CONTENT_CHARS} characters" in err, err
    assert "80001" not in err
    near = tmp_path / "near.txt"
    near.write_text("y" * (MAX_CONTENT_CHARS + 5))
    code, _, err = run("--data", str(tmp_path), "save", "--file", str(near), "--direct")
    assert code == 2 and f"content is {MAX_CONTENT_CHARS + 5} characters" in err


def test_purge_with_retention_zero_or_less_says_it_keeps_everything(run, tmp_path):
    base = ("--data", str(tmp_path), "--agent", "a1")
    for text in ("one fact", "two facts"):
        entry = run(*base, "save", text, "--direct")[1].strip()
        run(*base, "delete", entry, "--direct")
    for days in ("0", "-1"):
        code, out, _ = run(*base, "purge", "--retention-days", days)
        assert (
            code == 0
            and out.strip() == f"purge is off (retention {days} days): kept all 2 archived"
        )
    assert json.loads(run(*base, "stats")[1])["archived"] == 2


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("DREAMKEEPER_DREAM_CRON", "a b c d e"),
        ("DREAMKEEPER_DREAM_CRON", "0 */12 * *"),
        ("DREAMKEEPER_DREAM_CRON", "60 * * * *"),
        ("DREAMKEEPER_DREAM_CRON", "0 24 * * *"),
        ("DREAMKEEPER_DREAM_CRON", "0 0 0 * *"),
        ("DREAMKEEPER_DREAM_CRON", "0 0 * 13 *"),
        ("DREAMKEEPER_DREAM_CRON", "0 0 * * 8"),
        ("DREAMKEEPER_DREAM_CRON", "*/0 * * * *"),
        ("DREAMKEEPER_DREAM_CRON", "30-10 * * * *"),
        ("DREAMKEEPER_DREAM_CRON", "0 0 ? * *"),
        ("DREAMKEEPER_DREAM_CRON", "0 0 L * *"),
        ("DREAMKEEPER_DREAM_CRON", "0 0 * * 1#2"),
        ("DREAMKEEPER_DREAM_CRON", "1,,2 * * * *"),
        ("DREAMKEEPER_PAYLOAD_KEY", "short"),
        ("DREAMKEEPER_PAYLOAD_KEY", "c2hvcnQ="),
        ("DREAMKEEPER_PAYLOAD_KEY", "00" * 31),
        ("DREAMKEEPER_PAYLOAD_KEY", "bad id:" + "00" * 32),
        ("DREAMKEEPER_LLM_BASE_URL", "notaurl"),
        ("DREAMKEEPER_LLM_BASE_URL", "localhost:11434/v1"),
        ("DREAMKEEPER_LLM_BASE_URL", "http://"),
        ("DREAMKEEPER_EMBEDDING_BASE_URL", "ftp://host/v1"),
        ("DREAMKEEPER_URL", "http://host:port"),
    ],
)
def test_a_bad_setting_is_refused_by_every_command_naming_the_variable(
    run, tmp_path, monkeypatch, name, value
):
    monkeypatch.setenv(name, value)
    for args in (("config",), ("search", "x"), ("serve",), ("worker",)):
        code, out, err = run("--data", str(tmp_path), *args)
        assert code == 2 and err.startswith(f"error: {name}="), (args, err)
        assert out == ""
    if "KEY" in name:
        assert value not in err  # a secret is never echoed


@pytest.mark.parametrize(
    "cron",
    ["0 */12 * * *", "*/5 * * * *", "0 9 * * mon-fri", "30 2 1,15 JAN-jun *", "0 0 * * 7"]
    + ["0 0 * * 0-7/2", "15 3 */2 * SUN", "0 4 1-31/3 * *", "5/15 * * * *"],
)
def test_cron_expressions_temporal_accepts_pass(cron):
    assert load_settings({"DREAMKEEPER_DREAM_CRON": cron}).temporal.dream_cron == cron


def test_good_keys_and_urls_pass():
    settings = load_settings(
        {
            "DREAMKEEPER_PAYLOAD_KEY": "k1:" + "ab" * 32,
            "DREAMKEEPER_LLM_BASE_URL": "http://localhost:11434/v1/",
            "DREAMKEEPER_EMBEDDING_BASE_URL": "https://api.example.com/v1",
        }
    )
    assert settings.llm.base_url == "http://localhost:11434/v1"
    assert settings.embeddings.base_url == "https://api.example.com/v1"
    with pytest.raises(SettingsError, match="DREAMKEEPER_PAYLOAD_KEY=…: the key is 5 bytes"):
        load_settings({"DREAMKEEPER_PAYLOAD_KEY": "c2hvcnQ="})


@pytest.mark.parametrize(("command", "option"), [("serve", "--port"), ("dev", "--serve-port")])
@pytest.mark.parametrize("given", ["env", "option"])
def test_serve_and_dev_refuse_a_busy_port_before_starting_anything(
    run, tmp_path, monkeypatch, command, option, given
):
    """The hint names the command's own option for the memory service's port: `dev`'s
    `--port` is the Temporal dev server's."""
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        if given == "env":
            monkeypatch.setenv("DREAMKEEPER_SERVE_PORT", str(port))
            code, out, err = run("--data", str(tmp_path / "d"), command)
        else:
            code, out, err = run("--data", str(tmp_path / "d"), command, option, str(port))
    assert code == 2, err
    assert f"port {port} (memory service) is already in use: stop whatever holds it" in err
    assert f"choose another with {option} or DREAMKEEPER_SERVE_PORT" in err
    assert not (tmp_path / "d").exists()  # no worker, no dev server, no claim


def test_logs_are_coloured_only_on_a_terminal_without_no_color(monkeypatch):
    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    def warning_line(stream: io.StringIO) -> str:
        configure_logging(stream=stream)
        logging.getLogger("dreamkeeper.test").warning("disk nearly full")
        return stream.getvalue()

    monkeypatch.delenv("NO_COLOR", raising=False)
    try:
        assert "\x1b[" in warning_line(Terminal())
        assert "\x1b[" not in warning_line(io.StringIO())
        monkeypatch.setenv("NO_COLOR", "1")
        assert "\x1b[" not in warning_line(Terminal())
    finally:
        configure_logging()


def test_dev_takes_its_ports_from_the_command_line():
    args = build_parser().parse_args(
        ["dev", "--port", "17233", "--ui-port", "18233", "--serve-port", "18780"]
    )
    assert (args.temporal_port, args.ui_port, args.serve_port) == (17233, 18233, 18780)


def test_dev_refuses_a_taken_grpc_port_given_with_port(run, tmp_path):
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        code, _, err = run("--data", str(tmp_path), "dev", "--demo", "--port", str(port))
    assert code == 2 and f"port {port} (Temporal gRPC) is already in use" in err
    assert "--port (Temporal gRPC), --ui-port (its web UI)" in err


def test_console_script_help_lists_global_options_after_a_subcommand():
    proc = subprocess.run([DREAMKEEPER, "mcp", "--help"], capture_output=True, text=True)
    assert proc.returncode == 0 and "--agent" in proc.stdout and "--url" in proc.stdout
