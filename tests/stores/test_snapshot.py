"""The index snapshot and the vector pack are caches: a store opened from them equals one
opened from the files, and a missing, corrupt or stale cache is refused, never trusted."""

from __future__ import annotations

import os
import struct
from datetime import timedelta

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dreamkeeper.stores import faults
from dreamkeeper.stores.contract.records import NewEntry
from dreamkeeper.stores.files import vector_pack
from dreamkeeper.stores.files.memory_store import FileMemoryStore
from dreamkeeper.stores.longterm import snapshot
from dreamkeeper.stores.longterm.entry_state import EntryState
from dreamkeeper.stores.search.query import search
from dreamkeeper.stores.vectors.embedding_client import EmbeddingClient, EmbeddingSettings

DIM = 8
QUERIES = ["kalo zen", "fact 17", "late arrival", "mine ruza kalo"]


def _embedder() -> EmbeddingClient:
    # Never called: tests pass query vectors themselves. The model names the vectors.
    return EmbeddingClient(EmbeddingSettings(base_url="http://127.0.0.1:9/v1", model="t"))


def _fill(store: FileMemoryStore, n: int = 120) -> list:
    categories = ["people/colleagues", "travel", None]
    made = store.create_many(
        NewEntry(f"fact {i} about kalo {i % 7} mine ruza {i % 3} zen", category=categories[i % 3])
        for i in range(n)
    )
    store.archive(made[3].id, "test")
    store.update_importance(made[4].id, 0.9)
    return made


def _state(store: FileMemoryStore) -> tuple:
    entries = sorted(e.model_dump_json() for e in store.entries(include_archived=True))
    ranked = [
        [(h.entry.id, round(h.score, 9)) for h in search(store, q, include_archived=arch)]
        for q in QUERIES
        for arch in (False, True)
    ]
    return entries, ranked, store.categories(), store.tags()


def _open(tmp_path, **kw) -> FileMemoryStore:
    store = FileMemoryStore(tmp_path, "a", **kw)
    store.index()  # stores open lazily
    return store


def _from_files(tmp_path, **kw) -> FileMemoryStore:
    return FileMemoryStore(tmp_path, "a", snapshots=False, **kw)


@pytest.fixture
def snapped(tmp_path):
    store = FileMemoryStore(tmp_path, "a")
    made = _fill(store)
    assert store.save_snapshot()
    return store, made


def test_a_store_opened_from_its_snapshot_equals_one_opened_from_the_files(tmp_path, snapped):
    opened = _open(tmp_path)
    search(opened, "fact 17")
    assert opened.opened_from_snapshot
    assert opened.state.entries.parsed < len(opened.state.entries)  # entries stay JSON until read
    assert _state(opened) == _state(_from_files(tmp_path))


def test_writes_after_the_snapshot_are_replayed_from_the_journal_tail(tmp_path, snapped):
    store, made = snapped
    late = store.create("a late arrival about kalo", category="travel")
    store.archive(made[10].id, "gone")
    store.update(made[11].id, content="fact eleven rewritten: late arrival zen")
    opened = _open(tmp_path)
    assert opened.opened_from_snapshot
    assert opened.get(late.id) == late
    assert opened.require(made[10].id).is_archived
    assert _state(opened) == _state(_from_files(tmp_path))


def test_a_store_opened_from_a_snapshot_writes_correctly(tmp_path, snapped):
    _, made = snapped
    opened = _open(tmp_path)
    opened.update(made[20].id, content="fact twenty, changed through the snapshot store")
    opened.create("another late arrival", category="people/colleagues")
    files = _from_files(tmp_path)
    assert files.require(made[20].id).revision == 2
    assert _state(opened) == _state(files)


@pytest.mark.parametrize("damage", ["delete", "truncate", "flip", "garbage", "empty"])
def test_a_missing_or_corrupt_snapshot_is_refused_and_the_files_are_read(tmp_path, snapped, damage):
    path = tmp_path / "agents" / "a" / snapshot.SNAPSHOT[0]
    data = bytearray(path.read_bytes())
    if damage == "delete":
        path.unlink()
    elif damage == "truncate":
        path.write_bytes(data[: len(data) // 2])
    elif damage == "flip":  # in the index's postings (the entries' JSON: below)
        data[_section_at(data, "post_slots") + 5] ^= 0xFF
        path.write_bytes(bytes(data))
    elif damage == "garbage":
        path.write_bytes(b"not a snapshot at all" * 10)
    else:
        path.write_bytes(b"")
    opened = _open(tmp_path)
    assert not opened.opened_from_snapshot
    assert _state(opened) == _state(_from_files(tmp_path))


def _section_at(data: bytes | bytearray, name: str) -> int:
    """Where a section of a snapshot starts in the file."""
    header, base = snapshot._header(bytes(data))
    return base + header["sections"][name][0]


def _entries_read(store: FileMemoryStore) -> list[str]:
    return sorted(e.model_dump_json() for e in store.entries(include_archived=True))


def test_a_changed_byte_in_an_entrys_json_falls_back_to_its_file(tmp_path, snapped):
    path = tmp_path / "agents" / "a" / snapshot.SNAPSHOT[0]
    data = bytearray(path.read_bytes())
    data[_section_at(data, "entry_json") + 40] ^= 0x01  # the index part still checks out
    path.write_bytes(bytes(data))
    opened = _open(tmp_path)
    assert opened.opened_from_snapshot  # the entry is checked when read, not at open
    assert _state(opened) == _state(_from_files(tmp_path))


def test_an_open_store_reads_its_entries_from_the_snapshot_file_not_memory(tmp_path, snapped):
    opened = _open(tmp_path)
    assert opened.state.entries.parsed == 0
    assert opened.state.entries._rows is not None and opened.state.entries._rows.blob is None
    assert _entries_read(opened) == _entries_read(_from_files(tmp_path))


def test_after_writing_a_snapshot_a_store_reads_its_entries_from_the_new_file(tmp_path, snapped):
    store, made = snapped
    opened = _open(tmp_path)
    opened.get(made[1].id)
    store.create("a later entry, so the next snapshot's rows move", category="travel")
    assert opened.save_snapshot()  # replaces the file its rows pointed into
    rows = opened.state.entries._rows
    assert rows is not None and opened.state.entries.parsed == 0  # parsed entries let go too

    def no_fallback(entry_id: str, category: str | None) -> None:
        raise AssertionError(f"{entry_id} read from its file, not the snapshot")

    rows.fallback = no_fallback
    assert _state(opened) == _state(_from_files(tmp_path))


def test_erase_on_a_store_opened_from_its_snapshot_reads_no_entry_file(tmp_path, snapped):
    _, made = snapped
    opened = _open(tmp_path)
    rows = opened.state.entries._rows
    assert rows is not None

    def no_fallback(entry_id: str, category: str | None) -> None:
        raise AssertionError(f"{entry_id} read from its file, not the snapshot")

    rows.fallback = no_fallback
    assert opened.erase([made[9].id]) == [made[9].id]
    # The snapshot that held the entry is gone; one written after the erase (a store
    # of at least snapshot.MIN_ENTRIES writes one) holds neither its text nor its id.
    snap = tmp_path / "agents" / "a" / snapshot.SNAPSHOT[0]
    left = snap.read_bytes() if snap.exists() else b""
    assert made[9].content.encode() not in left and made[9].id.encode() not in left
    assert made[9].id not in {e.id for e in opened.entries(include_archived=True)}
    assert _state(opened) == _state(_from_files(tmp_path))


def test_the_store_cache_counts_entries_still_in_the_snapshot_as_smaller(tmp_path, snapped):
    opened, files = _open(tmp_path), _from_files(tmp_path)
    files.index()
    assert opened.approx_bytes() < files.approx_bytes()
    opened.entries(include_archived=True)  # every entry read and parsed now
    assert opened.state.entries.parsed == len(opened.state.entries)
    assert opened.approx_bytes() == files.approx_bytes()


@pytest.mark.parametrize("change", ["rewritten", "truncated", "same size and time", "deleted"])
def test_a_snapshot_changed_under_an_open_store_never_gives_a_wrong_entry(
    tmp_path, snapped, change
):
    store, made = snapped
    opened = _open(tmp_path)  # entries not read yet: they are still rows of the file
    path = tmp_path / "agents" / "a" / snapshot.SNAPSHOT[0]
    data = path.read_bytes()
    if change == "rewritten":  # another process's snapshot, after more writes: other offsets
        store.create("an entry that moves every row after it", category="travel")
        assert store.save_snapshot()
        opened.get(made[0].id)  # catches up with the journal: the new entry is read
    elif change == "truncated":
        with open(path, "r+b") as f:
            f.truncate(len(data) // 2)
    elif change == "same size and time":  # edited in place, the stat unchanged: CRC's turn
        st = path.stat()
        at = _section_at(data, "entry_json")
        with open(path, "r+b") as f:
            f.seek(at)
            f.write(bytes(b ^ 0x20 for b in data[at:]))
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    else:
        path.unlink()
    assert _state(opened) == _state(_from_files(tmp_path))


def test_an_entry_gone_from_both_snapshot_and_file_vanishes_without_a_crash(tmp_path, snapped):
    _, made = snapped
    opened = _open(tmp_path)
    (tmp_path / "agents" / "a" / snapshot.SNAPSHOT[0]).unlink()
    gone = made[7]
    opened.path_for(gone.id, gone.category).unlink()  # by hand, outside the journal
    assert opened.cached(gone.id) is None
    assert gone.id not in {e.id for e in opened.entries(include_archived=True)}
    assert len(opened.entries(include_archived=True)) == len(made) - 1


def test_a_snapshot_of_an_older_format_is_refused_and_rewritten(tmp_path, monkeypatch):
    monkeypatch.setattr(snapshot, "MIN_ENTRIES", 50)
    _fill(FileMemoryStore(tmp_path, "a", snapshots=False), 60)
    path = tmp_path / "agents" / "a" / snapshot.SNAPSHOT[0]
    with monkeypatch.context() as older:
        older.setattr(snapshot, "VERSION", snapshot.VERSION - 1)
        assert FileMemoryStore(tmp_path, "a").save_snapshot()
    assert b'"version":%d' % (snapshot.VERSION - 1) in path.read_bytes()[:200]
    refused = _open(tmp_path)
    assert not refused.opened_from_snapshot  # and the full open wrote the current format
    assert b'"version":%d' % snapshot.VERSION in path.read_bytes()[:200]
    opened = _open(tmp_path)
    assert opened.opened_from_snapshot
    assert _state(opened) == _state(_from_files(tmp_path))


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(position=st.floats(0, 1, exclude_max=True), value=st.integers(1, 255))
def test_any_changed_byte_in_the_snapshot_is_refused_or_harmless(tmp_path, position, value):
    store = FileMemoryStore(tmp_path, "a")
    if not store.entries():
        _fill(store, 40)
    assert store.save_snapshot()
    path = tmp_path / "agents" / "a" / snapshot.SNAPSHOT[0]
    data = bytearray(path.read_bytes())
    data[int(position * len(data))] ^= value
    path.write_bytes(bytes(data))
    assert _state(FileMemoryStore(tmp_path, "a")) == _state(_from_files(tmp_path))


def test_every_changed_digit_of_the_header_is_refused(tmp_path):
    # The header's values (section offsets, counts, scalars, category ids) are under the
    # checksum: "df_all" read 100 bytes further on was a valid-looking, wrong index.
    store = FileMemoryStore(tmp_path, "a")
    _fill(store, 40)
    assert store.save_snapshot()
    path = tmp_path / "agents" / "a" / snapshot.SNAPSHOT[0]
    clean = path.read_bytes()
    start = len(snapshot.MAGIC) + 8
    (length,) = struct.unpack_from("<Q", clean, len(snapshot.MAGIC))
    digits = [i for i in range(start, start + length) if clean[i : i + 1].isdigit()]
    assert len(digits) > 100
    expected = _state(_from_files(tmp_path))
    for i in digits:
        data = bytearray(clean)
        data[i] ^= 1  # "4" <-> "5", "8" <-> "9", ...
        path.write_bytes(bytes(data))
        opened = _open(tmp_path)
        assert not opened.opened_from_snapshot, (i, clean[i - 20 : i + 20])
    path.write_bytes(clean)
    assert _state(_open(tmp_path)) == expected


def test_a_snapshot_of_a_replaced_journal_is_refused(tmp_path, snapped):
    store, made = snapped
    journal = store.journal.path
    # Another journal of the same length or longer, with other bytes: another history.
    journal.write_bytes(journal.read_bytes().replace(made[0].id.encode(), b"f" * 12))
    opened = _open(tmp_path)
    assert not opened.opened_from_snapshot
    assert _state(opened) == _state(_from_files(tmp_path))


def test_a_snapshot_past_a_truncated_journal_is_refused(tmp_path, snapped):
    store, _ = snapped
    store.journal.path.write_bytes(b"")
    opened = _open(tmp_path)
    assert not opened.opened_from_snapshot
    assert _state(opened) == _state(_from_files(tmp_path))


def test_no_snapshot_is_written_while_another_write_is_in_flight(tmp_path, snapped):
    store, _ = snapped
    writer = FileMemoryStore(tmp_path, "a")
    reader = FileMemoryStore(tmp_path, "a", snapshots=False)
    reader.index()
    with pytest.raises(faults.SimulatedCrash), faults.armed(faults.JOURNAL_APPENDED):
        writer.create("a write that never lands")
    with writer.storage._lock.hold():  # the crashed writer's lock is held again: a write in flight
        assert not reader.save_snapshot()
        assert reader.storage._pending  # it saw the record whose file has not landed


def test_a_full_open_of_a_large_store_writes_the_snapshot(tmp_path, monkeypatch):
    monkeypatch.setattr(snapshot, "MIN_ENTRIES", 50)
    _fill(FileMemoryStore(tmp_path, "a", snapshots=False), 60)
    FileMemoryStore(tmp_path, "a").index()
    assert FileMemoryStore(tmp_path, "a").index() is not None
    opened = _open(tmp_path)
    opened.index()
    assert opened.opened_from_snapshot


def test_reload_ignores_the_snapshot(tmp_path, snapped):
    opened = _open(tmp_path)
    assert opened.opened_from_snapshot
    opened.reload()
    assert not opened.opened_from_snapshot


# -- the vector pack -------------------------------------------------------------------


@pytest.fixture
def packed(tmp_path):
    store = FileMemoryStore(tmp_path, "a", embeddings=_embedder())
    made = _fill(store)
    rng = np.random.default_rng(0)
    for entry in made:
        store.write_vector(entry.id, rng.standard_normal(DIM), entry.fingerprint)
    store.vectors(DIM)
    assert store.save_snapshot()
    return store, made


def _pack(store: FileMemoryStore, dim: int):
    return vector_pack.load(
        store.files,
        store.agent_id,
        store.journal,
        store.embeddings.model_key,
        dim,
        store.feed_offset,
        store.journal.epoch(),
    )


def _hybrid(store: FileMemoryStore) -> list:
    """Hits per query: ids in order, and scores to float32 precision (the row order of
    the matrix changes the last bits of a dot product)."""
    rng = np.random.default_rng(7)
    out = []
    for q in QUERIES:
        hits = search(store, q, query_vector=rng.standard_normal(DIM))
        out.append([(h.entry.id, pytest.approx(h.score, rel=1e-5)) for h in hits])
    return out


def test_hybrid_search_from_the_vector_pack_equals_reading_every_vector_file(tmp_path, packed):
    opened = _open(tmp_path, embeddings=_embedder())
    assert _pack(opened, DIM) is not None
    assert _hybrid(opened) == _hybrid(_from_files(tmp_path, embeddings=_embedder()))


def test_vectors_written_after_the_pack_are_read_from_their_files(tmp_path, packed):
    store, made = packed
    rng = np.random.default_rng(1)
    late = store.create("a late arrival with its own vector")
    store.write_vector(late.id, rng.standard_normal(DIM), late.fingerprint)
    store.write_vector(made[5].id, rng.standard_normal(DIM), made[5].fingerprint)  # replaced
    opened = FileMemoryStore(tmp_path, "a", embeddings=_embedder())
    vectors = opened.vectors(DIM)
    files = _from_files(tmp_path, embeddings=_embedder()).vectors(DIM)
    assert late.id in vectors
    assert np.allclose(vectors.get(made[5].id), files.get(made[5].id))
    assert _hybrid(opened) == _hybrid(_from_files(tmp_path, embeddings=_embedder()))


@pytest.mark.parametrize("damage", ["flip", "truncate"])
def test_a_corrupt_vector_pack_is_refused(tmp_path, packed, damage):
    store, _ = packed
    path = store.files.path(*vector_pack.pack_parts(store.embeddings.model_key))
    data = bytearray(path.read_bytes())
    if damage == "flip":
        data[-5] ^= 0x40
    else:
        del data[-64:]
    path.write_bytes(bytes(data))
    opened = _open(tmp_path, embeddings=_embedder())
    assert _pack(opened, DIM) is None
    assert _hybrid(opened) == _hybrid(_from_files(tmp_path, embeddings=_embedder()))


def test_a_vector_pack_of_another_dimension_is_not_used(tmp_path, packed):
    opened = _open(tmp_path, embeddings=_embedder())
    assert _pack(opened, DIM + 1) is None


def test_the_dream_cycles_decay_step_refreshes_a_large_stores_snapshot(tmp_path, monkeypatch):
    from datetime import UTC, datetime

    from temporalio.testing import ActivityEnvironment

    from dreamkeeper.activities.maintenance import MaintenanceActivities
    from dreamkeeper.activities.stores import StoreRegistry
    from dreamkeeper.core.payloads import DecayInput
    from dreamkeeper.core.settings import DecayParams, HighValueFloor

    monkeypatch.setattr(snapshot, "MIN_ENTRIES", 50)
    _fill(FileMemoryStore(tmp_path, "a", snapshots=False), 60)
    late = FileMemoryStore(tmp_path, "a", snapshots=False).create("written before the dream")
    activities = MaintenanceActivities(
        StoreRegistry(tmp_path),
        retention=timedelta(days=90),
        decay=DecayParams(),
        floor=HighValueFloor(),
    )
    path = tmp_path / "agents" / "a" / snapshot.SNAPSHOT[0]
    path.unlink(missing_ok=True)
    as_of = datetime(2030, 1, 1, tzinfo=UTC)
    ActivityEnvironment().run(activities.decay_importance, DecayInput(agent_id="a", as_of=as_of))
    assert path.exists()
    opened = _open(tmp_path)
    assert opened.opened_from_snapshot and opened.get(late.id) is not None
    assert opened.feed_offset == opened.journal.size()  # nothing left to replay


def test_rows_held_in_memory_are_compressed_and_each_read_checked(tmp_path):
    # The in-memory form of a snapshot from a database row: every row reads back as its
    # bytes, and a damaged block is never handed out as an entry (its entry falls back).
    store = FileMemoryStore(tmp_path, "packer")
    made = _fill(store, 40)
    held = {e.id: e for e in store.entries(include_archived=True)}
    state = EntryState(
        entries=dict(held),
        problems={},
        ops=None,
        index=store.state.index,
        category_ids=store.state.category_ids,
        offset=0,
    )
    data, rows = snapshot.encode_rows("packer", state, {})
    whole = data[rows.start :]
    rows.pack(whole)
    assert rows.blob is None and rows.packed is not None and len(rows.packed) < len(whole) / 2
    slots = {e.id: store.state.index.slot(e.id) for e in made}
    for entry_id, slot in slots.items():
        start, end = int(rows.offsets[slot]), int(rows.offsets[slot + 1])
        assert rows.raw(slot) == whole[start:end]
        assert rows.entry(slot, entry_id) == held[entry_id]
    damaged = bytearray(rows.packed)
    damaged[len(damaged) // 2] ^= 0xFF
    rows.packed = bytes(damaged)
    rows.fallback = lambda entry_id, category: None
    assert any(rows.entry(slot, entry_id) is None for entry_id, slot in slots.items())
    assert all(
        rows.entry(slot, entry_id) in (None, held[entry_id]) for entry_id, slot in slots.items()
    )
