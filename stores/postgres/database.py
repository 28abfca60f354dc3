"""One connection pool per database URL and process, shared by every store on it.

psycopg 3's pool hands out connections to the worker's activity threads; each
`transaction()` is one database transaction, committed when the block ends and rolled
back when it raises. A connection broken by a database restart is discarded by the pool
when it comes back (psycopg_pool checks its state), so the next call gets a fresh one:
the failed call surfaces as `psycopg.OperationalError`, which the caller retries (an
activity through Temporal) — nothing is half-applied, since the transaction never
committed.
"""

from __future__ import annotations

import atexit
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
from psycopg import conninfo
from psycopg_pool import ConnectionPool

from dreamkeeper.core.errors import SettingsError

POOL_MIN = 1
POOL_MAX = 16  # a worker runs at most this many store activities against one database
CONNECT_TIMEOUT_SECONDS = 10


def describe(url: str) -> str:
    """The URL without its password, for messages and logs."""
    try:
        parts = conninfo.conninfo_to_dict(url)
    except psycopg.ProgrammingError:
        return "an unparsable database URL"
    parts.pop("password", None)
    host = parts.get("host", "localhost")
    port = parts.get("port", "5432")
    user = f"{parts['user']}@" if parts.get("user") else ""
    return f"postgresql://{user}{host}:{port}/{parts.get('dbname', '')}"


def check_url(url: str) -> str:
    """`url` if psycopg can parse it, else a `SettingsError` (the password never shown)."""
    try:
        conninfo.conninfo_to_dict(url)
    except psycopg.ProgrammingError as exc:
        raise SettingsError(f"DREAMKEEPER_DATABASE_URL is not a PostgreSQL URL ({exc})") from None
    return url


class Database:
    """A pool of connections to one database."""

    def __init__(self, url: str, *, min_size: int = POOL_MIN, max_size: int = POOL_MAX) -> None:
        self.url = check_url(url)
        self.location = describe(url)
        self._pool = ConnectionPool(
            url,
            min_size=min_size,
            max_size=max_size,
            kwargs={"connect_timeout": CONNECT_TIMEOUT_SECONDS},
            name=f"dreamkeeper:{self.location}",
            open=False,
        )
        self._opened = False
        self._guard = threading.Lock()
        # Autocommit connections for single-statement reads: one round trip each (no
        # BEGIN/COMMIT, no check at checkout — a read that meets a dead connection is
        # simply asked again on another). A store's hot read path is one of these.
        self._readers = ConnectionPool(
            url,
            min_size=0,
            max_size=max_size,
            kwargs={"connect_timeout": CONNECT_TIMEOUT_SECONDS, "autocommit": True},
            name=f"dreamkeeper-read:{self.location}",
            open=False,
        )

    def _open(self) -> None:
        # Opened on first use, not in the constructor: building a settings object or a
        # client must not need the database up.
        with self._guard:
            if not self._opened:
                self._pool.open(wait=False)
                self._readers.open(wait=False)
                self._opened = True

    @contextmanager
    def transaction(self) -> Iterator[psycopg.Connection]:
        """A pooled connection inside one transaction: committed at the end of the block,
        rolled back if it raises."""
        self._open()
        with self._pool.connection(timeout=CONNECT_TIMEOUT_SECONDS) as conn:
            yield conn

    def fetch(self, sql: str, params: Any = None) -> list[tuple[Any, ...]]:
        """The rows of one read-only statement, in autocommit (one round trip); asked
        again on another connection while the one it got was dead (after a database
        restart every idle one is: each is discarded as it fails, at most the pool)."""
        self._open()
        for attempt in range(self._readers.max_size + 1):
            try:
                with self._readers.connection(timeout=CONNECT_TIMEOUT_SECONDS) as conn:
                    try:
                        return conn.execute(sql, params).fetchall()
                    except psycopg.OperationalError:
                        if not conn.broken or attempt == self._readers.max_size:
                            raise
            except psycopg.OperationalError:
                if attempt == self._readers.max_size:
                    raise
        raise AssertionError("unreachable")

    @contextmanager
    def dedicated(self) -> Iterator[psycopg.Connection]:
        """A connection of its own in autocommit mode, outside the pool: for session-level
        advisory locks held across transactions, and for LISTEN."""
        with psycopg.connect(
            self.url, autocommit=True, connect_timeout=CONNECT_TIMEOUT_SECONDS
        ) as conn:
            yield conn

    def close(self) -> None:
        with self._guard:
            if self._opened:
                self._pool.close()
                self._readers.close()
                self._opened = False


_databases: dict[str, Database] = {}
_databases_guard = threading.Lock()


def database(url: str) -> Database:
    """The process's one `Database` for `url` (stores of every agent share its pool)."""
    with _databases_guard:
        found = _databases.get(url)
        if found is None:
            found = _databases[url] = Database(url)
        return found


@atexit.register
def _close_all() -> None:
    with _databases_guard:
        for db in _databases.values():
            db.close()
        _databases.clear()
