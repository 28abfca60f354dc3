"""Export and import: one agent's long-term memory as a portable, versioned JSON Lines
file.

Line 1 is the header: `{"format": "dreamkeeper-export", "version": 1, "agent": ...,
"exportedAt": ..., "entries": N, "includeArchived": ..., "withVectors": ...}`. Every
other line is one entry: `{"entry": {...}}` — the entry exactly as on disk (camelCase,
ids, times, counts, archive state; the store's own bookkeeping left out) — with, when
exported `--with-vectors`, `"vector": {"model": "<model key hex>", "values": [...]}`
for an entry whose stored vector is current.

Import goes through `MemoryStore.import_entries` (the bulk path): idempotent by id,
an id already here with other content reported as a conflict and left alone, every entry
validated before anything is written (its dates too: well-formed, none in the future). A
file of another format or version is refused before anything is read further. Vectors
are written only into a store whose embedding model has the same key; otherwise the
worker's backfill makes them.

A history from elsewhere (years of notes or chat) needs no ids: an entry line may give
only `content` and its own `createdAt` (when it was written) and `validFrom` (when it
became true), with `category`, `tags`, `metadata` and `importanceScore` if it likes. Its
id is derived from its content and `createdAt`, so importing the same file again
changes nothing; with no `createdAt` it is dated at the import.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from typing import IO, Any

import numpy as np
from pydantic import ValidationError

from dreamkeeper.core.errors import InvalidInput
from dreamkeeper.core.models import MemoryEntry, utc_now
from dreamkeeper.stores import safe_json
from dreamkeeper.stores.contract import MemoryStore
from dreamkeeper.stores.contract.records import BulkReport
from dreamkeeper.stores.longterm.records import imported_entry, validate_id_fields

FORMAT = "dreamkeeper-export"
FORMAT_VERSION = 1
MAX_LINE_BYTES = 8 * 1_048_576  # an entry with its vector, generously
_EXCLUDED = {"applied_ops", "revision"}


@dataclass
class ExportHeader:
    agent: str
    exported_at: datetime
    entries: int
    include_archived: bool
    with_vectors: bool

    def to_json(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "version": FORMAT_VERSION,
            "agent": self.agent,
            "exportedAt": self.exported_at.isoformat(),
            "entries": self.entries,
            "includeArchived": self.include_archived,
            "withVectors": self.with_vectors,
        }


def _stored_vector(store: MemoryStore, entry: MemoryEntry) -> dict[str, Any] | None:
    """The entry's vector if it was made from this content (any model)."""
    found = store.stored_vector(entry)
    if found is None:
        return None
    return {"model": found.model_key.hex(), "values": [float(v) for v in found.values]}


def export_lines(
    store: MemoryStore, *, include_archived: bool = False, with_vectors: bool = False
) -> Iterator[str]:
    """The file's lines (each without its newline): the header, then one per entry,
    oldest first, so a re-export of the same store is the same file but the time."""
    entries = sorted(
        store.entries(include_archived=include_archived), key=lambda e: (e.created_at, e.id)
    )
    header = ExportHeader(store.agent_id, utc_now(), len(entries), include_archived, with_vectors)
    yield json.dumps(header.to_json(), ensure_ascii=False)
    for entry in entries:
        line: dict[str, Any] = {
            "entry": entry.model_dump(mode="json", by_alias=True, exclude=_EXCLUDED)
        }
        if with_vectors and (vector := _stored_vector(store, entry)) is not None:
            line["vector"] = vector
        yield json.dumps(line, ensure_ascii=False)


def write_export(store: MemoryStore, out: IO[str], **options: bool) -> int:
    count = -1
    for count, line in enumerate(export_lines(store, **options)):  # noqa: B007
        out.write(line + "\n")
    return count


@dataclass
class ImportFile:
    header: dict[str, Any]
    entries: list[MemoryEntry] = field(default_factory=list)
    vectors: dict[str, dict[str, Any]] = field(default_factory=dict)


def _line_json(line: str, number: int) -> Any:
    if len(line.encode("utf-8", "surrogatepass")) > MAX_LINE_BYTES:
        raise InvalidInput(f"line {number} is over {MAX_LINE_BYTES} bytes")
    try:
        # The bounded parser: a file is untrusted text, and `json.loads` recurses on its
        # nesting (RecursionError, not ValueError, on a line nested 100,000 deep).
        return safe_json.loads(line, max_bytes=MAX_LINE_BYTES)
    except ValueError as exc:
        raise InvalidInput(f"line {number} is not JSON: {exc}") from None


def read_export(
    lines: Iterable[str], *, progress: Callable[[int], None] | None = None
) -> ImportFile:
    """Parse and validate a whole file (nothing is written here)."""
    it = iter(lines)
    first = next(it, None)
    if first is None or not first.strip():
        raise InvalidInput("the file is empty: expected a dreamkeeper export header")
    header = _line_json(first, 1)
    if not isinstance(header, dict) or header.get("format") != FORMAT:
        raise InvalidInput(f"not a Dreamkeeper export: the first line has no format {FORMAT!r}")
    version = header.get("version")
    if version != FORMAT_VERSION:
        raise InvalidInput(
            f"export format version {version!r} is not supported: this Dreamkeeper reads "
            f"version {FORMAT_VERSION} (export it again with this version, or upgrade)"
        )
    parsed = ImportFile(header)
    now = utc_now()
    for number, line in enumerate(it, start=2):
        if not line.strip():
            continue
        data = _line_json(line, number)
        if not isinstance(data, dict) or not isinstance(data.get("entry"), dict):
            raise InvalidInput(f'line {number}: expected {{"entry": {{...}}}}')
        try:
            entry = MemoryEntry.model_validate(_with_id(data["entry"], now))
        except ValidationError as exc:
            reason = exc.errors()[0]
            where = ".".join(str(p) for p in reason.get("loc", ()))
            raise InvalidInput(f"line {number}: {where}: {reason.get('msg')}") from None
        try:
            validate_id_fields(entry)  # the store checks again; here for --dry-run's sake
        except InvalidInput as exc:
            raise InvalidInput(f"line {number}: {exc}") from None
        parsed.entries.append(entry)
        vector = data.get("vector")
        if isinstance(vector, dict):
            parsed.vectors[entry.id] = vector
        if progress is not None:
            progress(len(parsed.entries))
    return parsed


def derived_id(content: str, created_at: str) -> str:
    """The id of an imported note that has none: the same note, dated the same, gets the
    same id on every import."""
    digest = hashlib.sha256(f"{created_at}\x00{content}".encode("utf-8", "surrogatepass"))
    return digest.hexdigest()[:12]


def _with_id(raw: dict[str, Any], now: datetime) -> dict[str, Any]:
    """An entry line as a whole entry: one without an id (a note from elsewhere) gets
    one derived from its content and `createdAt`, and is dated now if it has no date."""
    if raw.get("id") is not None:
        return raw
    content, created = raw.get("content"), raw.get("createdAt", raw.get("created_at"))
    if not isinstance(content, str) or not (created is None or isinstance(created, str)):
        return raw  # the model's validation names what is wrong
    dated = {**raw, "id": derived_id(content, created or "")}
    if created is None:
        dated["createdAt"] = now.isoformat()
    return dated


@dataclass
class ImportPlan:
    """What an import would do (`--dry-run`) or did."""

    create: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    conflicts: list[str] = field(default_factory=list)
    vectors_written: int = 0
    vectors_skipped: int = 0

    @classmethod
    def from_report(cls, report: BulkReport) -> ImportPlan:
        return cls(list(report.created), list(report.unchanged), list(report.conflicts))

    def summary(self, *, dry_run: bool) -> str:
        verb = "would create" if dry_run else "created"
        text = (
            f"{verb} {len(self.create)}, unchanged {len(self.unchanged)} (already here), "
            f"conflicts {len(self.conflicts)} (same id, other content: left alone)"
        )
        if self.vectors_written or self.vectors_skipped:
            text += (
                f"; vectors written {self.vectors_written}, skipped {self.vectors_skipped} "
                "(another model: the worker re-embeds)"
            )
        return text


def plan_import(store: MemoryStore, parsed: ImportFile) -> ImportPlan:
    """What `import_entries` would do, without writing (refusing what it would refuse:
    a date in the future)."""
    plan = ImportPlan()
    seen: set[str] = set()
    clock = store.now()
    for entry in parsed.entries:
        imported_entry(entry, clock=clock)
        if entry.id in seen:
            raise InvalidInput(f"memory {entry.id} is given twice in the file")
        seen.add(entry.id)
        existing = store.get(entry.id)
        if existing is None:
            plan.create.append(entry.id)
        elif existing.content == entry.content:
            plan.unchanged.append(entry.id)
        else:
            plan.conflicts.append(entry.id)
    return plan


def apply_import(store: MemoryStore, parsed: ImportFile) -> ImportPlan:
    plan = ImportPlan.from_report(store.import_entries(parsed.entries))
    key = store.embeddings.model_key.hex() if store.embeddings is not None else None
    for entry_id in plan.create:
        vector = parsed.vectors.get(entry_id)
        if vector is None:
            continue
        entry = store.get(entry_id)
        if key is None or vector.get("model") != key or entry is None:
            plan.vectors_skipped += 1
            continue
        values = np.asarray(vector.get("values", []), dtype=np.float32)
        if values.size and store.write_vector(entry_id, values, entry.fingerprint):
            plan.vectors_written += 1
        else:
            plan.vectors_skipped += 1
    return plan
