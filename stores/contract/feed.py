"""The change feed's records: what each write to an agent's long-term memory did, in
order — time, action, entry id, category, content fingerprint, the entry's revision
after the change, the operation id that caused it and a reason; never the content. A
file store keeps them as the lines of its journal (`stores.files.journal`, whose line
format `to_line`/`from_line` are), a database as rows of its feed table."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum

from dreamkeeper.core.models import as_utc
from dreamkeeper.stores import safe_json

MAX_LINE_BYTES = 16_384  # our records are a few hundred bytes; anything longer is garbage


class JournalAction(StrEnum):
    CREATED = "created"
    UPDATED = "updated"
    REINFORCED = "reinforced"
    EXTENDED = "extended"
    MERGED = "merged"
    ARCHIVED = "archived"
    RESTORED = "restored"
    SUPERSEDED = "superseded"  # a newer fact replaced it: validity ended, content kept
    UNSUPERSEDED = "unsuperseded"  # a supersede undone: current again
    DECAYED = "decayed"
    REVIEWED = "reviewed"
    PURGED = "purged"
    EMBEDDED = "embedded"  # a vector was (re)generated; the entry itself did not change
    REPAIRED = "repaired"  # a write whose file never landed; the file on disk stands
    EPOCH = "epoch"  # the journal's first line: the store's epoch in `id`, no entry
    # The file journal's second line after a compaction (`stores.files.journal`): the
    # records before it were dropped; its generation in `rev`, no entry.
    COMPACTED = "compacted"


@dataclass(frozen=True)
class JournalRecord:
    at: datetime
    action: JournalAction
    id: str
    category: str | None
    fingerprint: str | None
    reason: str | None = None
    rev: int | None = None  # the entry's revision after this change (None: legacy line)
    op: str | None = None  # the operation that made the change, for exactly-once retries
    first: bool = False  # first record of one writer-lock hold

    def to_line(self) -> str:
        raw: dict[str, object] = {
            "at": self.at.isoformat(),
            "action": str(self.action),
            "id": self.id,
            "category": self.category,
            "fingerprint": self.fingerprint,
            "reason": self.reason,
        }
        if self.rev is not None:
            raw["rev"] = self.rev
        if self.op is not None:
            raw["op"] = self.op
        if self.first:
            raw["first"] = True
        return json.dumps(raw, separators=(",", ":"), ensure_ascii=True)

    @classmethod
    def from_line(cls, line: bytes) -> JournalRecord:
        """Parse one line; ValueError for anything that is not exactly a record."""
        raw = safe_json.loads(line, max_bytes=MAX_LINE_BYTES, max_depth=2)  # UnsafeJSON
        if not isinstance(raw, dict):
            raise ValueError("not a JSON object")
        try:
            rev, op, first = raw.get("rev"), raw.get("op"), raw.get("first", False)
            if rev is not None and (isinstance(rev, bool) or not isinstance(rev, int)):
                raise ValueError("rev is not an integer")
            if op is not None and not isinstance(op, str):
                raise ValueError("op is not a string")
            return cls(
                at=as_utc(datetime.fromisoformat(_text(raw, "at"))),
                action=JournalAction(_text(raw, "action")),
                id=_text(raw, "id"),
                category=_optional_text(raw, "category"),
                fingerprint=_optional_text(raw, "fingerprint"),
                reason=_optional_text(raw, "reason"),
                rev=rev,
                op=op,
                first=first is True,
            )
        except (KeyError, TypeError) as exc:
            raise ValueError(f"{type(exc).__name__}: {exc}") from None


def _text(raw: dict, key: str) -> str:
    value = raw[key]
    if not isinstance(value, str):
        raise TypeError(f"{key} is not a string")
    return value


def _optional_text(raw: dict, key: str) -> str | None:
    value = raw.get(key)
    if value is not None and not isinstance(value, str):
        raise TypeError(f"{key} is not a string")
    return value
