"""One connection pool per database URL and process, shared by every store on it.

psycopg 3's pool hands out connections to the worker's activity threads; each
`transaction()` is one database transaction, committed when the block ends and rolled
back when it raises. A connection broken by a database restart is discarded by the pool
when it comes back (psycopg_pool checks its state), so the next call gets a fresh one:
the failed call surfaces as `ConnectionLost` (a `psycopg.OperationalError`), which the
caller retries (an activity through Temporal) — nothing is half-applied, since the
transaction never committed.

A database that cannot be reached is said at once, never after the pool's wait: the first
use, and every use after a connection failed, first connects directly with a short
timeout (`_probe`), and `DatabaseUnavailable` names the database (never the password)
and the cause PostgreSQL gave. A caller waiting for a pooled connection while the pool's
own attempts fail is told the same within a fraction of a second. The pool gives up
reconnecting after `RECONNECT_SECONDS` instead of backing off for minutes, so the first
request after an outage connects at once.
"""

from __future__ import annotations

import atexit
import re
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
from psycopg import conninfo
from psycopg_pool import ConnectionPool, PoolTimeout

from dreamkeeper.core.errors import DatabaseUnavailable, SettingsError, Unavailable

POOL_MIN = 1
POOL_MAX = 16  # a worker runs at most this many store activities against one database
# libpq's own timeout per address tried: a server that is down refuses at once; this
# bounds one that does not answer at all.
CONNECT_TIMEOUT_SECONDS = 3
POOL_WAIT_SECONDS = 10  # how long a caller waits for a pooled connection to come free
RECONNECT_SECONDS = 5  # how long the pool retries a failed connection before giving up
# While waiting for a pooled connection, how often to look whether the pool's connection
# attempts are failing (then the database is probed and the wait ends).
_WAIT_SLICE_SECONDS = 0.2
_SEVERITY = re.compile(r"^(FATAL|ERROR|PANIC):\s+")


def describe(url: str) -> str:
    """The URL without its password, for messages and logs."""
    try:
        parts = conninfo.conninfo_to_dict(url)
    except (psycopg.ProgrammingError, UnicodeError):
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
    except UnicodeError:  # a lone surrogate: bytes of the environment that were not UTF-8
        raise SettingsError("DREAMKEEPER_DATABASE_URL is not valid UTF-8") from None
    return url


class ConnectionLost(DatabaseUnavailable, psycopg.OperationalError):
    """A connection broke while in use (the server stopped or restarted, or ended the
    session): nothing of its transaction committed. Still a `psycopg.OperationalError`,
    so a store that retries those on another connection keeps doing so."""


def cause_of(exc: BaseException, password: str | None = None) -> str:
    """What PostgreSQL (or libpq) said, on one line: the reason after libpq's "connection
    to server at ... failed:" (the last address tried), its hint, no severity prefix, and
    never the password."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    reasons = [i for i, line in enumerate(lines) if " failed: " in line]
    if reasons:
        start = reasons[-1]
        lines = [lines[start].rsplit(" failed: ", 1)[1], *lines[start + 1 :]]
    if not lines:
        return type(exc).__name__
    text = _SEVERITY.sub("", lines[0]).removeprefix("connection is bad: ")
    if len(lines) > 1:  # libpq's hint, indented on the lines below
        text += f" ({' '.join(lines[1:])})"
    if password:
        text = text.replace(password, "***")
    return text


class Database:
    """A pool of connections to one database."""

    def __init__(self, url: str, *, min_size: int = POOL_MIN, max_size: int = POOL_MAX) -> None:
        self.url = check_url(url)
        self.location = describe(url)
        password = conninfo.conninfo_to_dict(url).get("password")
        self._password = str(password) if password else None
        self._pool = ConnectionPool(
            url,
            min_size=min_size,
            max_size=max_size,
            kwargs={"connect_timeout": CONNECT_TIMEOUT_SECONDS},
            name=f"dreamkeeper:{self.location}",
            open=False,
            reconnect_timeout=RECONNECT_SECONDS,
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
            reconnect_timeout=RECONNECT_SECONDS,
        )
        # Why the last connection failed (None: it did not); until one connection has
        # succeeded, and again after one failed, a checkout first probes the database.
        self._failure: str | None = None
        self._proven = False
        # Run by `close` (the change watch stops its listener: its own connection would
        # outlive the pools, and hold the database open against a DROP).
        self._on_close: list[Callable[[], None]] = []

    def on_close(self, callback: Callable[[], None]) -> None:
        """Call `callback` when this `Database` is closed."""
        self._on_close.append(callback)

    @property
    def failure(self) -> str | None:
        """Why the last connection attempt or connection in use failed; None when the last
        one worked (no round trip: `ping` asks the database)."""
        return self._failure

    def ping(self) -> None:
        """One round trip; `DatabaseUnavailable` (with the cause) when it fails."""
        self.fetch("SELECT 1")

    def _unreachable(self, exc: BaseException) -> DatabaseUnavailable:
        self._failure = cause_of(exc, self._password)
        return DatabaseUnavailable(
            f"cannot connect to the database at {self.location}: {self._failure}"
        )

    def _lost(self, exc: BaseException) -> ConnectionLost:
        self._failure = cause_of(exc, self._password)
        return ConnectionLost(
            f"lost the connection to the database at {self.location}: {self._failure}"
        )

    def _probe(self) -> None:
        """Connect once, directly, with the short timeout: `DatabaseUnavailable` at once
        when the database refuses or does not answer, instead of a pool's wait."""
        recovering = self._failure is not None
        try:
            psycopg.connect(self.url, connect_timeout=CONNECT_TIMEOUT_SECONDS).close()
        except psycopg.OperationalError as exc:
            raise self._unreachable(exc) from None
        self._failure, self._proven = None, True
        if recovering and self._opened:
            # The idle connections made before the failure are likely dead (a restart
            # ends every session): replaced now, rather than one failed request each.
            self._pool.check()
            self._readers.check()

    def _open(self) -> None:
        # Opened on first use, not in the constructor: building a settings object or a
        # client must not need the database up. After a successful probe only, so a
        # database that is down never gets a pool retrying (and logging) in the background.
        with self._guard:
            if not self._opened:
                self._pool.open(wait=False)
                self._readers.open(wait=False)
                self._opened = True

    def _checkout(self, pool: ConnectionPool) -> psycopg.Connection:
        """A connection of `pool`, or `DatabaseUnavailable` as soon as the database is known
        not to answer. The wait is taken in slices: between them, a connection attempt of
        the pool that failed meanwhile means the database is probed (and the wait ends
        with its cause) rather than waited out; a wait that runs out on a database that
        answers is `Unavailable` (every connection busy)."""
        if self._failure is not None or not self._proven:
            self._probe()
        self._open()
        deadline = time.monotonic() + POOL_WAIT_SECONDS
        errors = _connect_errors(pool)
        while True:
            left = deadline - time.monotonic()
            try:
                return pool.getconn(timeout=max(0.01, min(_WAIT_SLICE_SECONDS, left)))
            except PoolTimeout:
                failed = _connect_errors(pool)
                out_of_time = time.monotonic() >= deadline
                if failed > errors or self._failure is not None or out_of_time:
                    self._probe()  # raises when the database does not answer
                    errors = failed
                if out_of_time:
                    raise Unavailable(
                        f"no connection to the database at {self.location} came free within "
                        f"{POOL_WAIT_SECONDS}s (all {pool.max_size} in use)"
                    ) from None

    @contextmanager
    def transaction(self) -> Iterator[psycopg.Connection]:
        """A pooled connection inside one transaction: committed at the end of the block,
        rolled back if it raises."""
        conn = self._checkout(self._pool)
        try:
            with conn:
                try:
                    yield conn
                except psycopg.OperationalError as exc:
                    if not conn.broken or isinstance(exc, ConnectionLost):
                        raise
                    raise self._lost(exc) from exc
        finally:
            self._pool.putconn(conn)

    def fetch(self, sql: str, params: Any = None) -> list[tuple[Any, ...]]:
        """The rows of one read-only statement, in autocommit (one round trip); asked
        again on another connection while the one it got was dead (after a database
        restart every idle one is: each is discarded as it fails, at most the pool)."""
        for attempt in range(self._readers.max_size + 1):
            conn = self._checkout(self._readers)
            try:
                return conn.execute(sql, params).fetchall()
            except psycopg.OperationalError as exc:
                if not conn.broken:
                    raise
                if attempt == self._readers.max_size:
                    raise self._lost(exc) from exc
            finally:
                self._readers.putconn(conn)
        raise AssertionError("unreachable")

    @contextmanager
    def dedicated(self) -> Iterator[psycopg.Connection]:
        """A connection of its own in autocommit mode, outside the pool: for session-level
        advisory locks held across transactions, and for LISTEN."""
        try:
            conn = psycopg.connect(
                self.url, autocommit=True, connect_timeout=CONNECT_TIMEOUT_SECONDS
            )
        except psycopg.OperationalError as exc:
            raise self._unreachable(exc) from None
        with conn:
            yield conn

    def close(self) -> None:
        for callback in list(self._on_close):
            callback()
        with self._guard:
            if self._opened:
                self._pool.close()
                self._readers.close()
                self._opened = False


def _connect_errors(pool: ConnectionPool) -> int:
    return int(pool.get_stats().get("connections_errors", 0))


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
