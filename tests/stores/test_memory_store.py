from __future__ import annotations

import json
import logging
import subprocess
import sys
import textwrap
from datetime import timedelta

import pytest

from dreamkeeper.core.errors import Conflict
from dreamkeeper.core.settings import DEFAULT_FLOOR
from dreamkeeper.stores.contract.feed import JournalAction
from dreamkeeper.stores.files.memory_store import FileMemoryStore
from dreamkeeper.stores.search.query import search


def test_create_writes_one_camel_case_file_per_entry(store, tmp_path):
    entry = store.create(
        "User is in Chicago", category="user-preferences/timezone", tags=["tz"], importance=0.9
    )
    path = tmp_path / "agents/agent-1/memory/user-preferences/timezone" / f"{entry.id}.json"
    raw = json.loads(path.read_text())
    assert raw["content"] == "User is in Chicago" and raw["importanceScore"] == 0.9
    assert FileMemoryStore(tmp_path, "agent-1").get(entry.id) == entry


def test_uncategorized_entries_live_at_the_memory_root(store, tmp_path):
    entry = store.create("plain fact")
    assert (tmp_path / "agents/agent-1/memory" / f"{entry.id}.json").is_file()


def test_create_with_explicit_id_is_idempotent(any_store, long_term):
    store = any_store
    first = store.create("a fact", entry_id="00000000000a")
    again = store.create("a fact", entry_id="00000000000a")
    assert again == first
    assert long_term.announced("agent-1") == {("00000000000a", 1)}  # one write recorded
    with pytest.raises(Conflict):
        store.create("different text", entry_id="00000000000a")


def test_archive_is_in_place_idempotent_and_keeps_the_first_reason(any_store, clock):
    store = any_store
    entry = store.create("fact to archive")
    archived = store.archive(entry.id, "deleted by agent tool")
    clock.advance(days=1)
    again = store.archive(entry.id, "merged into 0123456789ab")
    assert again == archived
    assert again.archive_reason == "deleted by agent tool"
    assert store.get(entry.id).is_archived  # fetchable by id
    assert search(store, "fact archive") == []
    assert store.categories() == {}


def test_restore_clears_both_archive_fields(any_store):
    store = any_store
    entry = store.create("fact to restore")
    store.archive(entry.id, "deleted by agent tool")
    restored = store.restore(entry.id)
    assert restored.archived_at is None and restored.archive_reason is None
    assert [h.entry.id for h in search(store, "restore")] == [entry.id]


def test_purge_respects_retention_and_the_high_value_floor(any_store, long_term, clock):
    store = any_store
    old_low = store.create("old low value", importance=0.3)
    old_high = store.create("old but important", importance=0.9)
    old_reinforced = store.update(store.create("old reinforced").id, reinforcement_count=5)
    recent = store.create("recently archived", importance=0.3)
    for e in (old_low, old_high, old_reinforced):
        store.archive(e.id, "deleted by agent tool")
    clock.advance(days=91)
    store.archive(recent.id, "deleted by agent tool")
    live = store.create("live entry")
    report = store.purge(timedelta(days=90), keep=DEFAULT_FLOOR.protects)
    assert report.purged == [old_low.id]
    assert set(report.kept_high_value) == {old_high.id, old_reinforced.id}
    assert report.kept_in_retention == 1
    assert store.get(old_low.id) is None
    for kept in (old_high, old_reinforced, recent, live):
        assert store.get(kept.id) is not None
    assert long_term.open().get(old_low.id) is None


def test_purge_with_zero_retention_keeps_everything(any_store, clock):
    store = any_store
    entry = store.create("archived long ago")
    store.archive(entry.id, "deleted by agent tool")
    clock.advance(days=1000)
    assert store.purge(timedelta(0)).purged == []
    assert store.get(entry.id) is not None


def test_purge_removes_the_embedding_file(store, clock):
    entry = store.create("with a vector")
    vector = store.embeddings_dir / f"{entry.id}.bin"
    vector.parent.mkdir(parents=True)
    vector.write_bytes(b"\0" * 16)
    store.archive(entry.id, "deleted by agent tool")
    clock.advance(days=100)
    store.purge(timedelta(days=90))
    assert not vector.exists()


def test_category_change_moves_the_file(store, tmp_path):
    entry = store.create("movable", category="a/b")
    store.update(entry.id, category="c")
    assert not store.path_for(entry.id, "a/b").exists()
    assert store.path_for(entry.id, "c").exists()
    assert FileMemoryStore(tmp_path, "agent-1").get(entry.id).category == "c"


def test_malformed_file_is_skipped_with_a_warning_and_never_overwritten(store, tmp_path, caplog):
    good = store.create("good entry", category="facts")
    bad = store.path_for("badbadbadbad", "facts")
    bad.write_text("{ not json")
    caplog.set_level(logging.WARNING)
    fresh = FileMemoryStore(tmp_path, "agent-1")
    assert [e.id for e in fresh.entries()] == [good.id]
    assert str(bad) in caplog.text
    assert bad in fresh.problems()
    with pytest.raises(Conflict, match="could not be read"):
        fresh.create("new text", category="facts", entry_id="badbadbadbad")
    assert bad.read_text() == "{ not json"


def test_file_whose_name_does_not_match_its_id_is_skipped(store, tmp_path):
    entry = store.create("original")
    wrong = store.memory_dir / "aaaaaaaaaaaa.json"
    wrong.write_text(store.path_for(entry.id, None).read_text())
    fresh = FileMemoryStore(tmp_path, "agent-1")
    assert [e.id for e in fresh.entries()] == [entry.id]
    assert wrong in fresh.problems()


def test_journal_records_every_mutation_without_content(store, clock):
    entry = store.create("secret content SENTINEL", category="x")
    store.update_importance(entry.id, 0.7)
    store.archive(entry.id, "deleted by agent tool")
    store.restore(entry.id)
    store.archive(entry.id, "deleted by agent tool")
    clock.advance(days=200)
    store.purge(timedelta(days=90))
    actions = [r.action for r in store.journal.read_all()]
    assert actions == [
        JournalAction.CREATED,
        JournalAction.UPDATED,
        JournalAction.ARCHIVED,
        JournalAction.RESTORED,
        JournalAction.ARCHIVED,
        JournalAction.PURGED,
    ]
    assert all(
        r.id == entry.id and r.fingerprint == entry.fingerprint for r in store.journal.read_all()
    )
    assert "SENTINEL" not in store.journal.path.read_text()


CRASH_WRITER = textwrap.dedent(
    """
    import os, signal, sys
    from dreamkeeper.stores.files.memory_store import FileMemoryStore
    store = FileMemoryStore(sys.argv[1], "agent-1")
    real_fsync = os.fsync
    calls = []
    def crash(fd):
        real_fsync(fd)
        calls.append(fd)
        if len(calls) == 2:  # 1: the journal record (write-ahead); 2: the temp file
            os.kill(os.getpid(), signal.SIGKILL)  # die after the temp file, before the rename
    os.fsync = crash
    store.update(sys.argv[2], content="NEW TEXT that must not appear")
    """
)


def test_a_crash_mid_write_leaves_the_old_file_intact(store, tmp_path):
    entry = store.create("the old text")
    path = store.path_for(entry.id, None)
    before = path.read_bytes()
    proc = subprocess.run([sys.executable, "-c", CRASH_WRITER, str(tmp_path), entry.id])
    assert proc.returncode == -9
    assert path.read_bytes() == before
    leftovers = [p.name for p in path.parent.iterdir() if p.name.endswith(".tmp")]
    assert leftovers, "the crash should have left its temp file behind"
    fresh = FileMemoryStore(tmp_path, "agent-1")
    assert fresh.get(entry.id).content == "the old text"
    assert fresh.problems() == {}


def test_writes_never_leave_temp_files(store):
    for i in range(5):
        store.update(store.create(f"entry {i}").id, content=f"entry {i} edited")
    assert not [p for p in store.memory_dir.rglob("*") if p.name.endswith(".tmp")]
