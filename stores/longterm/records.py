"""The long-term store's pure helpers, backend-neutral: what BM25 indexes of an entry,
what it was retired into, the ids it links to, and how an entry becomes a new or
imported one (the records the contract speaks in are `stores.contract.records`)."""

from __future__ import annotations

import json
import re
from datetime import datetime

from dreamkeeper.core.errors import InvalidInput
from dreamkeeper.core.models import MemoryEntry, utc_now
from dreamkeeper.core.validation import (
    CREATED_AT_MAX_AHEAD,
    VALID_FROM_MAX_AHEAD,
    check_moment,
    new_entry_id,
    parse_moment,
    validate_category,
    validate_content,
    validate_entry_id,
    validate_importance,
    validate_metadata,
    validate_tags,
)
from dreamkeeper.policies.injection import flag_if_instruction
from dreamkeeper.policies.merge import MERGED_FROM
from dreamkeeper.stores import safe_json
from dreamkeeper.stores.contract.records import NewEntry

MAX_ID_LIST_BYTES = 65_536


def document_text(entry: MemoryEntry) -> str:
    """What BM25 indexes: content, tags, and the category with / and - as spaces."""
    category = (entry.category or "").replace("/", " ").replace("-", " ")
    return " ".join([entry.content, " ".join(entry.tags), category])


_LEGACY_INTO = re.compile(r"^(?:merged into ([0-9a-f]{12})|enriched into \[([0-9a-f, ]+)\])$")


def retired_into(entry: MemoryEntry) -> list[str]:
    """The entries this one was archived into (legacy files: read from the reason)."""
    if entry.retired_into:
        return list(entry.retired_into)
    match = _LEGACY_INTO.match(entry.archive_reason or "")
    if match is None:
        return []
    return [match[1]] if match[1] else [i.strip() for i in match[2].split(",") if i.strip()]


# Fields naming other entries, besides `retiredInto`: whatever a file says there is later
# used to look entries up (undo, forget, history), so it must be an id, never a path.
_ID_FIELDS = ("superseded_by", "supersedes", "replaces")
# A likely conflict's links (`stores.longterm.conflicts`), JSON lists of ids.
CONFLICTS_WITH = "conflictsWith"  # on the newer entry: the older ones it probably changes
NEWER_VERSIONS = "newerVersions"  # on the older entry: the newer ones that probably change it
CONFLICT_LINKS = (CONFLICTS_WITH, NEWER_VERSIONS)
# A possible change: a save named the older entry in `replaces`, and the subject check
# could not tell whether it is the same fact. Dated in recall; newer first only for a
# question about the pair's own subject (`policies.supersede.newer_answers`).
MAY_REPLACE = "mayReplace"  # on the newer entry: what its save said it replaces
MAY_BE_REPLACED_BY = "mayBeReplacedBy"  # on the older entry: the newer ones that said so
POSSIBLE_CHANGE_LINKS = (MAY_REPLACE, MAY_BE_REPLACED_BY)
# Lists of ids in metadata: a merge's sources, a likely or possible change's other entries.
_ID_LIST_METADATA = (MERGED_FROM, *CONFLICT_LINKS, *POSSIBLE_CHANGE_LINKS)


def linked(entry: MemoryEntry, key: str) -> list[str]:
    """The ids under one of a likely conflict's links (an unreadable value reads as none)."""
    raw = entry.metadata.get(key)
    if not raw:
        return []
    try:
        ids = safe_json.loads(raw, max_bytes=MAX_ID_LIST_BYTES)
    except ValueError:
        return []
    return [i for i in ids if isinstance(i, str)] if isinstance(ids, list) else []


MAX_LINKS = 8  # per entry and key: a fact changes a few times between two dreams


def with_link(entry: MemoryEntry, key: str, other: str) -> MemoryEntry:
    """`entry` with `other` added to the id list under `key` (the latest MAX_LINKS)."""
    ids = linked(entry, key)
    if other in ids:
        return entry
    ids = [*ids, other][-MAX_LINKS:]
    return entry.model_copy(update={"metadata": {**entry.metadata, key: json.dumps(ids)}})


def _ids_of(value: object, where: str) -> None:
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, list | tuple):
        raise InvalidInput(f"{where}: expected a memory id or a list of them")
    for item in items:
        try:
            validate_entry_id(item)
        except InvalidInput as exc:
            raise InvalidInput(f"{where}: {exc}") from None


def validate_id_fields(entry: MemoryEntry) -> None:
    """Every id an entry carries is a memory id (12 lowercase hex): its own, those it was
    retired into, merged from or superseded by. InvalidInput naming the field otherwise."""
    validate_entry_id(entry.id)
    _ids_of(list(entry.retired_into), "retiredInto")
    for name in _ID_FIELDS:
        value = getattr(entry, name, None)
        if value is not None and value != []:
            _ids_of(value, name)
    for key in _ID_LIST_METADATA:
        if key in entry.metadata:
            try:
                listed = safe_json.loads(entry.metadata[key], max_bytes=MAX_ID_LIST_BYTES)
            except ValueError:
                raise InvalidInput(f"metadata {key}: not a JSON list of memory ids") from None
            _ids_of(listed, f"metadata {key}")


def screened(
    content: str, metadata: dict[str, str], importance: float
) -> tuple[dict[str, str], float]:
    """(metadata, importance) as a store keeps them: text that reads as an instruction
    to the memory system is flagged and capped below the high-value floor
    (policies.injection), whichever path wrote it — the worker's save, `save --direct`,
    import, a bulk create, a whole-entry put. Screening in the store, not in one caller,
    is what keeps a dream's LLM from ever seeing such text unflagged."""
    return flag_if_instruction(content, metadata, importance)


def screened_entry(entry: MemoryEntry) -> MemoryEntry:
    metadata, importance = screened(entry.content, dict(entry.metadata), entry.importance_score)
    if metadata == entry.metadata and importance == entry.importance_score:
        return entry
    return entry.model_copy(update={"metadata": metadata, "importance_score": importance})


def checked_entry(entry: MemoryEntry) -> MemoryEntry:
    """A whole entry about to be written, by the store's rules: valid, and screened."""
    validate_entry_id(entry.id)
    validate_content(entry.content)
    validate_category(entry.category)
    validate_tags(entry.tags)
    validate_metadata(entry.metadata)
    validate_importance(entry.importance_score)
    return screened_entry(entry)


def checked_valid_from(value: datetime | str | None, now: datetime) -> datetime | None:
    """When a fact became true, as a store accepts it: well-formed, and no more than
    `VALID_FROM_MAX_AHEAD` past `now`."""
    moment = parse_moment(value, "valid_from")
    return check_moment(moment, "valid_from", now=now, ahead=VALID_FROM_MAX_AHEAD)


def checked_created_at(value: datetime | str | None, now: datetime) -> datetime | None:
    """When a memory was first seen, given by the caller (an import, a dated note):
    well-formed, and not in the future (beyond a clock's skew)."""
    moment = parse_moment(value, "created_at")
    return check_moment(moment, "created_at", now=now, ahead=CREATED_AT_MAX_AHEAD)


def imported_entry(entry: MemoryEntry, *, clock: datetime | None = None) -> MemoryEntry:
    """An entry from elsewhere, checked by the store's rules (its times too: none in
    the future of `clock`); its store bookkeeping (revision, applied ops) is this
    store's own, so it starts afresh."""
    validate_id_fields(entry)
    entry = checked_entry(entry)
    clock = clock or utc_now()
    try:
        checked_created_at(entry.created_at, clock)
        checked_created_at(entry.last_seen_at, clock)
        checked_valid_from(entry.valid_from, clock)
    except InvalidInput as exc:
        raise InvalidInput(f"memory {entry.id}: {exc}") from None
    return entry.model_copy(update={"revision": 0, "applied_ops": {}})


def new_entry(item: NewEntry, at: datetime, *, clock: datetime | None = None) -> MemoryEntry:
    """The entry `item` describes, created at `at` unless it has its own `created_at`;
    its dates checked against `clock`, the store's time."""
    content = validate_content(item.content)
    metadata, importance = screened(
        content, validate_metadata(item.metadata), validate_importance(item.importance)
    )
    clock = clock or at
    created = checked_created_at(item.created_at, clock) or at
    return MemoryEntry(
        id=validate_entry_id(item.entry_id) if item.entry_id is not None else new_entry_id(),
        content=content,
        category=validate_category(item.category),
        tags=validate_tags(item.tags),
        metadata=metadata,
        importance_score=importance,
        created_at=created,
        last_seen_at=created,
        valid_from=checked_valid_from(item.valid_from, clock),
    )


def entry_version(entry: MemoryEntry) -> tuple[int, datetime, datetime]:
    return (entry.revision, entry.updated_at or entry.created_at, entry.last_seen_at)
