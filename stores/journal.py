"""The append-only journal of every change to an agent's long-term memory.

One JSON object per line: time, action, entry id, category, content fingerprint and
reason — never the content. It doubles as the change feed by which a reader process
notices another process's writes without rescanning the corpus.
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from pathlib import Path

from dreamkeeper.stores.files import append_line

log = logging.getLogger(__name__)


class JournalAction(StrEnum):
    CREATED = "created"
    UPDATED = "updated"
    REINFORCED = "reinforced"
    EXTENDED = "extended"
    MERGED = "merged"
    ARCHIVED = "archived"
    RESTORED = "restored"
    DECAYED = "decayed"
    REVIEWED = "reviewed"
    PURGED = "purged"
    EMBEDDED = "embedded"  # a vector was (re)generated; the entry itself did not change


@dataclass(frozen=True)
class JournalRecord:
    at: datetime
    action: JournalAction
    id: str
    category: str | None
    fingerprint: str | None
    reason: str | None = None

    def to_line(self) -> str:
        return json.dumps(
            {
                "at": self.at.isoformat(),
                "action": str(self.action),
                "id": self.id,
                "category": self.category,
                "fingerprint": self.fingerprint,
                "reason": self.reason,
            },
            separators=(",", ":"),
        )

    @classmethod
    def from_line(cls, line: str) -> JournalRecord:
        raw = json.loads(line)
        return cls(
            at=datetime.fromisoformat(raw["at"]),
            action=JournalAction(raw["action"]),
            id=raw["id"],
            category=raw.get("category"),
            fingerprint=raw.get("fingerprint"),
            reason=raw.get("reason"),
        )


class Journal:
    def __init__(self, path: Path) -> None:
        self.path = path

    def append(self, record: JournalRecord) -> int:
        """Append a record; returns the journal's size afterwards."""
        return append_line(self.path, record.to_line())

    def size(self) -> int:
        try:
            return os.stat(self.path).st_size
        except FileNotFoundError:
            return 0

    def read_from(self, offset: int) -> tuple[list[JournalRecord], int]:
        """Complete records from byte `offset` on, and the offset after the last one.

        A trailing line without its newline is a write in progress: left for next time.
        """
        try:
            with open(self.path, "rb") as handle:
                handle.seek(offset)
                data = handle.read()
        except FileNotFoundError:
            return [], 0
        end = data.rfind(b"\n") + 1
        records: list[JournalRecord] = []
        for raw in data[:end].splitlines():
            if not raw.strip():
                continue
            try:
                records.append(JournalRecord.from_line(raw.decode("utf-8")))
            except (ValueError, KeyError, UnicodeDecodeError) as exc:
                log.warning("journal %s: skipped a malformed line (%s)", self.path, exc)
        return records, offset + end

    def read_all(self) -> list[JournalRecord]:
        return self.read_from(0)[0]
