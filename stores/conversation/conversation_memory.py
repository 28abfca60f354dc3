"""Conversation memory: the turns of each session, per agent.

A session keeps its last `MAX_RETAINED` turns; older turns go to its archive (the last
`MAX_ARCHIVED` kept), so out-of-window recall can quote the whole live conversation. The
archive belongs to the live session: a new session, or one idle longer than
`SESSION_IDLE`, starts afresh and discards it, and an expired session's turns are never
read back. A session id may have `/`-separated segments (`session/blazor-session`), each
validated on its own. Each turn carries its number in the conversation (`n`, from 1).

Every turn is also appended to the conversation log that preference inference reads
(`stores.conversation.conversation_log`).

The rules are written once here (`ConversationMemory`) for every backend. A backend is a
`ConversationStorage` object handed in, not a subclass: it keeps the sessions and its
own state (files and their locks in `stores.files.conversation_memory`, rows, sealing
keys and the change watch in `stores.postgres.conversation_memory`) and takes each
session's writer exclusion; the shared class decides what is stored and what is read.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import partial
from typing import Protocol, TypedDict, Unpack

from dreamkeeper.core.errors import InvalidInput
from dreamkeeper.core.models import as_utc, utc_now
from dreamkeeper.core.validation import (
    require_unicode,
    validate_agent_id,
    validate_session_segment,
)
from dreamkeeper.stores.contract.conversation import MAX_TURN_CHARS, Conversation, Turn
from dreamkeeper.stores.contract.documents import AgentDocuments
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


def stored_turn_mentions(stored: str, mentions: Callable[[str], bool]) -> bool:
    """Whether a stored turn (its JSON) holds the forgotten text (`stores.forget`): in
    its content, or anywhere in what is stored (so a turn that does not parse goes too)."""
    try:
        content = Turn.model_validate_json(stored).content
    except ValueError:  # ValidationError is a ValueError
        content = ""
    return mentions(content) or mentions(stored)


class ConversationOptions(TypedDict, total=False):
    """What a conversation store is opened with besides its place and agent, the same
    for every backend: the clock (`utc_now`), the idle timeout that ends a session
    (`SESSION_IDLE`), the turns a session keeps (`MAX_RETAINED`) and the archived ones
    kept beyond them (`MAX_ARCHIVED`)."""

    clock: Callable[[], datetime]
    idle: timedelta
    max_retained: int
    max_archived: int


@dataclass(frozen=True)
class Retention:
    """How many turns a session keeps: the last `retained` in its window, and the
    `archived` ones evicted before them (none when not positive)."""

    retained: int = MAX_RETAINED
    archived: int = MAX_ARCHIVED

    @classmethod
    def of(cls, options: ConversationOptions) -> Retention:
        return cls(
            options.get("max_retained", MAX_RETAINED), options.get("max_archived", MAX_ARCHIVED)
        )

    @property
    def window(self) -> int:
        """The newest turn numbers of a session ever read: the window and its archive."""
        return self.retained + max(self.archived, 0)

    def kept_archive(self, archived: tuple[Turn, ...]) -> tuple[Turn, ...]:
        return archived[-self.archived :] if self.archived > 0 else ()


@dataclass(frozen=True)
class SessionHead:
    """A stored session as its writer finds it: when it began, its last turn's time and
    the number its next turn takes."""

    started_at: datetime
    last_at: datetime
    next_n: int


@dataclass(frozen=True)
class NextTurn:
    """What a writer stores: the turn, the session's start and whether the session
    begins afresh (`fresh`: it was new or had expired; whatever was stored of it, its
    archive too, is discarded first)."""

    turn: Turn
    started_at: datetime
    fresh: bool


Turns = tuple[tuple[Turn, ...], tuple[Turn, ...]]  # a live session's (archived, retained)
NextTurnRule = Callable[[SessionHead | None], NextTurn]  # what a session's writer stores
LiveRule = Callable[[datetime], bool]  # whether a session whose last turn was then is live


class ConversationStorage(Protocol):
    """A backend's steps under the shared conversation rules (`ConversationMemory`):
    where an agent's sessions and their turns lie, and each session's writer exclusion."""

    def append(self, session_id: str, retention: Retention, next_turn: NextTurnRule) -> Turn:
        """Under the session's writer exclusion: read its head (None: no session), ask
        `next_turn` what to store, store it, and keep of the turns before it only
        what `retention` keeps. May ask again (a retried transaction)."""
        ...

    def read(self, session_id: str, retention: Retention, live: LiveRule) -> Turns | None:
        """The session's (archived, retained) turns when `live` holds for its last
        turn's time; None when it does not or there is no session (an expired session's
        turns are never read). The archive may hold more than `retention` keeps."""
        ...

    def sessions(self) -> dict[str, datetime | None]:
        """Every stored session, nested and expired ones too, by id: its last turn's
        time (None: a session whose state does not read)."""
        ...

    def clear(self, session_id: str) -> None:
        """Discard the session's turns and its archive, under its writer exclusion."""
        ...

    def erase_matching(self, mentions: Callable[[str], bool]) -> dict[str, int]:
        """Remove every stored turn, expired sessions included, that `mentions` the
        forgotten text (its content, or the stored text when that does not parse);
        how many went per place. Turn numbers are kept."""
        ...


class ConversationMemory:
    """The conversation store (`stores.contract.conversation.ConversationStore`): turn
    validation, the idle rule, turn numbering, the retention caps, the session listing
    and the conversation log, over a backend's `ConversationStorage`."""

    def __init__(
        self,
        agent_id: str,
        storage: ConversationStorage,
        documents: AgentDocuments,
        **options: Unpack[ConversationOptions],
    ) -> None:
        self.agent_id = validate_agent_id(agent_id)
        self.storage = storage
        self.log = ConversationLog(documents)
        self.retention = Retention.of(options)
        self._clock = options.get("clock", utc_now)
        self._idle = options.get("idle", SESSION_IDLE)

    def now(self) -> datetime:
        return as_utc(self._clock())

    def _is_live(self, last_at: datetime) -> bool:
        return self.now() - last_at <= self._idle

    def conversation(self, session_id: str) -> Conversation:
        """The live session's turns (nothing for a new or expired session)."""
        validate_session_id(session_id)
        found = self.storage.read(session_id, self.retention, self._is_live)
        if found is None:
            return Conversation(session_id, (), ())
        archived, retained = found
        return Conversation(session_id, self.retention.kept_archive(archived), retained)

    def sessions(self, *, include_expired: bool = False) -> list[str]:
        """Ids of the stored sessions, nested ones too, sorted; without `include_expired`
        only live ones (a session idle past the timeout has no conversation to read)."""
        found = self.storage.sessions()
        return sorted(
            sid
            for sid, last_at in found.items()
            if include_expired or (last_at is not None and self._is_live(last_at))
        )

    def add_turn(self, session_id: str, role: str, content: str) -> Turn:
        """Append a turn (numbered in order, never reused) to the session."""
        check_turn(session_id, role, content)
        turn = self.storage.append(
            session_id, self.retention, partial(self._next_turn, role, content)
        )
        self.log.append(session_id, role, content, turn.at)
        return turn

    def _next_turn(self, role: str, content: str, head: SessionHead | None) -> NextTurn:
        """The turn a session takes next, its time read under the writer exclusion: a
        new or expired session starts afresh at turn 1."""
        now = self.now()
        if head is None or not self._is_live(head.last_at):
            n, started, fresh = 1, now, True
        else:
            n, started, fresh = head.next_n, head.started_at, False
        turn = Turn(n=n, role=role, content=content, at=now)  # type: ignore[arg-type]
        return NextTurn(turn, started, fresh)

    def clear(self, session_id: str) -> None:
        """End the session: its turns and its archive are discarded."""
        self.storage.clear(validate_session_id(session_id))

    def erase_matching(self, mentions: Callable[[str], bool]) -> dict[str, int]:
        """Remove every turn that `mentions` the forgotten text (`stores.forget`) from
        the sessions (expired ones too), their archives and the conversation log (live
        and rotated); how many went per place. Turn numbers are kept: the rest of a
        conversation reads as it did, with the gap."""
        removed = self.storage.erase_matching(mentions)
        removed.update(self.log.scrub(mentions))
        return removed
