"""Conversation memory's contract: each session's recent turns, its out-of-window archive
and the conversation log, and the values it hands out (`Turn`, `Conversation`). The
rules every backend shares are `stores.conversation.conversation_memory`."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Literal, Protocol, runtime_checkable

from pydantic import BaseModel, Field

from dreamkeeper.core.models import UtcDatetime

MAX_TURN_CHARS = 100_000

Role = Literal["user", "assistant"]


class Turn(BaseModel):
    n: int
    role: Role
    content: str = Field(max_length=MAX_TURN_CHARS)
    at: UtcDatetime


@dataclass(frozen=True)
class Conversation:
    """A live session: archived turns then retained ones, in order."""

    session_id: str
    archived: tuple[Turn, ...]
    retained: tuple[Turn, ...]

    @property
    def turns(self) -> tuple[Turn, ...]:
        return self.archived + self.retained

    def __len__(self) -> int:
        return len(self.archived) + len(self.retained)


@runtime_checkable
class ConversationStore(Protocol):
    """One agent's conversations: per session the recent turns (a window), the turns
    evicted from it (the archive) and, for the preference pass, the conversation log."""

    agent_id: str

    def now(self) -> datetime: ...

    def conversation(self, session_id: str) -> Conversation:
        """The live session's turns (nothing for a new or expired session)."""
        ...

    def sessions(self, *, include_expired: bool = False) -> list[str]:
        """Ids of the stored sessions, sorted (live ones only unless `include_expired`)."""
        ...

    def add_turn(self, session_id: str, role: str, content: str) -> Turn:
        """Append a turn (numbered in order, never reused) to the session."""
        ...

    def clear(self, session_id: str) -> None:
        """End the session: its turns and its archive are discarded."""
        ...

    def erase_matching(self, mentions: Callable[[str], bool]) -> dict[str, int]:
        """`forget`: remove every turn that `mentions` the forgotten text from the
        sessions (expired ones too), their archives and the conversation log; how many
        went per place."""
        ...
