"""Who is using memory this turn: a user session, a patrol task or a subagent.

The kind fixes the working-memory namespace its tools write to, the stash prefix the loop
parks elided tool results under, whether its working-memory saves get the background
TTL floor, and what the per-turn context shows it. Stash prefixes follow the run, not
the namespace: a subagent writes under `subagent/{task}` but stashes under
`stash/subagent-{task}` (a prefix derived from the namespace would match nothing).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from dreamkeeper.core.validation import STASH_ROOT, validate_session_segment


class ContextKind(StrEnum):
    USER = "user"
    PATROL = "patrol"
    SUBAGENT = "subagent"


_ROOT = {
    ContextKind.USER: "session",
    ContextKind.PATROL: "patrol",
    ContextKind.SUBAGENT: "subagent",
}


@dataclass(frozen=True)
class SessionContext:
    id: str  # the session id of a user session, the task name or id otherwise
    kind: ContextKind = ContextKind.USER

    def __post_init__(self) -> None:
        # One segment: it becomes the second of the namespace's two.
        validate_session_segment(self.id)
        object.__setattr__(self, "kind", ContextKind(self.kind))

    @property
    def namespace(self) -> str:
        return f"{_ROOT[self.kind]}/{self.id}"

    @property
    def stash_prefix(self) -> str:
        run = self.id if self.kind is ContextKind.USER else f"{self.kind}-{self.id}"
        return f"{STASH_ROOT}/{run}"

    @property
    def conversation_id(self) -> str:
        return self.id if self.kind is ContextKind.USER else f"{self.kind}-{self.id}"

    @property
    def background(self) -> bool:
        """Patrols and subagents: working-memory saves live at least 4 hours."""
        return self.kind is not ContextKind.USER

    @classmethod
    def user(cls, session_id: str) -> SessionContext:
        return cls(session_id, ContextKind.USER)
