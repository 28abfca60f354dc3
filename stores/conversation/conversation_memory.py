"""Conversation memory: the turns of each session, per agent.

A session keeps its last `MAX_RETAINED` turns; older turns go to its archive (the last
`MAX_ARCHIVED` kept), so out-of-window recall can quote the whole live conversation. The
archive belongs to the live session: a new session, or one idle longer than
`SESSION_IDLE`, starts afresh and discards it, and an expired session's turns are never
read back. A session id may have `/`-separated segments (`session/blazor-session`), each
validated on its own. Each turn carries its number in the conversation (`n`, from 1).

Every turn is also appended to the conversation log that preference inference reads
(`stores.conversation.conversation_log`).

The rules are written once here (`ConversationBase`); a backend keeps the sessions:
files (`stores.files.conversation_memory`) or rows
(`stores.postgres.conversation_memory`).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from typing import TypedDict, Unpack

from dreamkeeper.core.errors import InvalidInput
from dreamkeeper.core.models import as_utc, utc_now
from dreamkeeper.core.validation import (
    require_unicode,
    validate_agent_id,
    validate_session_segment,
)
from dreamkeeper.stores.contract.conversation import MAX_TURN_CHARS, Conversation, Turn
from dreamkeeper.stores.conversation.conversation_log import ConversationLog

MAX_RETAINED = 50
MAX_ARCHIVED = 500
SESSION_IDLE = timedelta(hours=1)
ROLES = ("user", "assistant")

MAX_SEGMENTS = 8


def validate_session_id(session_id: str) -> str:
    """1 to 8 valid segments joined by single `/`: never rooted, empty or escaping."""
    if not isinstance(session_id, str):
        raise InvalidInput(f"invalid session id {session_id!r}: expected text")
    segments = session_id.split("/")
    if len(segments) > MAX_SEGMENTS:
        raise InvalidInput(f"invalid session id {session_id!r}: at most {MAX_SEGMENTS} segments")
    try:
        for segment in segments:
            validate_session_segment(segment)
    except InvalidInput as exc:
        raise InvalidInput(f"invalid session id {session_id!r}: {exc}") from None
    return session_id


def check_turn(session_id: str, role: str, content: str) -> None:
    """A turn a session may take: a valid session id and role, text within the limit."""
    validate_session_id(session_id)
    if role not in ROLES:
        raise InvalidInput(f"invalid role {role!r}: expected one of {', '.join(ROLES)}")
    if not isinstance(content, str):
        raise InvalidInput("turn content must be text")
    require_unicode(content, "turn content")
    if len(content) > MAX_TURN_CHARS:
        raise InvalidInput(f"turn is {len(content)} characters: the limit is {MAX_TURN_CHARS}")


class ConversationOptions(TypedDict, total=False):
    """What a conversation store is opened with besides its place and agent, the same
    for every backend: the clock (`utc_now`), the idle timeout that ends a session
    (`SESSION_IDLE`), the turns a session keeps (`MAX_RETAINED`) and the archived ones
    kept beyond them (`MAX_ARCHIVED`)."""

    clock: Callable[[], datetime]
    idle: timedelta
    max_retained: int
    max_archived: int


class ConversationBase:
    """What every conversation backend shares: turn validation, the idle rule, the
    session listing and the conversation log. A backend provides `_add` (append a turn
    under its writer exclusion: a new or expired session starts afresh at turn 1, its
    archive discarded; turns past the window go to the archive, of which the newest
    `max_archived` are kept), `_live_turns`, `_stored_ids`, `_last_at` and `clear`."""

    log: ConversationLog

    def __init__(self, agent_id: str, **options: Unpack[ConversationOptions]) -> None:
        self.agent_id = validate_agent_id(agent_id)
        self._clock = options.get("clock", utc_now)
        self._idle = options.get("idle", SESSION_IDLE)
        self._max_retained = options.get("max_retained", MAX_RETAINED)
        self._max_archived = options.get("max_archived", MAX_ARCHIVED)

    def now(self) -> datetime:
        return as_utc(self._clock())

    def _is_live(self, last_at: datetime) -> bool:
        return self.now() - last_at <= self._idle

    def conversation(self, session_id: str) -> Conversation:
        """The live session's turns (nothing for a new or expired session)."""
        validate_session_id(session_id)
        found = self._live_turns(session_id)
        if found is None:
            return Conversation(session_id, (), ())
        return Conversation(session_id, *found)

    def sessions(self, *, include_expired: bool = False) -> list[str]:
        """Ids of the stored sessions, nested ones too, sorted; without `include_expired`
        only live ones (a session idle past the timeout has no conversation to read)."""
        found = self._stored_ids()
        if include_expired:
            return found
        return [sid for sid in found if (at := self._last_at(sid)) and self._is_live(at)]

    def add_turn(self, session_id: str, role: str, content: str) -> Turn:
        """Append a turn (numbered in order, never reused) to the session."""
        check_turn(session_id, role, content)
        turn = self._add(session_id, role, content)
        self.log.append(session_id, role, content, turn.at)
        return turn

    def _add(self, session_id: str, role: str, content: str) -> Turn:
        """Append the turn, its time read under the writer exclusion."""
        raise NotImplementedError

    def _live_turns(self, session_id: str) -> tuple[tuple[Turn, ...], tuple[Turn, ...]] | None:
        """The live session's (archived, retained) turns; None when it is not live."""
        raise NotImplementedError

    def _stored_ids(self) -> list[str]:
        raise NotImplementedError

    def _last_at(self, session_id: str) -> datetime | None:
        raise NotImplementedError

    def clear(self, session_id: str) -> None:
        """End the session: its turns and its archive are discarded."""
        raise NotImplementedError
