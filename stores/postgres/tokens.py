"""Access tokens in the database (`stores.tokens.TokenStore`): with
`DREAMKEEPER_DATABASE_URL` set, every `serve` and every `dreamkeeper token` command on
the database sees the same tokens, and a revocation reaches every server at its next
request. One row per token, its record as JSON (never its secret: the salted hash).

The mark that tokens are issued here is `dreamkeeper_store.tokens_issued_at` (migration
8), set in the transaction that adds the first token: emptying or damaging the tokens
table by hand leaves it, so the servers stay closed (`TokenSnapshot.damage`).

Each request asks the database once: the mark, the number of rows and a digest of them.
The rows themselves are read again only when that digest changed."""

from __future__ import annotations

import json
import logging
import threading
from dataclasses import replace
from datetime import datetime
from typing import Any

import psycopg
import psycopg_pool

from dreamkeeper.core.errors import InvalidInput, Unavailable
from dreamkeeper.stores.contract.tokens import TokenRecord, TokenSnapshot, TokenStoreDamaged
from dreamkeeper.stores.postgres.database import Database
from dreamkeeper.stores.tokens import SeenIssued

log = logging.getLogger(__name__)

TABLE = "dreamkeeper_tokens"

# A tab and a newline cannot occur in a token id, so the digest tells rows apart.
_STATE = f"""
SELECT (SELECT count(*) FROM dreamkeeper_store),
       (SELECT bool_or(tokens_issued_at IS NOT NULL) FROM dreamkeeper_store),
       count(*),
       md5(string_agg(token_id || E'\\t' || record, E'\\n' ORDER BY token_id))
FROM {TABLE}
"""
_ROWS = f"""
WITH t AS (SELECT token_id, record FROM {TABLE})
SELECT (SELECT md5(string_agg(token_id || E'\\t' || record, E'\\n' ORDER BY token_id)) FROM t),
       token_id, record
FROM t
"""
_MARK = "UPDATE dreamkeeper_store SET tokens_issued_at = coalesce(tokens_issued_at, now())"


class PostgresTokenStore:
    def __init__(self, db: Database) -> None:
        self.db = db
        self._seen_issued = SeenIssued()
        self.where = f"the {TABLE} table of the database at {db.location}"
        self.public_name = f"the database's {TABLE} table"
        self._cache: tuple[Any, TokenSnapshot] | None = None
        self._guard = threading.Lock()

    def snapshot(self) -> TokenSnapshot:
        # Single statements in autocommit (`fetch`): one round trip per request when
        # nothing changed, the rows only when the digest did.
        try:
            stores, marked, count, digest = self.db.fetch(_STATE)[0]
            with self._guard:
                if self._cache is not None and self._cache[0] == (marked, count, digest):
                    return self._cache[1]
            rows = self.db.fetch(_ROWS)
        except (psycopg.errors.UndefinedTable, psycopg.errors.UndefinedColumn) as exc:
            found = TokenSnapshot({}, True, f"{self.where} cannot be read ({exc})".strip())
            return self._keep(None, found)
        except (psycopg.OperationalError, psycopg_pool.PoolTimeout) as exc:
            raise Unavailable(f"cannot reach the database at {self.db.location}: {exc}") from None
        digest = rows[0][0] if rows else None
        found = _checked(rows, marked=bool(marked), stores=int(stores), where=self.where)
        if found.issued and not marked and found.damage is None:
            # Rows without the mark (it was cleared by hand): mark again, so emptying the
            # table later does not open the servers.
            self.mark_issued()
            marked = True
        return self._keep((marked, len(rows), digest), found)

    def _keep(self, key: Any, found: TokenSnapshot) -> TokenSnapshot:
        found = self._seen_issued.check(found, self.where)
        with self._guard:
            before = self._cache[1].damage if self._cache is not None else None
            if found.damage and found.damage != before:
                log.error("access tokens damaged: %s", found.damage)
            self._cache = (key, found) if key is not None else None
        return found

    def add(self, record: TokenRecord) -> None:
        with self.db.transaction() as conn:
            # The mark first, in the same transaction: a token is never kept without it.
            if conn.execute(_MARK).rowcount != 1:
                raise TokenStoreDamaged(
                    f"the database at {self.db.location} has no store identity row "
                    "(dreamkeeper_store): run `dreamkeeper db upgrade`, or restore it"
                )
            try:
                conn.execute(
                    f"INSERT INTO {TABLE} (token_id, record) VALUES (%s, %s)",
                    (record.id, json.dumps(record.to_json())),
                )
            except psycopg.errors.UniqueViolation:
                raise InvalidInput(f"token {record.id} exists already") from None

    def find(self, token_id: str) -> TokenRecord | None:
        return self.snapshot().find(token_id)

    def all(self) -> list[TokenRecord]:
        return self.snapshot().in_order()

    def revoke(self, token_id: str, at: datetime) -> TokenRecord | None:
        with self.db.transaction() as conn:
            row = conn.execute(
                f"SELECT record FROM {TABLE} WHERE token_id = %s FOR UPDATE", (token_id,)
            ).fetchone()
            record = None if row is None else _record(token_id, row[0])[0]
            if record is None or not record.active:
                return record
            record = replace(record, revoked_at=at)
            conn.execute(
                f"UPDATE {TABLE} SET record = %s WHERE token_id = %s",
                (json.dumps(record.to_json()), token_id),
            )
            return record

    def issued(self) -> bool:
        return self.snapshot().issued

    def mark_issued(self) -> None:
        with self.db.transaction() as conn:
            if conn.execute(_MARK).rowcount != 1:
                raise TokenStoreDamaged(
                    f"the database at {self.db.location} has no store identity row"
                )


def _record(token_id: str, raw: object) -> tuple[TokenRecord | None, str | None]:
    """The row's record, or what is wrong with it."""
    try:
        record = TokenRecord.from_json(json.loads(str(raw)))
    except (ValueError, TypeError) as exc:
        return None, f"the record of token {token_id!r} is damaged ({exc})"
    if record.id != token_id:
        return None, f"the row of token {token_id!r} holds the record of token {record.id}"
    return record, None


def _checked(rows: list[Any], *, marked: bool, stores: int, where: str) -> TokenSnapshot:
    if stores != 1:
        return TokenSnapshot({}, True, f"the database has {stores} store identity rows, not 1")
    records: dict[str, TokenRecord] = {}
    damage = None
    for _, token_id, raw in rows:
        record, wrong = _record(token_id, raw)
        if record is None:
            damage = damage or wrong
        else:
            records[record.id] = record
    if damage is None and not records and marked:
        damage = "it holds no token, but tokens were issued here"
    if damage is not None:
        return TokenSnapshot(records, True, f"{where}: {damage}")
    return TokenSnapshot(records, marked or bool(records))
