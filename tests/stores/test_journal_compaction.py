"""Compacting the file journal (issue 35 A5; docs/storage.md, "Compacting the file
journal"): the writer replaces `journal.jsonl` by a new generation (the epoch line and a
`compacted` record) once it reaches COMPACT_BYTES, so the journal stays bounded; a reader
holding the old generation, at any offset, loads again and ends with exactly the store's
entries, including writes made after the compaction; a crash at each step of the
compaction loses nothing and the retry a worker would do converges; the epoch is kept,
migrate carries every entry, and a forget leaves no trace in any file. The thresholds are
made small so a test writes dozens, not thousands, of records; the rule is the same."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from dreamkeeper.stores import faults
from dreamkeeper.stores.contract.records import NewEntry
from dreamkeeper.stores.files import memory_store
from dreamkeeper.stores.files.memory_store import FileEntryStorage, FileMemoryStore
from dreamkeeper.stores.longterm import snapshot
from dreamkeeper.stores.search.query import search
from tests.stores.churn import churn, state

AGENT = "journal-agent"
COMPACT, MIN_ENTRIES = 4_096, 10  # about 20 records a generation


@pytest.fixture(autouse=True)
def small_journal(monkeypatch):
    monkeypatch.setattr(memory_store, "COMPACT_BYTES", COMPACT)
    monkeypatch.setattr(memory_store, "COMPACT_BYTES_PER_ENTRY", 0)
    monkeypatch.setattr(snapshot, "MIN_ENTRIES", MIN_ENTRIES)


def _lines(store: FileMemoryStore) -> list[dict]:
    return [json.loads(line) for line in store.journal.path.read_bytes().splitlines()]


def test_compaction_bounds_the_journal_and_keeps_the_epoch(tmp_path):
    store = FileMemoryStore(tmp_path, AGENT)
    store.create("The first fact about Quorvath")
    epoch = store.journal.epoch()
    assert epoch
    churn(store, 300, "a")
    # At most one generation's worth: the threshold plus the hold that crossed it.
    assert store.journal.size() < COMPACT + 1_000
    assert store.journal.generation() > 5
    lines = _lines(store)
    assert lines[0] == {**lines[0], "action": "epoch", "id": epoch}
    assert lines[1]["action"] == "compacted" and lines[1]["rev"] == store.journal.generation()
    assert store.journal.epoch() == epoch  # the same store: compaction is not an erasure
    assert not (store.root / ".journal.jsonl.next").exists()
    cold = FileMemoryStore(tmp_path, AGENT)
    assert state(cold) == state(store)
    assert cold.opened_from_snapshot  # the snapshot was written for the new generation


def test_a_reader_behind_the_compaction_point_reloads_exactly_the_store(tmp_path):
    writer = FileMemoryStore(tmp_path, AGENT)
    reader = FileMemoryStore(tmp_path, AGENT)
    first = churn(writer, 12, "old")
    assert len(reader.entries(include_archived=True)) == len(first)
    generation = writer.journal.generation()
    # Far past the reader: the records after its offset are compacted away, including
    # an erase of an entry it holds and rewrites and archives of others.
    writer.erase([first[0]])
    churn(writer, 200, "new")
    assert writer.journal.generation() > generation
    # And the new generation grown past the reader's offset: read there, its bytes would
    # look like a journal that merely went on (and it would miss everything compacted).
    offset, generation = reader.feed_offset, writer.journal.generation()
    later = writer.create("A fact written after the last compaction, Quorvath")
    while writer.journal.size() <= offset + 300:
        writer.update(later.id, content=f"{later.content} again {writer.journal.size()}")
    later = writer.get(later.id)
    assert writer.journal.generation() == generation

    assert state(reader) == state(FileMemoryStore(tmp_path, AGENT)) == state(writer)
    assert reader.get(first[0]) is None
    assert reader.get(later.id) == later
    assert reader.opened_from_snapshot  # loaded again from the new generation's snapshot
    hits = {h.entry.id for h in search(reader, "Quorvath", limit=500)}
    assert hits == {e.id for e in writer.entries()}
    # It goes on following the new generation as usual.
    again = writer.create("Another later fact about Quorvath")
    assert reader.get(again.id) == again
    assert reader.feed_offset == writer.journal.size()


def test_a_reader_of_an_empty_store_sees_entries_whose_records_were_compacted(tmp_path):
    reader = FileMemoryStore(tmp_path, AGENT)
    assert reader.entries() == []  # loaded with no journal at all
    writer = FileMemoryStore(tmp_path, AGENT)
    churn(writer, 100, "a")
    assert writer.journal.generation() > 0
    assert state(reader) == state(writer)


def test_a_reader_that_opened_from_the_old_snapshot_reloads(tmp_path):
    writer = FileMemoryStore(tmp_path, AGENT)
    writer.create_many(NewEntry(f"bulk fact {i} about Quorvath") for i in range(2 * MIN_ENTRIES))
    assert writer.save_snapshot()
    reader = FileMemoryStore(tmp_path, AGENT)
    assert reader.entries() and reader.opened_from_snapshot
    churn(writer, 100, "b")
    assert writer.journal.generation() > 0
    assert state(reader) == state(writer)


@pytest.mark.parametrize("point", [faults.JOURNAL_COMPACTING, faults.JOURNAL_COMPACTED])
def test_a_crash_at_each_step_of_compaction_loses_nothing(tmp_path, point, monkeypatch):
    writer = FileMemoryStore(tmp_path, AGENT)
    reader = FileMemoryStore(tmp_path, AGENT)
    churn(writer, 40, "a")
    assert reader.entries(include_archived=True)
    entry_id = "c0ffee000001"
    # The next write crosses the threshold; its hold dies in the compaction that follows.
    monkeypatch.setattr(memory_store, "COMPACT_BYTES", writer.journal.size() + 1)
    with faults.armed(point), pytest.raises(faults.SimulatedCrash):
        writer.create("The write that crossed the compaction mark, Quorvath", entry_id=entry_id)
    # The write was durable before the compaction began: a fresh process has it.
    survivor = FileMemoryStore(tmp_path, AGENT)
    crossing = survivor.get(entry_id)
    assert crossing is not None
    if point == faults.JOURNAL_COMPACTING:
        assert survivor.journal.generation() == writer.journal.generation()
        assert any(r.id == entry_id for r in survivor.changes())  # the journal is whole
    else:
        assert not survivor.opened_from_snapshot  # the old snapshot no longer matches
    # The worker's retry (a fresh process, the same entry id) finds it done.
    retried = survivor.create(
        "The write that crossed the compaction mark, Quorvath", entry_id=entry_id
    )
    assert retried.id == entry_id
    assert state(reader) == state(survivor) == state(FileMemoryStore(tmp_path, AGENT))
    assert list(state(survivor)).count(entry_id) == 1
    # The next crossing compacts, over whatever the crash left.
    generation = survivor.journal.generation()
    churn(survivor, 60, "b")
    assert survivor.journal.generation() > generation
    assert not (survivor.root / ".journal.jsonl.next").exists()
    assert state(reader) == state(survivor) == state(FileMemoryStore(tmp_path, AGENT))


def test_a_killed_compaction_then_a_fresh_process_converges(tmp_path):
    """The child dies (os._exit, as SIGKILL) right after renaming the new generation in;
    a fresh process retries and a long-lived reader converges."""
    reader = FileMemoryStore(tmp_path, AGENT)
    reader.entries()
    script = f"""
import sys
sys.path[:0] = {sys.path!r}
from dreamkeeper.stores.files import memory_store
memory_store.COMPACT_BYTES = {COMPACT}
memory_store.COMPACT_BYTES_PER_ENTRY = 0
from dreamkeeper.stores.files.memory_store import FileMemoryStore
store = FileMemoryStore({str(tmp_path)!r}, {AGENT!r})
for n in range(200):
    store.create(f"killed child fact {{n}} about Quorvath", entry_id=f"{{n:012x}}")
"""
    env = {**os.environ, faults.ENV_VAR: faults.JOURNAL_COMPACTED}
    done = subprocess.run([sys.executable, "-c", script], env=env, check=False)
    assert done.returncode == faults.KILLED_EXIT_CODE
    fresh = FileMemoryStore(tmp_path, AGENT)
    made = {e.id for e in fresh.entries()}
    assert made and made == {f"{n:012x}" for n in range(len(made))}  # every write it made
    assert fresh.journal.generation() == 1
    # The retry (the next save) goes on in the new generation.
    fresh.create("killed child fact retried about Quorvath", entry_id=f"{len(made):012x}")
    assert state(reader) == state(fresh)


def test_a_pending_write_is_never_compacted_away(tmp_path):
    writer = FileMemoryStore(tmp_path, AGENT)
    churn(writer, 10, "a")
    with faults.armed(faults.JOURNAL_APPENDED), pytest.raises(faults.SimulatedCrash):
        writer.create("A write whose file never landed, Quorvath", entry_id="dead00000001")
    # The dead write's record is pending in this instance: it must stay journaled.
    assert writer.storage._pending
    assert writer.compact_journal() is True  # its hold repairs first, then compacts
    assert not writer.storage._pending
    assert writer.get("dead00000001") is None
    assert state(FileMemoryStore(tmp_path, AGENT)) == state(writer)


def test_migrate_after_compaction_carries_every_entry(tmp_path):
    from dreamkeeper.stores.files.backend import FileBackend
    from dreamkeeper.stores.migrate import content_digest, migrate

    source = FileBackend(tmp_path / "source")
    churn(source.memory(AGENT), 200, "a")
    assert source.memory(AGENT).journal.generation() > 0
    target = FileBackend(tmp_path / "target")
    report = migrate(source, target)
    assert report.verified and report.mismatches == []
    theirs = source.memory(AGENT).entries(include_archived=True)
    ours = target.memory(AGENT).entries(include_archived=True)
    assert len(ours) == len(theirs) > 0
    assert content_digest(ours) == content_digest(theirs)


def test_a_forget_then_compaction_leaves_no_trace_in_any_file(tmp_path):
    from dreamkeeper.stores.files.forgetting import file_forgetting

    reader = FileMemoryStore(tmp_path, AGENT)
    writer = FileMemoryStore(tmp_path, AGENT)
    secret = writer.create("Zebulon Kravitz keeps the spare key under the third stone")
    churn(writer, 30, "a")
    assert reader.get(secret.id) == secret
    receipt = file_forgetting(tmp_path).forget_match(AGENT, "Zebulon Kravitz")
    assert receipt.verified
    churn(writer, 100, "b")  # the forget's own records compacted away too
    assert writer.journal.generation() > 0
    assert reader.get(secret.id) is None
    assert search(reader, "Zebulon Kravitz", limit=10) == []
    assert state(reader) == state(FileMemoryStore(tmp_path, AGENT))
    # No byte of it, nor its id or fingerprint (compacted away), in any file left.
    needles = [b"Zebulon", b"Kravitz", secret.fingerprint.encode(), secret.id.encode()]
    for path in Path(tmp_path, "agents", AGENT).rglob("*"):
        if path.is_file() and not path.is_symlink():
            data = path.read_bytes()
            assert not [n for n in needles if n in data], path


def test_a_compaction_that_fails_does_not_fail_the_write_it_follows(tmp_path, monkeypatch):
    writer = FileMemoryStore(tmp_path, AGENT)

    def broken(self):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(FileEntryStorage, "compact_journal", broken)
    made = churn(writer, 60, "a")
    assert writer.journal.size() > COMPACT  # never compacted, nothing lost
    assert writer.journal.generation() == 0
    assert set(made) <= set(state(FileMemoryStore(tmp_path, AGENT)))


def test_the_killstorm_audit_never_reports_a_compacted_record_as_lost(tmp_path):
    from tests.harness.audit import AckedSave, audit_store

    store = FileMemoryStore(tmp_path, AGENT)
    saved = [store.create(f"acked fact {n} about Quorvath {n * 7}") for n in range(6)]
    store.archive(saved[0].id, "set aside before the compaction")
    churn(store, 150, "a")
    assert store.journal.generation() > 0
    acked = [AckedSave(AGENT, e.id, e.content, e.category) for e in saved[1:]]
    audit = audit_store(tmp_path, AGENT, acked)
    assert audit.lost == [] and audit.covered == len(acked)
    assert audit.unjournaled_files == [] and audit.unrecorded_states == []
    assert audit.journaled_but_missing == []
    assert audit.compacted_files >= len(saved)
    # What the new generation does record is still checked against the files.
    store.update(saved[1].id, content="acked fact 1 rewritten about Quorvath 7")
    path = store.path_for(saved[1].id, None)
    raw = json.loads(path.read_bytes())
    path.write_text(json.dumps({**raw, "revision": raw["revision"] + 5}))
    assert audit_store(tmp_path, AGENT, []).unjournaled_files


def test_compacting_a_store_with_no_journal_writes_nothing(tmp_path):
    store = FileMemoryStore(tmp_path, AGENT)
    assert store.compact_journal() is False
    assert not store.journal.path.exists()
    store.create("The first fact about Quorvath")
    assert store.journal.epoch()  # the first write still starts the journal with one


def test_a_whole_agent_forget_after_compaction_gives_the_store_a_new_epoch(tmp_path):
    from dreamkeeper.stores.files.forgetting import file_forgetting

    stale = FileMemoryStore(tmp_path, AGENT)
    old = churn(stale, 100, "old")
    epoch = stale.journal.epoch()
    assert stale.journal.generation() > 0 and stale.journal.epoch() == epoch
    assert file_forgetting(tmp_path).forget_agent(AGENT).verified
    writer = FileMemoryStore(tmp_path, AGENT)
    new = churn(writer, 100, "new")
    assert writer.journal.generation() > 0
    assert writer.journal.epoch() not in ("", epoch)
    assert all(stale.get(i) is None for i in old)
    assert set(state(stale)) == set(new) == set(state(writer))
    later = writer.create("A later fact about Quorvath, after the forget")
    assert {h.entry.id for h in search(stale, "Quorvath", limit=500)} == {later.id}


def test_a_compaction_between_a_readers_check_and_its_read_never_mixes_generations(
    tmp_path, caplog
):
    writer = FileMemoryStore(tmp_path, AGENT)
    reader = FileMemoryStore(tmp_path, AGENT)
    writer.create("The first fact about Quorvath")
    assert reader.entries()
    offset = reader.feed_offset
    made = [writer.create(f"A fact the reader has not read yet, Quorvath {n}") for n in range(3)]
    before = state(writer)  # the old generation's state: what the reader is about to read
    read_from = reader.journal.read_from

    def racing(at: int, fd: int | None = None):
        # Right after the reader saw the old generation at the path, and before it reads:
        # the writer compacts and grows the next generation past the reader's offset.
        reader.journal.read_from = read_from
        writer.compact_journal()
        later = writer.create("Written in the next generation, Quorvath")
        while writer.journal.size() <= offset + 300:
            writer.update(later.id, content=f"{later.content} again {writer.journal.size()}")
        return read_from(at, fd)

    reader.journal.read_from = racing
    assert state(reader) == before  # the old generation's records, read whole
    assert all(reader.get(e.id) == e for e in made)
    assert "malformed" not in caplog.text
    assert state(reader) == state(writer)  # then it sees the swap and loads again
