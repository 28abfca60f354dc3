"""What a process is started with: the CLI's argv and stdin, and the environment the
settings are read from."""

from __future__ import annotations

import contextlib
import io
import sys

from hypothesis import strategies as st

from dreamkeeper.cli import main as cli
from dreamkeeper.core.errors import InvalidInput
from dreamkeeper.core.settings import (
    LLMSettings,
    StoreSettings,
    TemporalSettings,
    embedding_settings,
)
from dreamkeeper.core.validation import validate_agent_id
from tests.harness.hostile.sandbox import AGENT, OTHER_AGENT, Sandbox, Surface, Violation
from tests.harness.hostile.strategies import (
    categories,
    entry_ids,
    hostile_text,
    maybe,
    number_text,
    sane_category,
    sane_text,
    tags_lists,
    times,
)

# -- surface: the CLI ---------------------------------------------------------------------

_valid_agents = st.sampled_from([AGENT, AGENT, OTHER_AGENT])
cli_agents = st.integers(0, 3).flatmap(lambda n: hostile_text if n == 3 else _valid_agents)


def _opt(flag: str, values: st.SearchStrategy) -> st.SearchStrategy:
    return st.integers(0, 3).flatmap(
        lambda n: values.map(lambda v: [flag, v]) if n == 3 else st.just([])
    )


def _argv(*parts: st.SearchStrategy) -> st.SearchStrategy:
    return st.tuples(*parts).map(lambda ps: [x for p in ps for x in p])


cli_commands = st.one_of(
    _argv(
        st.just(["save"]),
        maybe(hostile_text, sane_text).map(lambda c: [c]),
        _opt("--category", st.one_of(sane_category, categories)),
        st.lists(tags_lists.map(lambda t: t[:3]), max_size=1).map(
            lambda ts: [x for t in ts for tag in t for x in ("--tag", tag)]
        ),
        _opt("--importance", number_text),
        _opt("--entry-id", entry_ids),
        _opt(
            "--source",
            st.one_of(st.sampled_from(["user", "tool:x", "inferred", "bogus"]), hostile_text),
        ),
        _opt("--idempotency-key", hostile_text),
        st.just(["--direct"]),
    ),
    _argv(
        st.just(["save", "--direct", "--file"]),
        st.sampled_from(["@missing", "@dir", "@binary", "@big", "@ok"]).map(lambda f: [f]),
    ),
    _argv(st.just(["save", "--direct", "-"]), st.just([])),
    _argv(
        st.just(["search"]),
        st.one_of(st.just([]), hostile_text.map(lambda q: [q])),
        _opt("--category", categories),
        _opt("--tag", hostile_text),
        _opt("--created-after", times),
        _opt("--created-before", times),
        _opt("--limit", number_text),
        st.sampled_from([[], ["--json"], ["--include-archived"]]),
    ),
    _argv(st.sampled_from([["show"], ["show", "--json"]]), entry_ids.map(lambda i: [i])),
    _argv(
        st.sampled_from(
            [["delete", "--direct"], ["restore", "--direct"], ["restore", "--direct", "--force"]]
        ),
        entry_ids.map(lambda i: [i]),
    ),
    _argv(st.just(["purge"]), _opt("--retention-days", number_text)),
    st.sampled_from(
        [
            ["tags"],
            ["tags", "--json"],
            ["archived"],
            ["archived", "--json"],
            ["stats"],
            ["--help"],
            ["save", "--help"],
            ["frobnicate"],
            [],
            ["search", "--limit"],
            ["show"],
            ["save", "--direct", "a", "--file", "b"],
        ]
    ),
)
cli_examples = st.tuples(cli_agents, cli_commands, st.binary(max_size=64))


def _cli_files(sandbox: Sandbox) -> dict[str, str]:
    files = sandbox.root / "inputs"
    return {f"@{name}": str(files / name) for name in ("missing", "dir", "binary", "big", "ok")}


def run_cli(sandbox: Sandbox, example) -> bool:
    agent, argv, stdin = example
    paths = _cli_files(sandbox)
    sandbox.before = sandbox.agent_state(_agent_dir_of(agent))
    argv = [paths.get(a, a) for a in argv]
    full = ["--data", str(sandbox.data), "--agent", agent, *argv]
    out, err = io.StringIO(), io.StringIO()
    fake_stdin = io.TextIOWrapper(io.BytesIO(stdin), encoding="utf-8")
    saved_stdin = sys.stdin
    try:
        sys.stdin = fake_stdin
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = cli.main(full)
    finally:
        sys.stdin = saved_stdin
    if code not in (0, 2):
        raise Violation(f"exit {code}: {err.getvalue().strip()[:300]}")
    if code == 2 and err.getvalue().count("\n") > 1:
        raise Violation(f"refusal is not one line: {err.getvalue()[:300]!r}")
    return code == 2


def _agent_dir_of(agent: str) -> str:
    """The agent directory a CLI call may write: its --agent when valid."""
    try:
        return validate_agent_id(agent)
    except InvalidInput:
        return AGENT


CLI = Surface("cli argv", cli_examples, run_cli, agent_of=lambda example: _agent_dir_of(example[0]))


# -- surface: environment settings --------------------------------------------------------

SETTING_NAMES = [
    "DREAMKEEPER_DATA",
    "DREAMKEEPER_AGENT",
    "DREAMKEEPER_ARCHIVE_RETENTION_DAYS",
    "DREAMKEEPER_DECAY_GRACE_DAYS",
    "DREAMKEEPER_DECAY_HALF_LIFE_DAYS",
    "DREAMKEEPER_DECAY_FLOOR",
    "DREAMKEEPER_PROTECT_IMPORTANCE",
    "DREAMKEEPER_PROTECT_REINFORCEMENT",
    "DREAMKEEPER_SAVE_TIMEOUT_SECONDS",
    "TEMPORAL_ADDRESS",
    "TEMPORAL_NAMESPACE",
    "DREAMKEEPER_TASK_QUEUE",
    "DREAMKEEPER_DREAM_CRON",
    "DREAMKEEPER_LLM_BASE_URL",
    "DREAMKEEPER_LLM_MODEL",
    "DREAMKEEPER_LLM_API_KEY",
    "DREAMKEEPER_LLM_TIMEOUT_SECONDS",
    "DREAMKEEPER_EMBEDDING_BASE_URL",
    "DREAMKEEPER_EMBEDDING_MODEL",
    "DREAMKEEPER_EMBEDDING_API_KEY",
    "DREAMKEEPER_EMBEDDING_MIN_SIMILARITY",
    "DREAMKEEPER_EMBEDDING_TIMEOUT_SECONDS",
    "DREAMKEEPER_EMBEDDING_QUERY_TIMEOUT_SECONDS",
    "DREAMKEEPER_EMBEDDING_MAX_INPUT_CHARS",
]
_env_values = st.one_of(
    number_text,
    hostile_text,
    st.sampled_from(
        [
            "localhost:7233",
            "host:²",
            "host:99999999",
            ":7233",
            "host:",
            "0 */12 * * *",
            "* * *",
            "http://127.0.0.1:1/v1",
            "a1",
            "-bad",
            " 5 ",
            "\t",
        ]
    ),
)
env_dicts = st.dictionaries(st.sampled_from(SETTING_NAMES), _env_values, max_size=8)


def run_settings(_: Sandbox, env) -> bool:
    refused = False
    for read in (
        StoreSettings.from_env,
        embedding_settings,
        LLMSettings.from_env,
        TemporalSettings.from_env,
    ):
        try:
            read(env)
        except InvalidInput:  # SettingsError is one
            refused = True
    return refused


SETTINGS = Surface("environment settings", env_dicts, run_settings, needs_disk=False)
