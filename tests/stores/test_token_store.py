"""The access-token store on both backends (`TokenStore`): what one instance issues or
revokes, another instance (another serve, the CLI) sees at once; a damaged record opens
nothing and keeps the server guarded."""

from __future__ import annotations

import json

import pytest

from dreamkeeper.core.errors import InvalidInput, NotFound
from dreamkeeper.policies.access import Access
from dreamkeeper.stores.tokens import FileTokenStore, TokenStore, issue, revoke, verify


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
