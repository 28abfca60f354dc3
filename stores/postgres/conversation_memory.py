"""Conversation memory in PostgreSQL: the `ConversationStore` contract with the file
backend's rules (`stores.conversation.conversation_memory.ConversationMemory`: turn
validation, the idle rule, turn numbers, the window and its archive) over
`ConversationRows`, the `ConversationStorage` of a session row and its turns.

A turn is added in one transaction holding the session's advisory lock (the session row
may not exist yet, so the lock is on its name): a new or expired session starts afresh
at turn 1 with its old turns discarded, the turn is inserted with the session's next
number and the row moved on, and turns older than the window plus `max_archived` are
deleted — so numbers are never reused within a session and two processes adding turns
to one session serialize. A read takes the session row, then only the turns added since
this instance last read (a turn never changes within a session's life). The
conversation log is the agent's documents (`stores.postgres.documents`).

Sealed at rest (`stores.postgres.sealing`): the session row names the data key its turns
are sealed with; a session begun (or begun again after its idle time) takes the agent's
current key, and changing a live session's key (`reseal`, or the first turn a process
with a payload key adds to a session kept in plaintext) rewrites its turns under the
session's lock.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime
from typing import Unpack

import psycopg
from pydantic import ValidationError

from dreamkeeper.client.agent_keys import DataKey
from dreamkeeper.core.validation import validate_agent_id
from dreamkeeper.stores import faults
from dreamkeeper.stores.contract.conversation import Turn
from dreamkeeper.stores.conversation.conversation_memory import (
    ConversationMemory,
    ConversationOptions,
    LiveRule,
    NextTurnRule,
    Retention,
    SessionHead,
    Turns,
    stored_turn_mentions,
)
from dreamkeeper.stores.postgres import change_watch
from dreamkeeper.stores.postgres.change_watch import CONVERSATION_TIER
from dreamkeeper.stores.postgres.database import Database
from dreamkeeper.stores.postgres.documents import PostgresDocuments
from dreamkeeper.stores.postgres.sealing import TURN, SealBroken, Sealing, without_key

log = logging.getLogger(__name__)


class PostgresConversationStore(ConversationMemory):
    """Conversation memory in PostgreSQL rows (this module's docstring): the shared rules
    over `ConversationRows`."""

    def __init__(
        self,
        db: Database,
        agent_id: str,
        *,
        sealing: Sealing | None = None,
        **options: Unpack[ConversationOptions],
    ) -> None:
        rows = ConversationRows(db, validate_agent_id(agent_id), sealing)
        documents = PostgresDocuments(db, rows.agent_id, sealing=sealing)
        super().__init__(agent_id, rows, documents, **options)
        self.db = db
        self.sealing = sealing


class ConversationRows:
    """An agent's sessions as rows of `dreamkeeper_conversation_sessions` and their turns
    of `dreamkeeper_conversation_turns`, sealed with the session's data key, each session
    written under its advisory lock
    (`stores.conversation.conversation_memory.ConversationStorage`)."""

    def __init__(self, db: Database, agent_id: str, sealing: Sealing | None) -> None:
        self.db = db
        self.agent_id = agent_id
        self.sealing = sealing
        # session -> (its start, its next turn number, the turns read, the newest one's
        # stored text): see _read_live_turns
        self._read_cache: dict[str, tuple[datetime, int, tuple[Turn, ...], str | None]] = {}
        # session -> (the change watch's token, its last turn time, what `read` found)
        # of the last real read: a warm read skips the round trip (`read`)
        self._watch = change_watch.watch(db)
        self._warm: dict[str, tuple[change_watch.Token, datetime | None, Turns | None]] = {}

    def _changed(self) -> None:
        """A write of this process committed: no other instance here may skip past it
        while its NOTIFY is on the way (nor this one: its own reads ask again)."""
        self._watch.mark(CONVERSATION_TIER, self.agent_id)

    def _text(self, turn: str | None, sealed: bytes | None, key_id: str | None) -> str:
        """A turn row's stored JSON, opened when sealed."""
        if sealed is None:
            return str(turn)
        if self.sealing is None:
            raise without_key(self.db, "no payload key is configured")
        return self.sealing.open(self.agent_id, str(key_id), TURN, sealed).decode("utf-8")

    def _turn_row(self, key: DataKey | None, turn: Turn) -> tuple[str | None, bytes | None]:
        text = turn.model_dump_json()
        if key is None or self.sealing is None:
            return text, None
        return None, self.sealing.seal(self.agent_id, key, TURN, text.encode("utf-8"))

    # -- reads -------------------------------------------------------------------------

    def read(self, session_id: str, retention: Retention, live: LiveRule) -> Turns | None:
        # No round trip while the change watch knows the agent's conversations unchanged
        # since this session was last read: the answer is the same but for the idle rule,
        # applied again to the session's last turn time as then read.
        warm = self._warm.get(session_id)
        if warm is not None and self._watch.unchanged(CONVERSATION_TIER, self.agent_id, warm[0]):
            _, last_at, found = warm
            return found if last_at is not None and live(last_at) else None
        self._warm.pop(session_id, None)
        token = self._watch.token()
        last_at, found = self._read_live_turns(session_id, retention, live)
        self._warm[session_id] = (token, last_at, found)
        return found

    def _read_live_turns(
        self, session_id: str, retention: Retention, live: LiveRule
    ) -> tuple[datetime | None, Turns | None]:
        """The session's last turn time as stored (None: no session) and its live turns."""
        window = retention.window
        with self.db.transaction() as conn:
            row = conn.execute(
                "SELECT started_at, last_at, next_n FROM dreamkeeper_conversation_sessions "
                "WHERE agent_id = %s AND session_id = %s",
                (self.agent_id, session_id),
            ).fetchone()
            if row is None or not live(row[1]):
                return (None if row is None else row[1]), None
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
        first_retained = next_n - retention.retained
        retained = tuple(t for t in turns if t.n >= first_retained)
        archived = tuple(t for t in turns if t.n < first_retained)
        return row[1], (archived, retained)

    def _turns(self, conn: psycopg.Connection, session_id: str, low: int, high: int) -> list[str]:
        """The stored turns numbered from `low` up to (not including) `high`, in order —
        bounded by the session row's next number, so a turn committed after it was read
        is not this read's (and a later turn's trim removes only numbers below `low`)."""
        rows = conn.execute(
            "SELECT turn, sealed, key_id FROM dreamkeeper_conversation_turns WHERE "
            "agent_id = %s AND session_id = %s AND n >= %s AND n < %s ORDER BY n",
            (self.agent_id, session_id, low, high),
        ).fetchall()
        texts = []
        for turn, sealed, key_id in rows:
            try:
                texts.append(self._text(turn, sealed, key_id))
            except SealBroken as exc:
                log.warning("conversation %s: skipped a turn row (%s)", self.agent_id, exc)
        return texts

    def sessions(self) -> dict[str, datetime | None]:
        with self.db.transaction() as conn:
            rows = conn.execute(
                "SELECT session_id, last_at FROM dreamkeeper_conversation_sessions "
                "WHERE agent_id = %s",
                (self.agent_id,),
            ).fetchall()
        return {str(session_id): last_at for session_id, last_at in rows}

    # -- writes ------------------------------------------------------------------------

    def append(self, session_id: str, retention: Retention, next_turn: NextTurnRule) -> Turn:
        for attempt in range(2):
            try:
                return self._append_once(session_id, retention, next_turn)
            except psycopg.errors.ForeignKeyViolation:
                # A new session took the key this process last saw as current, which a
                # forget retired meanwhile: ask again.
                if self.sealing is None or attempt:
                    raise
                self.sealing.forget_current(self.agent_id)
        raise AssertionError("unreachable")

    def _append_once(self, session_id: str, retention: Retention, next_turn: NextTurnRule) -> Turn:
        with self.db.transaction() as conn:
            lock_session(conn, self.agent_id, session_id)
            row = conn.execute(
                "SELECT started_at, last_at, next_n, key_id FROM dreamkeeper_conversation_sessions "
                "WHERE agent_id = %s AND session_id = %s",
                (self.agent_id, session_id),
            ).fetchone()
            step = next_turn(None if row is None else SessionHead(row[0], row[1], int(row[2])))
            turn = step.turn
            if step.fresh:
                # A new or expired session: its turns belonged to a conversation that ended.
                conn.execute(
                    "DELETE FROM dreamkeeper_conversation_turns "
                    "WHERE agent_id = %s AND session_id = %s",
                    (self.agent_id, session_id),
                )
            key = self._session_key(conn, session_id, None if step.fresh else row)
            key_id = None if key is None else key.key_id
            text, sealed = self._turn_row(key, turn)
            conn.execute(
                "INSERT INTO dreamkeeper_conversation_turns (agent_id, session_id, n, turn, "
                "sealed, key_id) VALUES (%s, %s, %s, %s, %s, %s)",
                (self.agent_id, session_id, turn.n, text, sealed, key_id),
            )
            faults.crash_point(faults.ROWS_HALF_WRITTEN)
            conn.execute(
                "INSERT INTO dreamkeeper_conversation_sessions (agent_id, session_id, "
                "started_at, last_at, next_n, key_id) VALUES (%s, %s, %s, %s, %s, %s) "
                "ON CONFLICT (agent_id, session_id) DO UPDATE SET started_at = "
                "excluded.started_at, last_at = excluded.last_at, next_n = excluded.next_n, "
                "key_id = excluded.key_id",
                (self.agent_id, session_id, step.started_at, turn.at, turn.n + 1, key_id),
            )
            # Past the window and the archive's newest `archived`: never read again.
            conn.execute(
                "DELETE FROM dreamkeeper_conversation_turns WHERE agent_id = %s AND "
                "session_id = %s AND n <= %s",
                (self.agent_id, session_id, turn.n - retention.window),
            )
        self._changed()
        return turn

    def _session_key(
        self, conn: psycopg.Connection, session_id: str, row: tuple | None
    ) -> DataKey | None:
        """The key the session's turns are sealed with (`row`: the live session's row;
        None when it begins afresh, with the agent's current key)."""
        if row is None:
            return None if self.sealing is None else self.sealing.current(self.agent_id)
        if row[3] is not None:
            if self.sealing is None:
                raise without_key(self.db, "no payload key is configured")
            return self.sealing.key(self.agent_id, str(row[3]))
        if self.sealing is not None:
            # A live session kept in plaintext so far: sealed now, whole.
            return reseal_session(conn, self.sealing, self.agent_id, session_id)
        return None

    def clear(self, session_id: str) -> None:
        with self.db.transaction() as conn:
            lock_session(conn, self.agent_id, session_id)
            for table in ("dreamkeeper_conversation_turns", "dreamkeeper_conversation_sessions"):
                conn.execute(
                    f"DELETE FROM {table} WHERE agent_id = %s AND session_id = %s",  # noqa: S608
                    (self.agent_id, session_id),
                )
        self._changed()

    def erase_matching(self, mentions: Callable[[str], bool]) -> dict[str, int]:
        """Delete every turn row that `mentions` the forgotten text in one transaction;
        per session (`conversation/{session}`), how many went."""
        removed: dict[str, int] = {}
        with self.db.transaction() as conn:
            rows = conn.execute(
                "SELECT session_id, n, turn, sealed, key_id FROM dreamkeeper_conversation_turns "
                "WHERE agent_id = %s ORDER BY session_id, n FOR UPDATE",
                (self.agent_id,),
            ).fetchall()
            doomed: dict[str, list[int]] = {}
            for session_id, n, stored, sealed, key_id in rows:
                try:
                    text = self._text(stored, sealed, key_id)
                except SealBroken:
                    text = ""
                if stored_turn_mentions(text, mentions):
                    doomed.setdefault(str(session_id), []).append(int(n))
            for session_id, numbers in doomed.items():
                conn.execute(
                    "DELETE FROM dreamkeeper_conversation_turns "
                    "WHERE agent_id = %s AND session_id = %s AND n = ANY(%s)",
                    (self.agent_id, session_id, numbers),
                )
                removed[f"conversation/{session_id}"] = len(numbers)
        self._changed()
        return removed


def lock_session(conn: psycopg.Connection, agent_id: str, session_id: str) -> None:
    """A session's writer lock, until the transaction ends."""
    conn.execute(
        "SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))",
        (f"dreamkeeper-conversation:{agent_id}:{session_id}",),
    )


def reseal_session(
    conn: psycopg.Connection, sealing: Sealing, agent_id: str, session_id: str
) -> DataKey:
    """Seal the session's turns anew with the agent's current data key and name it in
    the session row, in the caller's transaction (which holds the session's lock). A turn
    that does not open is dropped: it could be read by no one."""
    key = sealing.current(agent_id)
    rows = conn.execute(
        "SELECT n, turn, sealed, key_id FROM dreamkeeper_conversation_turns "
        "WHERE agent_id = %s AND session_id = %s",
        (agent_id, session_id),
    ).fetchall()
    for n, turn, sealed, key_id in rows:
        if key_id == key.key_id:
            continue
        try:
            text = (
                str(turn).encode("utf-8")
                if sealed is None
                else sealing.open(agent_id, str(key_id), TURN, sealed)
            )
        except SealBroken:
            conn.execute(
                "DELETE FROM dreamkeeper_conversation_turns "
                "WHERE agent_id = %s AND session_id = %s AND n = %s",
                (agent_id, session_id, n),
            )
            continue
        conn.execute(
            "UPDATE dreamkeeper_conversation_turns SET turn = NULL, sealed = %s, key_id = %s "
            "WHERE agent_id = %s AND session_id = %s AND n = %s",
            (sealing.seal(agent_id, key, TURN, text), key.key_id, agent_id, session_id, n),
        )
    conn.execute(
        "UPDATE dreamkeeper_conversation_sessions SET key_id = %s "
        "WHERE agent_id = %s AND session_id = %s",
        (key.key_id, agent_id, session_id),
    )
    return key


def reseal(db: Database, sealing: Sealing, agent_id: str) -> int:
    """Seal every session of the agent whose turns are not all sealed with its current
    data key anew, a session per transaction under its lock; how many were."""
    done = 0
    key = sealing.current(agent_id)
    rows = db.fetch(
        "SELECT session_id FROM dreamkeeper_conversation_sessions WHERE agent_id = %s "
        "AND key_id IS DISTINCT FROM %s UNION SELECT DISTINCT session_id FROM "
        "dreamkeeper_conversation_turns WHERE agent_id = %s AND key_id IS DISTINCT FROM %s",
        (agent_id, key.key_id, agent_id, key.key_id),
    )
    for (session_id,) in rows:
        with db.transaction() as conn:
            lock_session(conn, agent_id, str(session_id))
            reseal_session(conn, sealing, agent_id, str(session_id))
        done += 1
    return done
