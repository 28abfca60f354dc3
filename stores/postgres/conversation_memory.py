"""Conversation memory in PostgreSQL: the `ConversationStore` contract with the file
backend's rules (`stores.conversation.conversation_memory.ConversationBase`: turn
validation, the idle rule, the window and its archive), over a session row and its turns.

A turn is added in one transaction holding the session's advisory lock (the session row
may not exist yet, so the lock is on its name): a new or expired session starts afresh
at turn 1 with its old turns discarded, the turn is inserted with the session's next
number and the row moved on, and turns older than the window plus `max_archived` are
deleted — so numbers are never reused within a session and two processes adding turns
to one session serialize. A read takes the session row, then only the turns added since
this instance last read (a turn never changes within a session's life). The conversation log is the agent's documents
(`stores.postgres.documents`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime, timedelta

import psycopg
from pydantic import ValidationError

from dreamkeeper.core.models import utc_now
from dreamkeeper.stores import faults
from dreamkeeper.stores.conversation.conversation_log import ConversationLog
from dreamkeeper.stores.conversation.conversation_memory import (
    MAX_ARCHIVED,
    MAX_RETAINED,
    SESSION_IDLE,
    ConversationBase,
    Turn,
    validate_session_id,
)
from dreamkeeper.stores.postgres.database import Database
from dreamkeeper.stores.postgres.documents import PostgresDocuments

log = logging.getLogger(__name__)


class PostgresConversationStore(ConversationBase):
    def __init__(
        self,
        db: Database,
        agent_id: str,
        *,
        clock: Callable[[], datetime] = utc_now,
        idle: timedelta = SESSION_IDLE,
        max_retained: int = MAX_RETAINED,
        max_archived: int = MAX_ARCHIVED,
    ) -> None:
        super().__init__(
            agent_id,
            clock=clock,
            idle=idle,
            max_retained=max_retained,
            max_archived=max_archived,
        )
        self.db = db
        self.log = ConversationLog(PostgresDocuments(db, self.agent_id))
        # session -> (its start, its next turn number, the turns read, the newest one's
        # stored text): see _live_turns
        self._read_cache: dict[str, tuple[datetime, int, tuple[Turn, ...], str | None]] = {}

    def _lock(self, conn: psycopg.Connection, session_id: str) -> None:
        """The session's writer lock, until the transaction ends."""
        conn.execute(
            "SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))",
            (f"dreamkeeper-conversation:{self.agent_id}:{session_id}",),
        )

    # -- reads -------------------------------------------------------------------------

    def _live_turns(self, session_id: str) -> tuple[tuple[Turn, ...], tuple[Turn, ...]] | None:
        window = self._max_retained + max(self._max_archived, 0)
        with self.db.transaction() as conn:
            row = conn.execute(
                "SELECT started_at, last_at, next_n FROM dreamkeeper_conversation_sessions "
                "WHERE agent_id = %s AND session_id = %s",
                (self.agent_id, session_id),
            ).fetchone()
            if row is None or not self._is_live(row[1]):
                return None
            started, next_n = row[0], int(row[2])
            # Turns never change once written in a session's life: only those added since
            # this instance last read are fetched and parsed, with the last one it knows to
            # prove the life is the same (a session cleared and begun again is not).
            cached = self._read_cache.get(session_id)
            known: list[Turn] = []
            last_known: str | None = None
            if cached is not None and cached[0] == started and cached[2] and cached[3]:
                known = [t for t in cached[2] if t.n >= next_n - window]
                last_known = cached[3]
            rows = self._turns(conn, session_id, known[-1].n if known else next_n - window, next_n)
            if known and (not rows or rows[0] != last_known):
                known, rows = [], self._turns(conn, session_id, next_n - window, next_n)
            elif known:
                rows = rows[1:]
        turns = known
        last_text = last_known if known else None
        for text in rows:
            try:
                turns.append(Turn.model_validate_json(text))
                last_text = text
            except ValidationError:
                log.warning("conversation %s: skipped a malformed turn row", self.agent_id)
        self._read_cache[session_id] = (started, next_n, tuple(turns), last_text)
        first_retained = next_n - self._max_retained
        retained = tuple(t for t in turns if t.n >= first_retained)
        archived = tuple(t for t in turns if t.n < first_retained)
        return (archived if self._max_archived > 0 else ()), retained

    def _turns(self, conn: psycopg.Connection, session_id: str, low: int, high: int) -> list[str]:
        """The stored turns numbered from `low` up to (not including) `high`, in order —
        bounded by the session row's next number, so a turn committed after it was read
        is not this read's (and a later turn's trim removes only numbers below `low`)."""
        rows = conn.execute(
            "SELECT turn FROM dreamkeeper_conversation_turns WHERE agent_id = %s AND "
            "session_id = %s AND n >= %s AND n < %s ORDER BY n",
            (self.agent_id, session_id, low, high),
        ).fetchall()
        return [str(r[0]) for r in rows]

    def _stored_ids(self) -> list[str]:
        with self.db.transaction() as conn:
            rows = conn.execute(
                "SELECT session_id FROM dreamkeeper_conversation_sessions WHERE agent_id = %s "
                "ORDER BY session_id",
                (self.agent_id,),
            ).fetchall()
        return sorted(str(r[0]) for r in rows)

    def _last_at(self, session_id: str) -> datetime | None:
        with self.db.transaction() as conn:
            row = conn.execute(
                "SELECT last_at FROM dreamkeeper_conversation_sessions "
                "WHERE agent_id = %s AND session_id = %s",
                (self.agent_id, session_id),
            ).fetchone()
        return None if row is None else row[0]

    # -- writes ------------------------------------------------------------------------

    def _add(self, session_id: str, role: str, content: str) -> Turn:
        with self.db.transaction() as conn:
            self._lock(conn, session_id)
            now = self.now()
            row = conn.execute(
                "SELECT started_at, last_at, next_n FROM dreamkeeper_conversation_sessions "
                "WHERE agent_id = %s AND session_id = %s",
                (self.agent_id, session_id),
            ).fetchone()
            if row is None or not self._is_live(row[1]):
                # A new or expired session: its turns belonged to a conversation that ended.
                conn.execute(
                    "DELETE FROM dreamkeeper_conversation_turns "
                    "WHERE agent_id = %s AND session_id = %s",
                    (self.agent_id, session_id),
                )
                started, n = now, 1
            else:
                started, n = row[0], int(row[2])
            turn = Turn(n=n, role=role, content=content, at=now)  # type: ignore[arg-type]
            conn.execute(
                "INSERT INTO dreamkeeper_conversation_turns (agent_id, session_id, n, turn) "
                "VALUES (%s, %s, %s, %s)",
                (self.agent_id, session_id, n, turn.model_dump_json()),
            )
            faults.crash_point(faults.ROWS_HALF_WRITTEN)
            conn.execute(
                "INSERT INTO dreamkeeper_conversation_sessions "
                "(agent_id, session_id, started_at, last_at, next_n) VALUES (%s, %s, %s, %s, %s) "
                "ON CONFLICT (agent_id, session_id) DO UPDATE SET started_at = "
                "excluded.started_at, last_at = excluded.last_at, next_n = excluded.next_n",
                (self.agent_id, session_id, started, now, n + 1),
            )
            # Past the window and the archive's newest `max_archived`: never read again.
            conn.execute(
                "DELETE FROM dreamkeeper_conversation_turns WHERE agent_id = %s AND "
                "session_id = %s AND n <= %s",
                (self.agent_id, session_id, n - self._max_retained - max(self._max_archived, 0)),
            )
        return turn

    def clear(self, session_id: str) -> None:
        """End the session: its turns and its archive are discarded."""
        validate_session_id(session_id)
        with self.db.transaction() as conn:
            self._lock(conn, session_id)
            for table in ("dreamkeeper_conversation_turns", "dreamkeeper_conversation_sessions"):
                conn.execute(
                    f"DELETE FROM {table} WHERE agent_id = %s AND session_id = %s",  # noqa: S608
                    (self.agent_id, session_id),
                )

    def erase_matching(self, mentions: Callable[[str], bool]) -> dict[str, int]:
        """Delete every turn row, expired sessions included, that `mentions` the
        forgotten text (`stores.forget`), in one transaction, then scrub the
        conversation log (live and rotated); per place, how many turns went. Turn
        numbers are kept: the rest of a conversation reads as it did, with the gap."""
        removed: dict[str, int] = {}
        with self.db.transaction() as conn:
            rows = conn.execute(
                "SELECT session_id, n, turn FROM dreamkeeper_conversation_turns "
                "WHERE agent_id = %s ORDER BY session_id, n FOR UPDATE",
                (self.agent_id,),
            ).fetchall()
            doomed: dict[str, list[int]] = {}
            for session_id, n, text in rows:
                try:
                    content = Turn.model_validate_json(text).content
                except (ValidationError, ValueError):
                    content = str(text)
                if mentions(content) or mentions(str(text)):
                    doomed.setdefault(str(session_id), []).append(int(n))
            for session_id, numbers in doomed.items():
                conn.execute(
                    "DELETE FROM dreamkeeper_conversation_turns "
                    "WHERE agent_id = %s AND session_id = %s AND n = ANY(%s)",
                    (self.agent_id, session_id, numbers),
                )
                removed[f"conversation/{session_id}"] = len(numbers)
        removed.update(self.log.scrub(mentions))
        return removed
