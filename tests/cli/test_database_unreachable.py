"""Every command that uses the database, `worker`, `serve` and `dev` included, answers a
database it cannot reach with exit 2 and one line: the database (host, port, name; never
the password) and the cause PostgreSQL gave. Three real causes: a port with nothing
listening, a database that does not exist on a running server, a wrong password."""

from __future__ import annotations

import base64
import os
import uuid

import pytest
from psycopg import conninfo

from dreamkeeper.cli.main import build_parser
from dreamkeeper.stores.postgres.database import describe
from tests.harness.postgres import free_port
from tests.workflows.conftest import temporal_env  # noqa: F401 - the session's dev server

ENTRY = "0123456789ab"
WRONG = "wrong-Secret-7"

# Arguments that get each command past its own checks of the input, to the database.
COMMANDS: dict[str, list[str]] = {
    "save": ["save", "The deploy window is Tuesday."],
    "search": ["search", "deploy"],
    "tags": ["tags"],
    "show": ["show", ENTRY],
    "delete": ["delete", ENTRY],
    "restore": ["restore", ENTRY],
    "archived": ["archived"],
    "purge": ["purge"],
    "stats": ["stats"],
    "forget": ["forget", ENTRY],
    "dream": ["dream", "--dry-run"],
    "dream undo": ["dream", "undo", "r1"],
    "dream pending": ["dream", "pending"],
    "dream approve": ["dream", "approve"],
    "dream reject": ["dream", "reject"],
    "export": ["export"],
    "import": ["import", "{export}"],
    "db": ["db"],
    "db upgrade": ["db", "upgrade"],
    "db status": ["db", "status"],
    "migrate": ["--data", "{data}", "migrate", "--to", "{url}"],
    "token": ["token", "list"],
    "token create": ["token", "create", "bot", "--scope", "a1"],
    "token list": ["token", "list"],
    "token revoke": ["token", "revoke", ENTRY],
    "worker": ["worker"],
    "serve": ["serve", "--port", "{port}"],
    "mcp": ["mcp"],
    "codec-server": ["codec-server", "--port", "{port}"],
    "dev": ["dev", "--port", "{port}", "--ui-port", "{port}"],
}
# Commands that never open the database, and why.
WITHOUT_THE_DATABASE = {
    "config": "prints the settings (the URL without its password)",
    "demo": "a tour of a throwaway file store",
    "embed-server": "serves an embedding model",
}


def _every_command() -> set[str]:
    found = set()
    for parser in _subparsers(build_parser()):
        found.add(parser.prog.removeprefix("dreamkeeper "))
    return found


def _subparsers(parser):
    for action in parser._actions:
        choices = getattr(action, "choices", None)
        if isinstance(choices, dict):
            for child in choices.values():
                yield child
                yield from _subparsers(child)


def test_every_command_is_tried_here_or_said_not_to_use_the_database():
    assert set(COMMANDS) | set(WITHOUT_THE_DATABASE) == _every_command()
    assert not set(COMMANDS) & set(WITHOUT_THE_DATABASE)


@pytest.fixture(scope="module")
def password_url(postgres_cluster):
    return postgres_cluster.add_password_role(f"dk_pw_{uuid.uuid4().hex[:8]}", "right-Secret-7")


@pytest.fixture(scope="module")
def export_file(tmp_path_factory):
    """An export of a file store, for `import` (read before the database is asked)."""
    from dreamkeeper.cli.main import main

    data = tmp_path_factory.mktemp("export-source")
    assert main(["--data", str(data), "--agent", "a1", "save", "--direct", "A fact."]) == 0
    path = data / "a1.jsonl"
    assert main(["--data", str(data), "--agent", "a1", "export", "-o", str(path)]) == 0
    return path


CASES = ["nothing listens on the port", "the database does not exist", "the password is wrong"]


def _case(name: str, postgres_cluster, password_url) -> tuple[str, str]:
    if name == CASES[0]:
        return (
            f"postgresql://dreamkeeper@127.0.0.1:{free_port()}/dreamkeeper",
            "Connection refused (Is the server running on that host and accepting TCP/IP "
            "connections?)",
        )
    if name == CASES[1]:
        return postgres_cluster.url("dk_not_made"), 'database "dk_not_made" does not exist'
    user = conninfo.conninfo_to_dict(password_url)["user"]
    return (
        conninfo.make_conninfo(password_url, password=WRONG),
        f'password authentication failed for user "{user}"',
    )


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_an_unreachable_database_is_one_line_naming_it_and_exit_2(
    run,
    monkeypatch,
    tmp_path,
    temporal_env,  # noqa: F811 - the imported fixture
    postgres_cluster,
    password_url,
    export_file,
    command,
    case,
):
    url, cause = _case(case, postgres_cluster, password_url)
    monkeypatch.setenv("DREAMKEEPER_DATABASE_URL", url)
    monkeypatch.setenv("DREAMKEEPER_DATA", str(tmp_path))
    monkeypatch.setenv("DREAMKEEPER_SERVE_PORT", str(free_port()))
    monkeypatch.setenv("DREAMKEEPER_PAYLOAD_KEY", base64.b64encode(os.urandom(32)).decode())
    # Temporal answers: what the commands that go through it meet is the database.
    monkeypatch.setenv("TEMPORAL_ADDRESS", temporal_env.client.service_client.config.target_host)
    values = {"url": url, "data": str(tmp_path), "export": str(export_file)}
    args = [a.format(port=free_port(), **values) for a in COMMANDS[command]]
    code, out, err = run(*args)
    assert (code, err) == (
        2,
        f"error: cannot connect to the database at {describe(url)}: {cause}\n",
    ), out
    assert WRONG not in out + err


def test_a_database_url_that_is_not_utf8_is_a_setting_refused(run, monkeypatch):
    # A byte of the environment that is not UTF-8 arrives as a lone surrogate.
    monkeypatch.setenv("DREAMKEEPER_DATABASE_URL", "postgresql://dk@127.0.0.1/dk\udcff")
    code, _, err = run("db", "status")
    assert (code, err) == (
        2,
        "error: DREAMKEEPER_DATABASE_URL=…: is not a PostgreSQL URL psycopg can parse\n",
    )
