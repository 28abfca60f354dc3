"""A change signal for warm reads: LISTEN/NOTIFY, so that a read asks the database only
when the agent changed.

A warm read used to pay one round trip just to learn that nothing had changed (the
long-term store's catch-up, working memory's version, a conversation's session row).
Migration 11 makes every write to a tier's counter or rows send `NOTIFY dreamkeeper_change,
'<tier>:<agent_id>'` from its own transaction, so it is delivered only if and when it
commits. One `ChangeWatch` per `Database` listens on a dedicated connection (never a
pooled one) in a background thread and records, per (tier, agent), the sequence number
of the last notification seen.

A store asks `token()` just before its real check and keeps the token; on the next read
`unchanged(tier, agent, token)` says whether it may skip the check. Yes only when all of:
- the listener is confirmed live: it sends itself a heartbeat NOTIFY every
  `HEARTBEAT_SECONDS`, and one sent at most `STALE_SECONDS` ago has come back;
- the token was taken while this same listener session was already confirmed (LISTEN
  was active before the store's check, so any commit after that check is notified);
- no notification for (tier, agent) and no unknown payload arrived after the token.
Anything else — not yet confirmed, connection lost, an error, an unknown payload, more
than `MAX_MARKS` agents marked — answers no, and the store does its round trip as
before: the signal fails closed. A write of this process marks (tier, agent) itself when
it commits (`mark`), so another store instance here never skips past it while its NOTIFY
is still on the way. A listener nobody asked for `IDLE_SECONDS` stops; the next question
starts it again (answering no until it is confirmed).

What a skip can miss, and for how long: notifications arrive in commit order, so once a
heartbeat sent at time t has come back, every write another process had committed before
t has been noted. A warm read therefore sees every write acknowledged more than
`STALE_SECONDS` before it, and a more recent one as soon as its NOTIFY arrives
(bench/change_signal.py: well under a millisecond here); a write of this process, at once.

The listener never sets `Database.failure`: a listener that cannot connect only means
round trips, and must not mark the database down for the pool's users.
"""

from __future__ import annotations

import logging
import os
import threading
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass

import psycopg

from dreamkeeper.stores.postgres.database import CONNECT_TIMEOUT_SECONDS, Database

log = logging.getLogger(__name__)

CHANNEL = "dreamkeeper_change"
MEMORY_TIER, WORKING_TIER, CONVERSATION_TIER = "memory", "working", "conversation"
TIERS = frozenset({MEMORY_TIER, WORKING_TIER, CONVERSATION_TIER})
HEARTBEAT_SECONDS = 0.05
# A skip needs the listener's own heartbeat back within this: a listener whose session
# silently stalled (network, a backend stuck) stops answering yes within it.
STALE_SECONDS = 0.25
IDLE_SECONDS = 30.0
# More agents marked than this since the listener started: forget them all and answer no
# until the stores check again (memory stays bounded on a busy fleet).
MAX_MARKS = 100_000


@dataclass(frozen=True)
class Token:
    """Where the watch stood when a store did its real check."""

    session: int  # the listener session confirmed then (0: none was)
    seq: int  # the last notification counted then


class ChangeWatch:
    def __init__(self, db: Database, *, clock: Callable[[], float] = time.monotonic) -> None:
        self._url = db.url
        self._clock = clock
        self._guard = threading.Lock()
        self._thread: threading.Thread | None = None
        # Each listener connection is a session; a token of an earlier one is worth nothing.
        self._session = 0
        self._confirmed = 0  # the session whose first heartbeat came back (0: none yet)
        self._last_beat = 0.0  # when the newest heartbeat that came back was sent
        self._seq = 0  # notifications counted so far (every kind)
        self._floor = 0  # tokens taken before this seq are void (unknown payload, overflow)
        self._marks: dict[tuple[str, str], int] = {}
        self._asked = clock()
        self._stop = threading.Event()
        self._nonce = f"{os.getpid()}.{id(self)}"
        # Test hooks: a listener whose heartbeats stopped (none sent, none counted), and
        # how many notifications, and unknown ones, it has handled.
        self.heartbeats = True
        self.handled = 0
        self.unknown = 0

    # -- what stores ask ---------------------------------------------------------------

    def token(self) -> Token:
        """To be taken just before a store's real check, and kept with what it read."""
        with self._guard:
            self._asked = self._clock()
            self._ensure_running()
            return Token(self._confirmed if self._live() else 0, self._seq)

    def unchanged(self, tier: str, agent_id: str, token: Token | None) -> bool:
        """True only when the store may skip its check: nothing can have changed (tier,
        agent) since it took `token`. False whenever in doubt."""
        with self._guard:
            self._asked = self._clock()
            self._ensure_running()
            if token is None or token.session == 0 or token.session != self._confirmed:
                return False
            if not self._live() or token.seq < self._floor:
                return False
            return self._marks.get((tier, agent_id), 0) <= token.seq

    def mark(self, tier: str, agent_id: str) -> None:
        """A write of this process committed for (tier, agent): no token taken before now
        may skip (its NOTIFY reaches the listener a little later)."""
        with self._guard:
            self._note(tier, agent_id)

    @property
    def live(self) -> bool:
        with self._guard:
            return self._live()

    def stop(self) -> None:
        """Stop the listener (a later question starts it again)."""
        with self._guard:
            thread = self._thread
            self._stop.set()
        if thread is not None:
            thread.join()

    # -- inside (the guard held) -------------------------------------------------------

    def _live(self) -> bool:
        return self._confirmed != 0 and self._clock() - self._last_beat <= STALE_SECONDS

    def _note(self, tier: str, agent_id: str) -> None:
        self._seq += 1
        if len(self._marks) >= MAX_MARKS:
            self._marks.clear()
            self._floor = self._seq
        self._marks[(tier, agent_id)] = self._seq

    def _void_all(self) -> None:
        self._seq += 1
        self._floor = self._seq
        self._marks.clear()

    def _ensure_running(self) -> None:
        if self._thread is not None and self._thread.is_alive():
            return
        self._session += 1
        self._confirmed = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._run,
            args=(self._session, self._stop),
            name=f"dreamkeeper-change-watch-{self._session}",
            daemon=True,
        )
        self._thread.start()

    # -- the listener thread -----------------------------------------------------------

    def _run(self, session: int, stop: threading.Event) -> None:
        try:
            # Not `Database.dedicated`: a failure here must not set the database's failure.
            with psycopg.connect(
                self._url, autocommit=True, connect_timeout=CONNECT_TIMEOUT_SECONDS
            ) as conn:
                conn.execute(f"LISTEN {CHANNEL}")
                beat = f"hb:{self._nonce}.{session}."
                # heartbeat number -> when it was sent (before its NOTIFY committed)
                sent_at: dict[int, float] = {}
                sent, n = 0.0, 0
                while not stop.is_set():
                    now = time.monotonic()
                    if self.heartbeats and now - sent >= HEARTBEAT_SECONDS:
                        n += 1
                        with self._guard:
                            sent_at[n] = self._clock()
                        conn.execute("SELECT pg_notify(%s, %s)", (CHANNEL, f"{beat}{n}"))
                        sent = now
                    for notify in conn.notifies(timeout=HEARTBEAT_SECONDS, stop_after=1000):
                        self._handle(session, beat, sent_at, notify.payload)
                    with self._guard:
                        if self._clock() - self._asked > IDLE_SECONDS:
                            break
        except Exception as exc:  # noqa: BLE001 - any failure only means round trips
            log.info("change watch on %s stopped: %s", self._url.split("@")[-1], exc)
        finally:
            with self._guard:
                if self._session == session:
                    self._confirmed = 0
                    # Whatever the next session misses was never its to see: void it all.
                    self._void_all()

    def _handle(self, session: int, beat: str, sent_at: dict[int, float], payload: str) -> None:
        with self._guard:
            self.handled += 1
            if payload.startswith(beat):
                # Notifications arrive in commit order: every write acknowledged before
                # this heartbeat was sent has been noted by now. Its send time, not its
                # arrival, is what a skip measures staleness from.
                number = int(payload[len(beat) :])
                when = sent_at.get(number)
                for old in [k for k in sent_at if k <= number]:
                    del sent_at[old]
                if when is not None and self._session == session and self.heartbeats:
                    self._confirmed = session
                    self._last_beat = max(self._last_beat, when)
                return
            if payload.startswith("hb:"):
                return  # another process's listener
            tier, sep, agent_id = payload.partition(":")
            if not sep or tier not in TIERS or not agent_id:
                log.warning("change watch: unknown payload %r; every store checks", payload)
                self.unknown += 1
                self._void_all()
                return
            self._note(tier, agent_id)


_watches: weakref.WeakKeyDictionary[Database, ChangeWatch] = weakref.WeakKeyDictionary()
_watches_guard = threading.Lock()


def watch(db: Database) -> ChangeWatch:
    """The one change watch of `db` (its listener starts when first asked)."""
    with _watches_guard:
        found = _watches.get(db)
        if found is None:
            found = _watches[db] = ChangeWatch(db)
            db.on_close(found.stop)
        return found
