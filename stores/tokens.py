"""Access tokens of `dreamkeeper serve`: issued, listed, revoked, verified.

A token is `dkt_{id}_{secret}`: the id (12 hex) finds its record, the secret (32 random
bytes, URL-safe base64) proves it. Only a salted SHA-256 of the secret is stored, and it
is compared in constant time. A slow password hash would buy nothing here: the secret is
256 random bits, not a password a dictionary could guess, and the check runs on every
request. The secret is shown once, by `create`.

`TokenStore` is the whole persistence contract (`stores.contract.tokens`):
`stores.files.tokens` keeps `{data}/access/tokens.json`, `stores.postgres.tokens` one row
per token. Issuing and verifying are functions over any `TokenStore`, here.

The store fails closed. Before the first token is kept, the store records that tokens
are issued here somewhere the token file's damage cannot reach (the store identity: the
data directory's `dreamkeeper-store.json`, the database's `dreamkeeper_store` row). A
`TokenSnapshot` reports the store as damaged, never as empty, when the tokens cannot be
trusted: a file or row that does not parse or has the wrong shape, a symlink or
directory where the file belongs, or no token at all although tokens were issued. `serve`
refuses every request while it is damaged (service.guard), and `token create|revoke`
never overwrite a damaged file.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import logging
import re
import secrets
from dataclasses import replace
from datetime import UTC, datetime
from typing import Protocol

from dreamkeeper.core.errors import InvalidInput, NotFound
from dreamkeeper.policies.access import Access, Grant, validate_patterns
from dreamkeeper.stores.contract.tokens import (
    TOKEN_ID,
    TOKEN_NAME,
    TokenRecord,
    TokenSnapshot,
    TokenStore,
)

log = logging.getLogger(__name__)

PREFIX = "dkt_"
_TOKEN = re.compile(r"dkt_([0-9a-f]{12})_([A-Za-z0-9_\-]{43})")


class SeenIssued:
    """A process that once saw tokens issued never forgets it: if the token store and the
    mark both disappear while it runs, that is damage, not an open server. Each token
    store keeps one and passes every snapshot it reads through `check`."""

    def __init__(self) -> None:
        self._seen = False

    def check(self, snapshot: TokenSnapshot, where: str) -> TokenSnapshot:
        if snapshot.issued:
            self._seen = True
        elif self._seen:
            return replace(
                snapshot,
                issued=True,
                damage=f"{where} holds no token and no mark that tokens were issued, but "
                "this process saw tokens issued there",
            )
        return snapshot


def damaged_message(store: TokenStore) -> str:
    """What a refused request is told: the store by name, not what is wrong with it (that
    is in the server's log, for the operator)."""
    return (
        f"this server's access tokens ({store.public_name}) are damaged, so it refuses "
        "every request until an operator repairs or restores them (the server's log says "
        "what is wrong)"
    )


def _digest(salt: bytes, secret: str) -> str:
    return hashlib.sha256(salt + secret.encode("ascii")).hexdigest()


def issue(
    store: TokenStore,
    name: str,
    agents: list[str] | tuple[str, ...],
    access: Access,
    *,
    now: datetime | None = None,
) -> tuple[TokenRecord, str]:
    """A new token: its record (kept in the store) and its secret (shown once)."""
    if not isinstance(name, str) or not TOKEN_NAME.fullmatch(name):
        raise InvalidInput("a token's name is 1-100 printable characters")
    patterns = ("*",) if access is Access.ADMIN else validate_patterns(list(agents))
    token_id = secrets.token_hex(6)
    while store.find(token_id) is not None:
        token_id = secrets.token_hex(6)
    secret = base64.urlsafe_b64encode(secrets.token_bytes(32)).decode("ascii").rstrip("=")
    salt = secrets.token_bytes(16)
    record = TokenRecord(
        id=token_id,
        name=name,
        agents=patterns,
        access=access,
        salt=salt.hex(),
        hash=_digest(salt, secret),
        created_at=now or datetime.now(UTC),
    )
    store.add(record)
    return record, f"{PREFIX}{token_id}_{secret}"


# Compared against when the presented id has no record, so an unknown id costs the same
# hash and comparison as a known one with a wrong secret.
_DUMMY_SALT = secrets.token_bytes(16)
_DUMMY_HASH = _digest(_DUMMY_SALT, "x" * 43)


class FindsTokens(Protocol):
    def find(self, token_id: str) -> TokenRecord | None: ...


def verify(store: FindsTokens, presented: str) -> Grant | None:
    """The grant of an active token whose secret matches; None otherwise. `store` is a
    `TokenStore` or one `TokenSnapshot` of it (what the guard checked for damage)."""
    match = _TOKEN.fullmatch(presented)
    if match is None:
        return None
    token_id, secret = match.groups()
    record = store.find(token_id)
    salt, expected = (
        (bytes.fromhex(record.salt), record.hash) if record else (_DUMMY_SALT, _DUMMY_HASH)
    )
    same = hmac.compare_digest(_digest(salt, secret), expected)
    if record is None or not same or not record.active:
        return None
    return record.grant()


def validate_token_id(token_id: str) -> str:
    if not isinstance(token_id, str) or not TOKEN_ID.fullmatch(token_id):
        raise InvalidInput(f"invalid token id {token_id!r}: 12 lowercase hex characters")
    return token_id


def revoke(store: TokenStore, token_id: str, *, now: datetime | None = None) -> TokenRecord:
    record = store.revoke(validate_token_id(token_id), now or datetime.now(UTC))
    if record is None:
        raise NotFound(f"no token {token_id}")
    return record
