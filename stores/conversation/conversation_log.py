"""The append-only conversation log read by preference inference:
`conversation-log/turns.jsonl`, one JSON object per turn.

A pass rotates the log first (an atomic rename to `conversation-log/processed/`), so
turns written during the pass land in a fresh file and nothing is read twice or lost.
Rotated files are kept — the last `KEEP_ROTATED` of them — rather than destroyed.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from dreamkeeper.core.models import as_utc
from dreamkeeper.stores import safe_json
from dreamkeeper.stores.files import (
    append_line,
    check_component,
    real_directory,
    replace_within,
    unlink_within,
)

KEEP_ROTATED = 20
MAX_TURN_CHARS = 4_000
MAX_LINE_BYTES = 8 * MAX_TURN_CHARS + 1_024  # escapes included; longer is not ours
MAX_SESSION_ID_CHARS = 1_100  # 8 segments of 128, and slashes
MAX_READ_BYTES = 256 * 1_048_576  # one rotated log; preference inference uses its tail


@dataclass(frozen=True)
class LoggedTurn:
    session_id: str
    role: str
    content: str
    at: datetime


class ConversationLog:
    def __init__(self, agent_root: Path) -> None:
        self.agent_root = agent_root
        self.dir = agent_root / "conversation-log"
        self.path = self.dir / "turns.jsonl"
        self.processed = self.dir / "processed"

    def append(self, session_id: str, role: str, content: str, at: datetime) -> None:
        line = json.dumps(
            {
                "sessionId": session_id,
                "role": role,
                "content": content[:MAX_TURN_CHARS],
                "at": as_utc(at).isoformat(),
            }
        )
        append_line(self.path, line, within=self.agent_root)

    def rotate(self, name: str) -> Path | None:
        """Move the live log to `processed/{name}.jsonl` and return it; idempotent per
        name (a retry finds the rotated file). None when there was nothing to rotate."""
        target = self.processed / f"{check_component(name)}.jsonl"
        if not real_directory(self.agent_root, self.dir, create=False):
            return None
        if os.path.lexists(target):
            real_directory(self.agent_root, self.processed)  # never a linked directory
            return target
        try:
            if os.lstat(self.path).st_size == 0:
                return None
        except FileNotFoundError:
            return None
        replace_within(self.path, target, self.agent_root)
        rotated = sorted(self.processed.glob("*.jsonl"), key=lambda p: p.lstat().st_mtime)
        for old in rotated[:-KEEP_ROTATED]:
            unlink_within(old, self.agent_root)
        return target

    @staticmethod
    def read(path: Path) -> list[LoggedTurn]:
        """Turns in a log file; torn or malformed lines (a crash mid-append, garbage,
        deep nesting, oversized) are skipped; a symlink, FIFO or directory in the log's
        place reads as no turns."""
        try:
            data = safe_json.read_regular(path, MAX_READ_BYTES)
        except OSError:  # absent, or NotRegularFile
            return []
        turns = []
        for line in data.splitlines():
            try:
                raw = safe_json.loads(line, max_bytes=MAX_LINE_BYTES, max_depth=1)
                if not isinstance(raw, dict):
                    continue
                session, role, content, at = (
                    raw["sessionId"],
                    raw["role"],
                    raw["content"],
                    raw["at"],
                )
                if not all(isinstance(v, str) for v in (session, role, content, at)):
                    continue
                if role not in ("user", "assistant") or len(session) > MAX_SESSION_ID_CHARS:
                    continue
                turns.append(
                    LoggedTurn(
                        session, role, content[:MAX_TURN_CHARS], as_utc(datetime.fromisoformat(at))
                    )
                )
            except (ValueError, KeyError):
                continue
        return turns
