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

from dreamkeeper.stores.files import append_line
from dreamkeeper.stores.models import as_utc

KEEP_ROTATED = 20
MAX_TURN_CHARS = 4_000


@dataclass(frozen=True)
class LoggedTurn:
    session_id: str
    role: str
    content: str
    at: datetime


class ConversationLog:
    def __init__(self, agent_root: Path) -> None:
        self.dir = agent_root / "conversation-log"
        self.path = self.dir / "turns.jsonl"
        self.processed = self.dir / "processed"

    def append(self, session_id: str, role: str, content: str, at: datetime) -> None:
        line = json.dumps(
            {"sessionId": session_id, "role": role, "content": content[:MAX_TURN_CHARS],
             "at": as_utc(at).isoformat()}
        )  # fmt: skip
        self.dir.mkdir(parents=True, exist_ok=True)
        append_line(self.path, line)

    def rotate(self, name: str) -> Path | None:
        """Move the live log to `processed/{name}.jsonl` and return it; idempotent per
        name (a retry finds the rotated file). None when there was nothing to rotate."""
        target = self.processed / f"{name}.jsonl"
        if target.exists():
            return target
        if not self.path.exists() or self.path.stat().st_size == 0:
            return None
        self.processed.mkdir(parents=True, exist_ok=True)
        os.replace(self.path, target)
        rotated = sorted(self.processed.glob("*.jsonl"), key=lambda p: p.stat().st_mtime)
        for old in rotated[:-KEEP_ROTATED]:
            old.unlink(missing_ok=True)
        return target

    @staticmethod
    def read(path: Path) -> list[LoggedTurn]:
        """Turns in a log file; torn or malformed lines (a crash mid-append) are skipped."""
        turns = []
        for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
            try:
                raw = json.loads(line)
                turns.append(LoggedTurn(
                    str(raw["sessionId"]), str(raw["role"]), str(raw["content"]),
                    as_utc(datetime.fromisoformat(raw["at"])),
                ))  # fmt: skip
            except (ValueError, KeyError, TypeError):
                continue
        return turns
