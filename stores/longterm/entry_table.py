"""`EntryTable`: a store's entries by id, parsed on first access.

A store opened from an index snapshot (`stores.longterm.snapshot`) holds every entry as the
compact JSON the snapshot carried and turns it into a `MemoryEntry` only when something
reads it: a search touches the few entries it returns, not the 100,000 it indexes.
Parsing every entry up front was most of a cold open (and a third of its memory).

It behaves as the dict it replaces (insertion order kept; a parsed entry replaces its
JSON in place). The JSON came from this process's own `model_dump_json`, checked by the
snapshot's checksum; an entry that fails to parse anyway raises, never goes missing.
"""

from __future__ import annotations

from collections.abc import Iterator, MutableMapping

from dreamkeeper.core.models import MemoryEntry


class EntryTable(MutableMapping[str, MemoryEntry]):
    def __init__(self) -> None:
        self._items: dict[str, MemoryEntry | bytes] = {}

    def put_raw(self, entry_id: str, data: bytes) -> None:
        """Add an entry as compact JSON (parsed when first read)."""
        self._items[entry_id] = data

    def raw(self, entry_id: str) -> bytes:
        """The entry as compact JSON, without parsing it when it is still unparsed."""
        value = self._items[entry_id]
        if isinstance(value, bytes):
            return value
        return value.model_dump_json(by_alias=True).encode("utf-8")

    def __getitem__(self, entry_id: str) -> MemoryEntry:
        value = self._items[entry_id]
        if isinstance(value, bytes):
            value = MemoryEntry.model_validate_json(value)
            self._items[entry_id] = value
        return value

    def get(self, entry_id: str, default: MemoryEntry | None = None) -> MemoryEntry | None:  # type: ignore[override]
        if entry_id not in self._items:
            return default
        return self[entry_id]

    def __setitem__(self, entry_id: str, entry: MemoryEntry) -> None:
        self._items[entry_id] = entry

    def __delitem__(self, entry_id: str) -> None:
        del self._items[entry_id]

    def __contains__(self, entry_id: object) -> bool:
        return entry_id in self._items

    def __iter__(self) -> Iterator[str]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)

    def clear(self) -> None:
        self._items.clear()

    @property
    def parsed(self) -> int:
        """How many entries have been parsed (the rest are still JSON)."""
        return sum(1 for v in self._items.values() if not isinstance(v, bytes))
