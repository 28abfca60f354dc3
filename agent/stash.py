"""The tool-result stash: an oversized tool result is elided from the conversation to its
head and tail, and the original is parked in working memory for the model to fetch.

Originals go to `stash/{run}/{callId}` with tags `stash`, `tool-result`, `tool:{name}`,
for 60 minutes. Only the loop writes there (the tools refuse `stash/` keys), which is
what lets a stash listing be trusted. The `[stash-registry]` note lists the keys stashed
during the current run only.
"""

from __future__ import annotations

import re
from datetime import timedelta

from dreamkeeper.agent.session import SessionContext
from dreamkeeper.stores.contract import WorkingMemoryStore
from dreamkeeper.stores.working.working_memory import MAX_VALUE_CHARS

STASH_TTL = timedelta(minutes=60)
ELIDE_OVER_CHARS = 8_000
HEAD_CHARS = 3_000
TAIL_CHARS = 1_500
REGISTRY_TAG = "[stash-registry]"

_UNSAFE = re.compile(r"[^A-Za-z0-9_\-.:@]")


class ToolResultStash:
    def __init__(
        self,
        working: WorkingMemoryStore,
        session: SessionContext,
        *,
        elide_over: int = ELIDE_OVER_CHARS,
        head: int = HEAD_CHARS,
        tail: int = TAIL_CHARS,
    ) -> None:
        if head + tail >= elide_over:
            raise ValueError("head + tail must be shorter than the elision threshold")
        self.working = working
        self.prefix = session.stash_prefix
        self._elide_over, self._head, self._tail = elide_over, head, tail
        self.stashed: dict[str, tuple[str, int]] = {}  # key -> (tool, original length)

    def key_for(self, call_id: str) -> str:
        segment = _UNSAFE.sub("_", call_id)[:120] or "call"
        return f"{self.prefix}/{segment}"

    def process(self, tool_name: str, call_id: str, result: str) -> str:
        """What goes into the conversation for this tool result."""
        if len(result) <= self._elide_over:
            return result
        key = self.key_for(call_id)
        parked = result[:MAX_VALUE_CHARS]
        tool_tag = "tool:" + (_UNSAFE.sub("_", tool_name)[:59] or "unknown")
        self.working.put_stash(key, parked, ttl=STASH_TTL, tags=["stash", "tool-result", tool_tag])
        self.stashed[key] = (tool_name, len(result))
        omitted = len(result) - self._head - self._tail
        cut = (
            ""
            if len(parked) == len(result)
            else (f" (only its first {MAX_VALUE_CHARS} characters could be kept)")
        )
        marker = (
            f"\n\n[... {omitted} characters elided. The full result ({len(result)} characters) "
            f"is in working memory at {key}{cut} for {int(STASH_TTL.total_seconds() // 60)} "
            f'minutes: get_from_working_memory("{key}") ...]\n\n'
        )
        return result[: self._head] + marker + result[-self._tail :]

    def registry_note(self) -> str | None:
        """The keys stashed during this run, or None when nothing was."""
        if not self.stashed:
            return None
        lines = [
            f"- {key} ({tool}, {size} characters)" for key, (tool, size) in self.stashed.items()
        ]
        return (
            f"{REGISTRY_TAG} Tool results elided from this run's context; the originals are in "
            "working memory (get_from_working_memory with the key):\n" + "\n".join(lines)
        )
