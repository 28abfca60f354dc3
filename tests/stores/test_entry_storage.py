"""`StoreOperations` needs nothing of a backend but `EntryStorage`
(stores/longterm/storage.py): over a storage kept in a dict — no file, no database, no
wing imported — the shared operations keep their guarantees (compare-and-set, archive
into, restore's refusal, purge's retention, erase, the bulk path) and the shared
`EntryState` stays current for search. A new backend starts from this shape."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta

import pytest

from dreamkeeper.core.errors import Conflict
from dreamkeeper.core.models import MemoryEntry
from dreamkeeper.stores.contract import MemoryStore
from dreamkeeper.stores.contract.feed import JournalAction, JournalRecord
from dreamkeeper.stores.contract.records import NewEntry
from dreamkeeper.stores.longterm.entry_state import EntryState
from dreamkeeper.stores.longterm.operations import StoreOperations
from dreamkeeper.stores.longterm.storage import EntryWrite
from dreamkeeper.stores.search.query import search

T0 = datetime(2030, 1, 1, tzinfo=UTC)


class Rows:
    """What a database would hold for one agent: the entries and the change feed."""

    def __init__(self) -> None:
        self.entries: dict[str, MemoryEntry] = {}
        self.feed: list[JournalRecord] = []
        self.lock = threading.RLock()


class DictStorage:
    """An `EntryStorage` over `Rows`; two of them over the same rows are two processes."""

    def __init__(self, rows: Rows, agent_id: str = "agent") -> None:
        self.rows = rows
        self.agent_id = agent_id
        self.state = EntryState()
        self.embeddings = None
        self.documents = None  # the operations never read the agent's documents
        self.opened_from_snapshot = False
        self.loaded = False

    @contextmanager
    def writing(self) -> Iterator[None]:
        with self.rows.lock:
            self.catch_up()
            yield

    def catch_up(self) -> None:
        self.loaded = True
        for record in self.rows.feed[self.state.offset :]:
            stored = self.rows.entries.get(record.id)
            if stored is None:
                self.state.forget(record.id)
            else:
                self.state.install(stored)
        self.state.offset = len(self.rows.feed)

    def fresh(self, entry_id: str) -> MemoryEntry | None:
        return self.rows.entries.get(entry_id)

    def _record(self, entry: MemoryEntry, action: JournalAction, reason: str | None) -> None:
        self.rows.feed.append(
            JournalRecord(
                at=T0,
                action=action,
                id=entry.id,
                category=entry.category,
                fingerprint=entry.fingerprint,
                reason=reason,
                rev=entry.revision,
            )
        )
        self.state.offset = len(self.rows.feed)

    def write(self, change: EntryWrite) -> MemoryEntry:
        stored = self.rows.entries.get(change.entry.id)
        if (stored and stored.revision) != (change.base and change.base.revision):
            raise Conflict(f"memory {change.entry.id} changed since it was read")
        self.rows.entries[change.entry.id] = change.entry
        self._record(change.entry, change.action, change.reason)
        self.state.install(change.entry)
        return change.entry

    def insert_batch(self, entries: list[MemoryEntry], reason: str | None) -> None:
        for entry in entries:
            self.write(EntryWrite(entry, None, JournalAction.CREATED, reason, None))

    def delete(
        self, doomed: list[MemoryEntry], on_progress: Callable[[int, int], None] | None
    ) -> None:
        for entry in doomed:
            del self.rows.entries[entry.id]
            self._record(entry, JournalAction.PURGED, entry.archive_reason)
            self.state.forget(entry.id)

    def unreadable(self, entry_id: str, category: str | None) -> str | None:
        return None

    def vector_bytes(self, entry_id: str) -> bytes | None:
        return None

    def erase(self, doomed: list[MemoryEntry], reason: str) -> None:
        self.delete(doomed, None)
        self.state.reindex()

    def problems(self) -> dict:
        return {}

    def vector_index(self, dim: int):
        raise AssertionError("no embedding model: never asked")

    def unembedded(self) -> int:
        return 0

    def store_vector(self, entry: MemoryEntry, data: bytes) -> bool:
        raise AssertionError("no embedding model: never asked")

    def reload(self) -> None:
        self.state.clear()
        self.catch_up()

    def save_snapshot(self) -> bool:
        return False

    def changes(self) -> list[JournalRecord]:
        return list(self.rows.feed)


def _store(rows: Rows) -> StoreOperations:
    return StoreOperations(DictStorage(rows), clock=lambda: T0)


def test_the_operations_keep_their_guarantees_over_any_entry_storage():
    rows = Rows()
    store, other = _store(rows), _store(rows)
    assert isinstance(store, MemoryStore)
    ada = store.create("Ada lives in Oslo", category="people")
    both = store.create("Ada lives in Oslo and keeps bees in Tromsø", category="people")
    assert [h.entry.id for h in search(other, "bees Tromsø")] == [both.id]  # caught up

    moved = other.update(ada.id, content="Ada lives in Bergen")
    with pytest.raises(Conflict, match="changed since it was read"):
        store.put(ada.model_copy(update={"content": "Ada lives in Paris"}), action="updated")
    assert store.get(ada.id) == moved

    assert not store.retire_into(ada.id, [both.id], reason="merged").retired  # Bergen
    retired = store.retire_into(both.id, [ada.id], reason="merged")
    assert not retired.retired and retired.missing  # bees, Tromsø are not in Ada's
    store.archive(ada.id, "wrong", now=T0 - timedelta(days=200))
    assert other.get(ada.id).is_archived and other.restore(ada.id).archived_at is None


def test_purge_erase_and_the_bulk_path_over_any_entry_storage():
    rows = Rows()
    store = _store(rows)
    made = store.create_many([NewEntry(content=f"Fact {n} about Quorvath") for n in range(5)])
    assert len(made) == 5 and len(_store(rows).entries()) == 5
    store.archive(made[0].id, "old", now=T0 - timedelta(days=200))
    store.archive(made[1].id, "recent", now=T0 - timedelta(days=1))
    report = store.purge(timedelta(days=90), now=T0)
    assert report.purged == [made[0].id] and report.kept_in_retention == 1
    assert store.erase([made[2].id, "f" * 12]) == [made[2].id]
    assert made[2].id not in rows.entries
    assert {e.id for e in _store(rows).entries(include_archived=True)} == {
        e.id for e in made[1:] if e.id != made[2].id
    }
