"""The access-token store on both backends (`TokenStore`): what one instance issues or
revokes, another instance (another serve, the CLI) sees at once; a damaged record opens
nothing and keeps the server guarded."""

from __future__ import annotations

import json

import pytest

from dreamkeeper.core.errors import InvalidInput, NotFound
from dreamkeeper.policies.access import Access
from dreamkeeper.stores.contract.tokens import TokenStore, TokenStoreDamaged
from dreamkeeper.stores.files.tokens import FileTokenStore
from dreamkeeper.stores.tokens import issue, revoke, verify


@pytest.fixture
def make_tokens(tier_db, tmp_path):
    def make() -> TokenStore:
        if tier_db is None:
            return FileTokenStore(tmp_path)
        from dreamkeeper.stores.postgres.tokens import PostgresTokenStore

        return PostgresTokenStore(tier_db)

    return make


def test_a_token_issued_by_one_instance_is_verified_and_revoked_through_another(make_tokens):
    issuer, server = make_tokens(), make_tokens()
    assert not server.issued()
    record, secret = issue(issuer, "ci", ["acme-*"], Access.READ)
    grant = verify(server, secret)
    assert grant is not None and grant.covers("acme-bot") and not grant.covers("other")
    assert not grant.may_write("acme-bot")
    assert [r.id for r in server.all()] == [record.id]
    assert server.issued()
    revoke(issuer, record.id)
    assert verify(server, secret) is None
    assert server.find(record.id).revoked_at is not None
    assert server.issued()  # revoking the last token never reopens the server
    with pytest.raises(NotFound):
        revoke(issuer, "0123456789ab")


def test_a_wrong_secret_or_an_id_given_twice_opens_nothing(make_tokens):
    tokens = make_tokens()
    record, secret = issue(tokens, "ci", ["a1"], Access.WRITE)
    assert verify(tokens, secret[:-1] + ("A" if secret[-1] != "A" else "B")) is None
    with pytest.raises(InvalidInput):
        tokens.add(record)


def test_a_damaged_record_in_the_database_opens_nothing_and_keeps_the_server_guarded(
    database_url,
):
    # (The file store's damaged file: tests/service/test_guard_scopes.py.)
    from dreamkeeper.stores.postgres.database import Database
    from dreamkeeper.stores.postgres.tokens import PostgresTokenStore

    tier_db = Database(database_url, max_size=1)

    with tier_db.transaction() as conn:
        conn.execute(
            "INSERT INTO dreamkeeper_tokens (token_id, record) VALUES (%s, %s)",
            ("0123456789ab", json.dumps({"id": "0123456789ab"})),
        )
    tokens = PostgresTokenStore(tier_db)
    assert tokens.issued()
    assert tokens.find("0123456789ab") is None and tokens.all() == []
    tier_db.close()


# -- a damaged token store keeps every server closed, on both backends ---------------------

SECRET_ROUTE = "/v1/agents/a1/archived"


def _file_record_damage(tokens, tmp_path, field: str, value: object) -> None:
    path = tmp_path / "access" / "tokens.json"
    raw = json.loads(path.read_text())
    raw["tokens"][0][field] = value
    path.write_text(json.dumps(raw))


def _file_damage(name: str, tmp_path) -> None:
    import shutil

    path = tmp_path / "access" / "tokens.json"
    good = path.read_bytes()
    if name == "a record that does not parse":
        _file_record_damage(None, tmp_path, "access", "Write")
    elif name == "a record whose agents are a string":
        _file_record_damage(None, tmp_path, "agents", "a1")
    elif name == "a record with a field missing":
        raw = json.loads(good)
        del raw["tokens"][0]["salt"]
        path.write_text(json.dumps(raw))
    elif name == "no token left":
        path.write_text('{"version": 1, "tokens": []}')
    elif name == "tokens is an object":
        path.write_text('{"version": 1, "tokens": {}}')
    elif name == "a list, not a token file":
        path.write_text("[]")
    elif name == "not JSON":
        path.write_bytes(good[: len(good) // 2])
    elif name == "nested too deep":
        path.write_bytes(b"[" * 100 + b"]" * 100)
    elif name == "not UTF-8":
        path.write_bytes(b"\xff\xfe")
    elif name == "a directory in its place":
        path.unlink()
        path.mkdir()
    elif name == "a symlink in its place":
        elsewhere = tmp_path / "elsewhere.json"
        elsewhere.write_bytes(good)
        path.unlink()
        path.symlink_to(elsewhere)
    elif name == "deleted":
        path.unlink()
    elif name == "its directory deleted":
        shutil.rmtree(path.parent)
    else:
        raise AssertionError(name)


_PG_DAMAGE = {
    "a record that does not parse": "UPDATE dreamkeeper_tokens SET record = replace(record, "
    '\'"access": "write"\', \'"access": "Write"\')',
    "a record whose agents are a string": "UPDATE dreamkeeper_tokens SET record = replace(record,"
    ' \'"agents": ["a1"]\', \'"agents": "a1"\')',
    "not JSON": "UPDATE dreamkeeper_tokens SET record = '{not json'",
    "a row holding another token's record": (
        "UPDATE dreamkeeper_tokens SET token_id = 'ffffffffffff' "
        "WHERE token_id = (SELECT min(token_id) FROM dreamkeeper_tokens)"
    ),
    "no token left": "DELETE FROM dreamkeeper_tokens",
    "the table truncated": "TRUNCATE dreamkeeper_tokens",
    "the table dropped": "DROP TABLE dreamkeeper_tokens",
    "the store identity row deleted": "DELETE FROM dreamkeeper_store",
}
_FILE_DAMAGE = [
    "a record that does not parse",
    "a record whose agents are a string",
    "a record with a field missing",
    "no token left",
    "tokens is an object",
    "a list, not a token file",
    "not JSON",
    "nested too deep",
    "not UTF-8",
    "a directory in its place",
    "a symlink in its place",
    "deleted",
    "its directory deleted",
]
DAMAGE = [("file", d) for d in _FILE_DAMAGE] + [("postgres", d) for d in _PG_DAMAGE]


class Behind:
    """What the guard protects: counts the requests that got past it."""

    def __init__(self) -> None:
        self.seen: list[str] = []

    async def __call__(self, scope, receive, send) -> None:
        self.seen.append(scope["path"])
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"{}"})


def _statuses(
    tokens: TokenStore, secret: str | None, paths: list[str], *, passes: bool = False
) -> list[tuple[int, str]]:
    """The guard's answers; unless `passes`, nothing may get past it."""
    import asyncio

    import httpx

    from dreamkeeper.service.guard import Guard

    behind = Behind()
    guard = Guard(behind, token=None, max_body_bytes=10_000, tokens=tokens, unknown_agent=None)
    headers = {"Authorization": f"Bearer {secret}"} if secret else {}

    async def go() -> list[tuple[int, str]]:
        transport = httpx.ASGITransport(app=guard)
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
            answers = [await client.get(path, headers=headers) for path in paths]
        return [(a.status_code, a.json().get("detail", "")) for a in answers]

    found = asyncio.run(go())
    assert passes or behind.seen == [], behind.seen
    return found


@pytest.mark.parametrize(("backend", "damage"), DAMAGE, indirect=["backend"])
def test_a_damaged_token_store_refuses_every_request_and_never_opens(
    make_tokens, tier_db, tmp_path, backend, damage
):
    """Tokens were issued (one revoked: its record stays); then the store is damaged by
    hand. A server that was running and one that starts now both refuse every request,
    with no token, with the token that worked, and the health check, with a 503 that
    names the store; neither ever answers as an open server."""
    running = make_tokens()
    _, secret = issue(running, "bot", ["a1"], Access.WRITE)
    gone, _ = issue(running, "old", ["a1"], Access.READ)
    revoke(running, gone.id)
    assert _statuses(running, secret, [SECRET_ROUTE], passes=True) == [(200, "")]
    if tier_db is None:
        _file_damage(damage, tmp_path)
    else:
        with tier_db.transaction() as conn:
            conn.execute(_PG_DAMAGE[damage])
    for tokens in (running, make_tokens()):
        found = tokens.snapshot()
        assert found.damage is not None and found.issued and tokens.issued(), damage
        for presented in (None, secret, "dkt_000000000000_" + "x" * 43):
            answers = _statuses(tokens, presented, [SECRET_ROUTE, "/v1/health", "/docs"])
            assert {status for status, _ in answers} == {503}, (damage, answers)
            assert all(tokens.public_name in detail for _, detail in answers)


@pytest.mark.parametrize("backend", ["file", "postgres"], indirect=True)
def test_the_token_that_works_works_until_the_damage_and_again_once_repaired(
    make_tokens, tier_db, tmp_path, backend
):
    tokens = make_tokens()
    _, secret = issue(tokens, "bot", ["a1"], Access.WRITE)
    assert _statuses(tokens, secret, [SECRET_ROUTE], passes=True) == [(200, "")]
    assert _statuses(tokens, None, [SECRET_ROUTE])[0][0] == 401
    if tier_db is None:
        path = tmp_path / "access" / "tokens.json"
        good = path.read_bytes()
        path.write_text('{"version": 1, "tokens": []}')
        assert _statuses(tokens, secret, [SECRET_ROUTE])[0][0] == 503
        path.write_bytes(good)
    else:
        with tier_db.transaction() as conn:
            rows = conn.execute("SELECT token_id, record FROM dreamkeeper_tokens").fetchall()
            conn.execute("DELETE FROM dreamkeeper_tokens")
        assert _statuses(tokens, secret, [SECRET_ROUTE])[0][0] == 503
        with tier_db.transaction() as conn:
            for row in rows:
                conn.execute("INSERT INTO dreamkeeper_tokens VALUES (%s, %s)", row)
    assert _statuses(tokens, secret, [SECRET_ROUTE], passes=True) == [(200, "")]


@pytest.mark.parametrize("backend", ["file", "postgres"], indirect=True)
def test_tokens_issued_before_the_mark_existed_are_marked_and_stay_closed(
    make_tokens, tier_db, tmp_path, backend
):
    """A store whose tokens predate the mark (or whose mark was cleared with tokens left)
    is marked when read: losing its tokens afterwards is damage, not an open server."""
    tokens = make_tokens()
    _, secret = issue(tokens, "bot", ["a1"], Access.WRITE)
    if tier_db is None:
        identity = tmp_path / "dreamkeeper-store.json"
        raw = json.loads(identity.read_text())
        del raw["tokensIssuedAt"]
        identity.write_text(json.dumps(raw))
    else:
        with tier_db.transaction() as conn:
            conn.execute("UPDATE dreamkeeper_store SET tokens_issued_at = NULL")
    reader = make_tokens()
    assert reader.snapshot().damage is None and reader.issued()
    if tier_db is None:
        (tmp_path / "access" / "tokens.json").unlink()
    else:
        with tier_db.transaction() as conn:
            conn.execute("DELETE FROM dreamkeeper_tokens")
    fresh = make_tokens()
    assert fresh.snapshot().damage is not None and fresh.issued()
    assert _statuses(fresh, None, [SECRET_ROUTE])[0][0] == 503


def test_only_clearing_the_mark_and_the_tokens_reopens_a_server_and_not_for_a_running_one(
    tmp_path,
):
    """The deliberate way back to an open server (docs/service.md): remove the token file
    and the identity's mark. A process that saw tokens issued stays closed regardless."""
    running = FileTokenStore(tmp_path)
    issue(running, "bot", ["a1"], Access.WRITE)
    assert running.issued()
    (tmp_path / "access" / "tokens.json").unlink()
    identity = tmp_path / "dreamkeeper-store.json"
    raw = json.loads(identity.read_text())
    del raw["tokensIssuedAt"]
    identity.write_text(json.dumps(raw))
    assert running.snapshot().damage is not None and running.issued()
    fresh = FileTokenStore(tmp_path)
    assert fresh.snapshot() == fresh.snapshot() and not fresh.issued()
    assert fresh.snapshot().damage is None


def test_token_create_never_writes_over_a_damaged_file_but_starts_again_when_it_is_gone(
    tmp_path,
):
    tokens = FileTokenStore(tmp_path)
    _, old = issue(tokens, "bot", ["a1"], Access.WRITE)
    path = tmp_path / "access" / "tokens.json"
    _file_record_damage(None, tmp_path, "access", "Write")
    damaged = path.read_bytes()
    with pytest.raises(TokenStoreDamaged, match="Nothing was changed"):
        issue(tokens, "new", ["a1"], Access.WRITE)
    with pytest.raises(TokenStoreDamaged):
        revoke(tokens, tokens.all()[0].id if tokens.all() else "0123456789ab")
    assert path.read_bytes() == damaged
    path.unlink()  # the operator moves it away
    _, new = issue(tokens, "new", ["a1"], Access.WRITE)
    assert tokens.snapshot().damage is None and tokens.issued()
    assert verify(tokens, new) is not None and verify(tokens, old) is None


def test_a_server_does_not_start_on_a_damaged_token_store(make_tokens, tier_db, tmp_path):
    from dreamkeeper.agent.client import MemoryClient
    from dreamkeeper.core.settings import ServiceSettings, StoreSettings
    from dreamkeeper.service.metrics import ServiceMetrics
    from dreamkeeper.service.state import ServiceState

    issue(make_tokens(), "bot", ["a1"], Access.WRITE)
    if tier_db is None:
        (tmp_path / "access" / "tokens.json").write_text("[]")
        settings = StoreSettings(data_dir=tmp_path)
    else:
        with tier_db.transaction() as conn:
            conn.execute("DELETE FROM dreamkeeper_tokens")
        settings = StoreSettings(data_dir=tmp_path, database_url=tier_db.url)
    memory = MemoryClient(None, settings, "unused")  # type: ignore[arg-type]
    with pytest.raises(TokenStoreDamaged, match="serve does not start") as refused:
        ServiceState(memory, ServiceSettings(), ServiceMetrics())
    assert make_tokens().where in str(refused.value)


def test_a_database_that_does_not_answer_lets_nobody_in(database_url, monkeypatch):
    """The token store cannot be asked: 503 for every request, as for a damaged store,
    never the open server's answer (the fault injected where the store reads). Liveness
    needs no token, so no token store: it still reaches the app (which says the
    database is down), as the readiness probe does (which answers 503)."""
    import psycopg

    from dreamkeeper.stores.postgres.database import Database
    from dreamkeeper.stores.postgres.tokens import PostgresTokenStore

    db = Database(database_url, max_size=1)
    try:
        tokens = PostgresTokenStore(db)
        _, secret = issue(tokens, "bot", ["a1"], Access.WRITE)

        def down(*_: object, **__: object) -> None:
            raise psycopg.OperationalError("connection refused")

        monkeypatch.setattr(db, "fetch", down)
        for presented in (None, secret):
            answers = _statuses(tokens, presented, [SECRET_ROUTE, "/v1/agents/a1/search"])
            assert {status for status, _ in answers} == {503}, answers
            assert all("cannot reach the database" in detail for _, detail in answers)
            probes = _statuses(tokens, presented, ["/v1/health", "/v1/ready"], passes=True)
            assert probes == [(200, ""), (200, "")]  # answered by what is behind the guard
    finally:
        db.close()


def test_upgrading_a_database_with_tokens_marks_it(postgres_cluster):
    """A database whose tokens were issued before the mark existed: the migration that
    adds the mark sets it, so emptying the table afterwards keeps the servers closed."""
    import uuid

    from dreamkeeper.stores.postgres.database import Database
    from dreamkeeper.stores.postgres.migrations import MIGRATIONS, upgrade
    from dreamkeeper.stores.postgres.tokens import PostgresTokenStore

    db = Database(postgres_cluster.create_database(f"dk_mark_{uuid.uuid4().hex[:12]}"), max_size=2)
    try:
        marking = next(m for m in MIGRATIONS if "tokens_issued_at" in m.sql)
        with db.transaction() as conn:
            conn.execute(
                "CREATE TABLE dreamkeeper_schema (version integer PRIMARY KEY, name text "
                "NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())"
            )
            for migration in MIGRATIONS:
                if migration.version >= marking.version:
                    break
                conn.execute(migration.sql)
                conn.execute(
                    "INSERT INTO dreamkeeper_schema (version, name) VALUES (%s, %s)",
                    (migration.version, migration.name),
                )
            record, _ = _record_for_upgrade()
            conn.execute(
                "INSERT INTO dreamkeeper_tokens (token_id, record) VALUES (%s, %s)",
                (record.id, json.dumps(record.to_json())),
            )
        assert [m.version for m in upgrade(db)][0] == marking.version
        with db.transaction() as conn:
            conn.execute("DELETE FROM dreamkeeper_tokens")
        tokens = PostgresTokenStore(db)
        assert tokens.issued() and tokens.snapshot().damage is not None
    finally:
        db.close()


def _record_for_upgrade():
    """A token record made as `issue` makes one, without a store."""

    class Held:
        record = None

        def find(self, token_id):
            return None

        def add(self, record):
            Held.record = record

    secret = issue(Held(), "old", ["a1"], Access.WRITE)[1]  # type: ignore[arg-type]
    return Held.record, secret
