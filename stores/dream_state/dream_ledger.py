"""The record one dream cycle keeps of what it changed, for `UndoDream`.

The document `dreams/{cycle_id}.jsonl` of the agent's documents
(`stores.contract.documents`: a file under the agent's directory, or rows in the database): one line per write a cycle's activity is about to
make, appended *before* the write (write-ahead, like the journal): the entry id and the
whole entry as it was before (null for an entry the cycle creates). The journal holds no
content and no importance, so it cannot put a decayed importance back; this can.

Undo takes, per entry, the state before the cycle's first write and the revision its last
write produced (the last line's revision + 1): an entry at that revision is as the cycle
left it and is put back; any other revision means someone changed it since — reported,
left alone. An intent whose write never landed (a crash) leaves the entry one revision
short, which undo also accepts as untouched.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime

from dreamkeeper.core.models import MemoryEntry
from dreamkeeper.core.validation import validate_cycle_id, validate_entry_id
from dreamkeeper.stores import safe_json
from dreamkeeper.stores.contract.documents import AgentDocuments

log = logging.getLogger(__name__)

DIR = "dreams"
MAX_LINE_BYTES = 1_048_576


@dataclass(frozen=True)
class LedgerLine:
    id: str
    before: MemoryEntry | None  # None: the cycle created this entry
    step: str


@dataclass
class EntryHistory:
    """What one cycle did to one entry."""

    id: str
    first: MemoryEntry | None  # before the cycle touched it (None: it created it)
    last_revision: int  # the revision before the cycle's last write to it
    steps: list[str]


def _name(cycle_id: str) -> str:
    # InvalidInput, not a bare ValueError: raised in an activity, it must fail the
    # step at once (non-retryable), not be retried until the activity times out.
    return f"{validate_cycle_id(cycle_id)}.jsonl"


class DreamLedger:
    def __init__(self, documents: AgentDocuments, cycle_id: str) -> None:
        self._documents = documents
        self.cycle_id = cycle_id
        self._name = f"{DIR}/{_name(cycle_id)}"

    def exists(self) -> bool:
        return bool(self._documents.read(self._name))

    def note(self, step: str, befores: Iterable[tuple[str, MemoryEntry | None]]) -> None:
        """Record intents (id, entry before) with one append and fsync."""
        lines = [
            json.dumps(
                {
                    "id": entry_id,
                    "step": step,
                    "before": None
                    if before is None
                    else before.model_dump(mode="json", by_alias=True),
                },
                separators=(",", ":"),
            )
            for entry_id, before in befores
        ]
        if lines:
            data = ("\n".join(lines) + "\n").encode("utf-8")
            self._documents.append(self._name, data)

    def lines(self) -> list[LedgerLine]:
        data = self._documents.read(self._name) or b""
        out = []
        for raw in data.split(b"\n"):
            if not raw.strip():
                continue
            try:
                obj = safe_json.loads(raw, max_bytes=MAX_LINE_BYTES, max_depth=6)
                if not isinstance(obj, dict):
                    raise ValueError("not an object")
                before = obj.get("before")
                out.append(
                    LedgerLine(
                        id=validate_entry_id(str(obj["id"])),
                        before=None if before is None else MemoryEntry.model_validate(before),
                        step=str(obj.get("step", "")),
                    )
                )
            except (ValueError, KeyError, TypeError) as exc:
                log.warning("dream ledger %s: skipped a malformed line (%s)", self.cycle_id, exc)
        return out

    def histories(self) -> list[EntryHistory]:
        """Per entry, in the order the cycle first touched them."""
        found: dict[str, EntryHistory] = {}
        for line in self.lines():
            rev = 0 if line.before is None else line.before.revision
            known = found.get(line.id)
            if known is None:
                found[line.id] = EntryHistory(line.id, line.before, rev, [line.step])
            else:
                known.last_revision = max(known.last_revision, rev)
                known.steps.append(line.step)
        return list(found.values())


class _NoLedger:
    """Where no cycle id is given (an older caller): writes are not recorded."""

    def note(self, step: str, befores: Iterable[tuple[str, MemoryEntry | None]]) -> None:
        return None


def ledger_for(documents: AgentDocuments, cycle_id: str | None) -> DreamLedger | _NoLedger:
    return _NoLedger() if not cycle_id else DreamLedger(documents, cycle_id)


def prune_ledgers(documents: AgentDocuments, cutoff: datetime) -> list[str]:
    """Remove the ledgers last written before `cutoff` (the archive retention: a cycle
    older than that cannot be undone whole anyway, its archives are being purged).
    Returns the cycle ids removed."""
    removed = []
    for name in documents.names(f"{DIR}/"):
        if not name.endswith(".jsonl"):
            continue
        written = documents.written(name)
        if written is not None and written < cutoff and documents.delete(name):
            removed.append(name.removeprefix(f"{DIR}/").removesuffix(".jsonl"))
    return removed


def ledgers_before(documents: AgentDocuments, cutoff: datetime) -> int:
    """How many ledgers `prune_ledgers(documents, cutoff)` would remove."""
    return sum(
        1
        for name in documents.names(f"{DIR}/")
        if name.endswith(".jsonl")
        and (written := documents.written(name)) is not None
        and written < cutoff
    )


def scrub_ledgers(
    documents: AgentDocuments, ids: set[str], mentions: Callable[[str], bool]
) -> dict[str, int]:
    """Drop, from every cycle's ledger, the lines about erased entries (`ids`) and any
    line that `mentions` the forgotten text (a before-state quoting it), for
    `stores.forget`. Undo of those cycles then leaves the erased entries alone: there
    is nothing left to put back. Returns, per ledger (its document name), how many
    lines went."""
    removed: dict[str, int] = {}
    for name in documents.names(f"{DIR}/"):
        if not name.endswith(".jsonl"):
            continue
        data = documents.read(name) or b""
        lines = data.splitlines(keepends=True)
        kept = [line for line in lines if not _about(line, ids, mentions)]
        if len(kept) < len(lines):
            documents.write(name, b"".join(kept))
            removed[name] = len(lines) - len(kept)
    return removed


def _about(line: bytes, ids: set[str], mentions: Callable[[str], bool]) -> bool:
    text = line.decode("utf-8", "replace")
    if mentions(text):
        return True
    try:
        obj = safe_json.loads(line, max_bytes=MAX_LINE_BYTES, max_depth=6)
    except ValueError:
        return False
    if not isinstance(obj, dict):
        return False
    if obj.get("id") in ids:
        return True
    before = obj.get("before")
    content = before.get("content") if isinstance(before, dict) else None
    return isinstance(content, str) and mentions(content)
