"""Access tokens in the database (`stores.tokens.TokenStore`): with
`DREAMKEEPER_DATABASE_URL` set, every `serve` and every `dreamkeeper token` command on
the database sees the same tokens, and a revocation reaches every server at its next
request. One row per token, its record as JSON (never its secret: the salted hash)."""

from __future__ import annotations

import json
import logging
from dataclasses import replace
from datetime import datetime

import psycopg

from dreamkeeper.core.errors import InvalidInput
from dreamkeeper.stores.postgres.database import Database
from dreamkeeper.stores.tokens import TokenRecord

log = logging.getLogger(__name__)


class PostgresTokenStore:
    def __init__(self, db: Database) -> None:
        self.db = db

    def add(self, record: TokenRecord) -> None:
        with self.db.transaction() as conn:
            try:
                conn.execute(
                    "INSERT INTO dreamkeeper_tokens (token_id, record) VALUES (%s, %s)",
                    (record.id, json.dumps(record.to_json())),
                )
            except psycopg.errors.UniqueViolation:
                raise InvalidInput(f"token {record.id} exists already") from None

    def find(self, token_id: str) -> TokenRecord | None:
        with self.db.transaction() as conn:
            row = conn.execute(
                "SELECT record FROM dreamkeeper_tokens WHERE token_id = %s", (token_id,)
            ).fetchone()
        return None if row is None else _record(row[0])

    def all(self) -> list[TokenRecord]:
        with self.db.transaction() as conn:
            rows = conn.execute("SELECT record FROM dreamkeeper_tokens").fetchall()
        records = [r for row in rows if (r := _record(row[0])) is not None]
        return sorted(records, key=lambda r: (r.created_at, r.id))

    def revoke(self, token_id: str, at: datetime) -> TokenRecord | None:
        with self.db.transaction() as conn:
            row = conn.execute(
                "SELECT record FROM dreamkeeper_tokens WHERE token_id = %s FOR UPDATE",
                (token_id,),
            ).fetchone()
            record = None if row is None else _record(row[0])
            if record is None or not record.active:
                return record
            record = replace(record, revoked_at=at)
            conn.execute(
                "UPDATE dreamkeeper_tokens SET record = %s WHERE token_id = %s",
                (json.dumps(record.to_json()), token_id),
            )
            return record

    def issued(self) -> bool:
        # Any row, even one that no longer parses: the server stays guarded (fail closed).
        with self.db.transaction() as conn:
            return conn.execute("SELECT 1 FROM dreamkeeper_tokens LIMIT 1").fetchone() is not None


def _record(raw: str) -> TokenRecord | None:
    try:
        return TokenRecord.from_json(json.loads(raw))
    except (KeyError, TypeError, ValueError, AttributeError):
        log.error("a stored access token record is damaged: it opens nothing")
        return None
