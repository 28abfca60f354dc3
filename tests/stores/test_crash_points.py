"""Crash at every write boundary, then the retry a worker would do (invariants 13-15).

Each case arms a named crash point, runs a store operation that dies there, and then:
- `same`: retries on the same store instance (the activity raised; the process lived);
- `fresh`: retries on a new instance (the process died; another worker retries).
Afterwards a long-lived reader (opened before the crash) and a fresh one must agree with
the stored entries, the operation must have applied exactly once, and every stored
revision must have a feed record (the journal, or the database's feed).

Each runs on both backends (`long_term`, tests/stores/conftest.py): the file store dies
after its journal record (`JOURNAL_APPENDED`), the PostgreSQL store inside its open
transaction (`TRANSACTION_OPEN`) — both points where the write has not taken effect.
Tests of the file long_term's own boundaries (a move's two files, the journal's bytes)
stay file-only.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from dreamkeeper.core.errors import Conflict
from dreamkeeper.policies.dedup import Candidate
from dreamkeeper.stores import faults
from dreamkeeper.stores.contract.feed import JournalAction
from dreamkeeper.stores.files.memory_store import FileMemoryStore
from dreamkeeper.stores.longterm.dedup_save import dedup_existing, save_fact
from tests.harness.audit import audit_store

AGENT = "crash"
NOTE = "Trish Roberts of PWOP Productions can be reached at +1 386-299-4605."
SIMILAR = "Trish Roberts of PWOP Productions can be reached at +1 386-299-4605 today."


def _open(tmp_path) -> FileMemoryStore:
    return FileMemoryStore(tmp_path, AGENT)


def _consistent(long_term) -> None:
    """Every stored revision has a feed record naming it (nothing unrecorded)."""
    store = long_term.open(AGENT)
    announced = long_term.announced(AGENT)
    for entry in store.entries(include_archived=True):
        assert (entry.id, entry.revision) in announced, entry.id
    assert store.problems() == {}


def _agree(reader, long_term) -> None:
    fresh = long_term.open(AGENT)
    mine = {e.id: e for e in reader.entries(include_archived=True)}
    theirs = {e.id: e for e in fresh.entries(include_archived=True)}
    assert mine == theirs


def _retry(store, long_term, how):
    return store if how == "same" else long_term.open(AGENT)


@pytest.mark.parametrize("how", ["same", "fresh"])
def test_create_crashed_after_its_record_is_repaired_and_retried(long_term, how):
    writer, reader = long_term.open(AGENT), long_term.open(AGENT)
    reader.entries()
    with faults.armed(long_term.before_commit), pytest.raises(faults.SimulatedCrash):
        writer.create(NOTE, category="people", entry_id="0123456789ab")
    # The create never happened (never acknowledged): no reader serves it.
    assert reader.get("0123456789ab") is None
    retried = _retry(writer, long_term, how).create(
        NOTE, category="people", entry_id="0123456789ab"
    )
    assert retried.content == NOTE
    assert reader.get("0123456789ab") == retried
    if long_term.kind == "file":  # the journal records the dead write and its repair
        actions = [r.action for r in long_term.open(AGENT).journal.read_all()]
        assert JournalAction.REPAIRED in actions and actions.count(JournalAction.CREATED) == 2
    else:  # the dead transaction left no trace: one feed record, the retry's
        assert long_term.announced(AGENT) == {("0123456789ab", 1)}
    _agree(reader, long_term)
    _consistent(long_term)


@pytest.mark.parametrize("how", ["same", "fresh"])
@pytest.mark.parametrize("operation", ["update", "archive", "move", "restore"])
def test_a_mutation_crashed_after_its_record_converges_and_retries_once(long_term, how, operation):
    writer = long_term.open(AGENT)
    entry = writer.create(NOTE, category="people")
    if operation == "restore":
        writer.archive(entry.id, "deleted by agent tool")
    reader = long_term.open(AGENT)
    before = reader.get(entry.id)

    def apply(store: FileMemoryStore):
        if operation == "update":
            return store.update(entry.id, content=NOTE + " Updated.")
        if operation == "archive":
            return store.archive(entry.id, "deleted by agent tool")
        if operation == "move":
            return store.update(entry.id, category="people/contacts")
        return store.restore(entry.id)

    with faults.armed(long_term.before_commit), pytest.raises(faults.SimulatedCrash):
        apply(writer)
    # Pending, then settled: the lock is free, so the file on disk (the old state) wins.
    assert reader.get(entry.id) == before
    assert long_term.open(AGENT).get(entry.id) == before
    after = apply(_retry(writer, long_term, how))
    assert reader.get(entry.id) == after
    # The file store journaled the dead revision (and its repair): the retry takes the
    # number after it. The database's dead transaction left no revision behind.
    assert after.revision == before.revision + (2 if long_term.kind == "file" else 1)
    _agree(reader, long_term)
    _consistent(long_term)


KILLED_IMPORTANCE_UPDATE = textwrap.dedent(
    """
    import sys
    from dreamkeeper.stores.files.memory_store import FileMemoryStore
    FileMemoryStore(sys.argv[1], sys.argv[2]).update_importance(sys.argv[3], 0.9)
    """
)


def test_a_reader_that_settles_a_dead_write_journals_its_repair_and_the_retry_is_a_new_revision(
    tmp_path,
):
    """A process killed between an update's record and its file; the next process to
    open the store reads first (the lock is free: the disk wins for it), then writes
    another entry, then the activity's retry runs. The journal must say the dead write
    was repaired, and the retry must not journal the dead revision's number again: an
    audit then counts the update once (docs/storage.md, "Writing: journal first")."""
    entry = _open(tmp_path).create(NOTE, category="people")
    env = {**os.environ, faults.ENV_VAR: faults.JOURNAL_APPENDED}
    killed = subprocess.run(
        [sys.executable, "-c", KILLED_IMPORTANCE_UPDATE, str(tmp_path), AGENT, entry.id], env=env
    )
    assert killed.returncode == faults.KILLED_EXIT_CODE
    reader = _open(tmp_path)
    reader.entries()  # a long-lived reader, opened before the next process settles

    fresh = _open(tmp_path)  # the next process
    assert fresh.get(entry.id) == entry  # reads before it writes
    other = fresh.create(SIMILAR + " Again.", category="people")
    retried = fresh.update_importance(entry.id, 0.9)

    trail = [(r.action, r.id, r.rev) for r in fresh.journal.read_all()]
    assert trail == [
        (JournalAction.CREATED, entry.id, 1),
        (JournalAction.UPDATED, entry.id, 2),  # the write that died
        (JournalAction.REPAIRED, entry.id, 2),  # journaled by the process that settled it
        (JournalAction.CREATED, other.id, 1),
        (JournalAction.UPDATED, entry.id, 3),  # the retry: a revision of its own
    ]
    assert retried.revision == 3 and retried.importance_score == 0.9
    assert reader.get(entry.id) == retried == _open(tmp_path).get(entry.id)
    audit = audit_store(tmp_path, AGENT, [])
    assert audit.twice_records == [] and audit.unjournaled_files == []
    assert audit.unrecorded_states == [] and audit.journaled_but_missing == []


@pytest.mark.parametrize("how", ["same", "fresh"])
def test_a_move_crashed_between_new_file_and_old_removal(tmp_path, how):
    writer = _open(tmp_path)
    entry = writer.create(NOTE, category="people")
    reader = _open(tmp_path)
    reader.entries()
    with faults.armed(faults.FILE_REPLACED), pytest.raises(faults.SimulatedCrash):
        writer.update(entry.id, category="people/contacts")
    # Two files for one id: the later revision wins for every reader; the other is reported.
    fresh = _open(tmp_path)
    assert fresh.get(entry.id).category == "people/contacts"
    assert reader.get(entry.id).category == "people/contacts"
    assert any("stale duplicate" in r for r in fresh.problems().values())
    # A later write of the entry clears the stale copy.
    retry = writer if how == "same" else _open(tmp_path)
    retry.update(entry.id, content=NOTE + " Moved.")
    assert len(list(tmp_path.rglob(f"{entry.id}.json"))) in (1, 2)
    assert _open(tmp_path).get(entry.id).content == NOTE + " Moved."


@pytest.mark.parametrize("how", ["same", "fresh"])
@pytest.mark.parametrize("point", ["before-commit", None])
def test_a_reinforcing_save_applies_exactly_once_even_with_writes_in_between(long_term, how, point):
    """The op is recorded with its effect: a retry after another save touched the target
    neither skips (the old ledger's bug) nor reinforces twice."""
    writer = long_term.open(AGENT)
    target = writer.create(NOTE, category="people")
    reader = long_term.open(AGENT)
    reader.entries()
    fact = Candidate(SIMILAR, "people")
    if point is not None:
        with faults.armed(long_term.before_commit), pytest.raises(faults.SimulatedCrash):
            save_fact(writer, fact, new_id="aaaaaaaaaaaa", op_id="save-1")
    else:  # applied, but the activity's answer was lost: Temporal retries it anyway
        save_fact(writer, fact, new_id="aaaaaaaaaaaa", op_id="save-1")
    # Another save reinforces the same entry before the retry.
    other = long_term.open(AGENT)
    save_fact(other, Candidate(NOTE, "people"), new_id="bbbbbbbbbbbb", op_id="save-2")
    retried = save_fact(_retry(writer, long_term, how), fact, new_id="aaaaaaaaaaaa", op_id="save-1")
    assert retried.entry_id == target.id
    final = long_term.open(AGENT).get(target.id)
    assert final.reinforcement_count == 3  # the original, save-1 once, save-2 once
    assert set(final.applied_ops) == {"save-1", "save-2"}
    assert len(long_term.open(AGENT).entries()) == 1
    _agree(reader, long_term)
    _consistent(long_term)


@pytest.mark.parametrize("how", ["same", "fresh"])
def test_an_absorb_crashed_between_the_reinforcement_and_the_archive(long_term, how):
    writer = long_term.open(AGENT)
    keeper = writer.create(NOTE, category="people")
    copy = writer.create(SIMILAR, category="people")
    reader = long_term.open(AGENT)
    reader.entries()
    # Let the reinforcement land, crash on the archive's record (the second write).
    with faults.armed(long_term.before_commit, after=1), pytest.raises(faults.SimulatedCrash):
        dedup_existing(writer, copy.id)
    assert long_term.open(AGENT).get(keeper.id).reinforcement_count == 2
    assert not long_term.open(AGENT).get(copy.id).is_archived  # crashed before its archive
    retried = dedup_existing(_retry(writer, long_term, how), copy.id)
    assert retried.entry_id == keeper.id
    again = dedup_existing(long_term.open(AGENT), copy.id)  # and once more: nothing changes
    assert again.entry_id == keeper.id
    fresh = long_term.open(AGENT)
    assert fresh.get(keeper.id).reinforcement_count == 2  # absorbed once, not twice
    assert fresh.get(copy.id).retired_into == [keeper.id]
    _agree(reader, long_term)
    _consistent(long_term)


def test_retire_into_refuses_a_replacement_that_is_not_live(long_term):
    store = long_term.open(AGENT)
    original = store.create(NOTE, category="people")
    fact = store.create(NOTE, category="people/contacts")
    store.archive(fact.id, f"merged into {original.id}")  # a dream folded it meanwhile
    done = store.retire_into(original.id, [fact.id], reason=f"enriched into [{fact.id}]")
    assert not done.retired and "not live" in done.detail
    assert not store.get(original.id).is_archived


def test_retire_into_refuses_replacements_that_miss_a_specific(long_term):
    store = long_term.open(AGENT)
    original = store.create(NOTE, category="people")
    lossy = store.create("Trish Roberts works at PWOP Productions.", category="people")
    done = store.retire_into(original.id, [lossy.id], reason="x")
    assert not done.retired and done.missing == ("+1 386-299-4605",)
    assert done.detail == "the replacements miss 1 specific(s)"
    assert not store.get(original.id).is_archived


def test_a_stale_writer_never_overwrites_newer_state(long_term):
    old_view = long_term.open(AGENT)
    entry = old_view.create(NOTE, category="people")
    stale = old_view.get(entry.id)
    long_term.open(AGENT).archive(entry.id, "deleted by agent tool")
    with pytest.raises(Conflict, match="changed since it was read"):
        old_view.put(
            stale.model_copy(update={"importance_score": 0.9}), action=JournalAction.UPDATED
        )
    assert long_term.open(AGENT).get(entry.id).is_archived


def test_a_file_edited_behind_the_journal_is_taken_as_it_is(tmp_path):
    store = _open(tmp_path)
    entry = store.create(NOTE, category="people")
    path = store.path_for(entry.id, "people")
    raw = json.loads(path.read_text())
    raw["content"] = NOTE + " Edited by hand."
    path.write_text(json.dumps(raw))
    updated = store.update_importance(entry.id, 0.7)
    assert updated.content == NOTE + " Edited by hand." and updated.importance_score == 0.7


def test_a_torn_journal_line_is_terminated_and_skipped_never_glued(tmp_path):
    writer = _open(tmp_path)
    first = writer.create(NOTE, category="people")
    reader = _open(tmp_path)
    reader.entries()
    with open(writer.journal.path, "ab") as handle:
        handle.write(b'{"at":"2026-01-01T00:00:00+00:00","action":"crea\x00\x00')  # a crash
    second = _open(tmp_path).create("The Blazor class runs on Fridays at 12:30.")
    assert reader.get(second.id) == second  # the record after the torn line was read
    assert reader.get(first.id) is not None
    lines = writer.journal.path.read_bytes().split(b"\n")
    assert any(b"\x00" in line and b"created" not in line for line in lines)
    assert _open(tmp_path).get(second.id) == second


@pytest.mark.parametrize(
    "garbage",
    [
        b"[" * 100_000,
        b"[" * 5_000,
        b'"just a string"',
        b"{}",
        b"\xff\xfe",
        b'{"at": 5, "action": "created", "id": "x"}',
    ],
)
def test_garbage_journal_lines_never_break_a_reader(tmp_path, garbage):
    writer = _open(tmp_path)
    writer.create("an entry before the garbage")
    reader = _open(tmp_path)
    reader.entries()
    with open(writer.journal.path, "ab") as handle:
        handle.write(garbage + b"\n")
    entry = writer.create(NOTE)
    assert reader.get(entry.id) == entry


def test_restoring_a_merged_away_entry_is_refused_while_its_merge_is_live(long_term):
    store = long_term.open(AGENT)
    keeper = store.create(NOTE, category="people")
    copy = store.create(SIMILAR, category="people")
    dedup_existing(store, copy.id)
    with pytest.raises(Conflict, match=keeper.id):
        store.restore(copy.id)
    # Once the merge is archived, the copy comes back without double counting.
    store.archive(keeper.id, "deleted by agent tool")
    assert not store.restore(copy.id).is_archived
    assert not store.restore(copy.id, force=True).is_archived  # idempotent


def _notes(n: int, tag: str = "") -> list:
    from dreamkeeper.stores.contract.records import NewEntry

    return [
        NewEntry(f"Bulk note {tag}{i} about project Orion{i}.", category="bulk") for i in range(n)
    ]


def test_create_many_writes_every_entry_once_and_is_idempotent_by_id(long_term):
    from dreamkeeper.stores.contract.records import NewEntry

    store = long_term.open(AGENT)
    made = store.create_many(_notes(2_500))
    assert len(made) == len({e.id for e in made}) == 2_500
    fresh = long_term.open(AGENT)
    assert len(fresh.entries()) == 2_500
    again = store.create_many([NewEntry(made[0].content, category="bulk", entry_id=made[0].id)])
    assert again == [made[0]] and len(long_term.open(AGENT).entries()) == 2_500
    with pytest.raises(Conflict):
        store.create_many([NewEntry("other text", entry_id=made[0].id)])
    _consistent(long_term)


@pytest.mark.parametrize("how", ["same", "fresh"])
@pytest.mark.parametrize("when", ["early", "late"])
def test_create_many_crashed_mid_batch_is_repaired_and_retried(long_term, how, when):
    # early: nothing of the batch has taken effect; late: the file store has written half
    # its files, the database has committed the batch and not answered.
    point, lands = {
        ("file", "early"): (faults.BATCH_JOURNALED, 0),
        ("file", "late"): (faults.BATCH_HALF_WRITTEN, 20),
        ("postgres", "early"): (faults.TRANSACTION_OPEN, 0),
        ("postgres", "late"): (faults.COMMITTED, 40),
    }[(long_term.kind, when)]
    from dreamkeeper.stores.contract.records import NewEntry

    writer = long_term.open(AGENT)
    reader = long_term.open(AGENT)
    reader.entries()
    items = [NewEntry(f"Bulk note {i} about Orion{i}.", entry_id=f"{i:012x}") for i in range(40)]
    with faults.armed(point), pytest.raises(faults.SimulatedCrash):
        writer.create_many(items)
    landed = {e.id for e in long_term.open(AGENT).entries()}
    assert len(landed) == lands
    assert {e.id for e in reader.entries()} == landed  # the long-lived reader agrees
    done = _retry(writer, long_term, how).create_many(items)  # the caller's retry
    assert len(done) == 40 and len(long_term.open(AGENT).entries()) == 40
    _agree(reader, long_term)
    _consistent(long_term)


def test_import_entries_keeps_every_field_and_is_idempotent(long_term):
    source = long_term.open("source-agent")
    made = source.create_many(_notes(50))
    source.archive(made[0].id, "deleted by agent tool")
    exported = source.entries(include_archived=True)
    target = long_term.open(AGENT)
    first = target.import_entries(exported)
    assert len(first.created) == 50 and first.conflicts == []
    again = target.import_entries(exported)
    assert again.created == [] and len(again.unchanged) == 50
    mine = {e.id: e for e in long_term.open(AGENT).entries(include_archived=True)}
    for entry in exported:
        kept = mine[entry.id]
        assert kept.model_dump(exclude={"revision", "applied_ops"}) == entry.model_dump(
            exclude={"revision", "applied_ops"}
        )
    clash = exported[1].model_copy(update={"content": "something else entirely"})
    assert target.import_entries([clash]).conflicts == [clash.id]
