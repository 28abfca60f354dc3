"""Supersede: a checked store operation that makes an older fact history (invariant 20)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dreamkeeper.core.models import MemoryEntry
from dreamkeeper.stores import faults
from dreamkeeper.stores.contract.feed import JournalAction
from dreamkeeper.stores.dream_state.dream_ledger import DreamLedger
from dreamkeeper.stores.files.memory_store import FileMemoryStore
from dreamkeeper.stores.longterm.records import imported_entry
from dreamkeeper.stores.longterm.supersede import history, supersede, unsupersede

AGENT = "facts"
T0 = datetime(2026, 1, 5, tzinfo=UTC)


def _store(tmp_path) -> FileMemoryStore:
    return FileMemoryStore(tmp_path, AGENT, clock=lambda: T0 + timedelta(days=400))


def _pair(store: FileMemoryStore) -> tuple[MemoryEntry, MemoryEntry]:
    old = store.create("Maya lives in Lisbon.", category="people", now=T0)
    new = store.create("Maya lives in Porto.", category="people", now=T0 + timedelta(days=90))
    return old, new


def test_supersede_ends_the_old_fact_and_keeps_its_content(tmp_path):
    store = _store(tmp_path)
    old, new = _pair(store)
    done = supersede(store, old.id, new.id)
    assert done.applied
    after = store.require(old.id)
    assert after.content == old.content and not after.is_archived
    assert after.superseded_by == new.id and after.invalid_at == new.valid_since
    assert not after.is_current and store.require(new.id).is_current
    actions = [r.action for r in store.journal.read_all() if r.id == old.id]
    assert actions[-1] is JournalAction.SUPERSEDED
    # A reader opened afresh sees the same.
    assert FileMemoryStore(tmp_path, AGENT).require(old.id) == after


def test_supersede_is_refused_when_the_target_changed_was_superseded_or_is_archived(tmp_path):
    store = _store(tmp_path)
    old, new = _pair(store)
    shown = old.fingerprint
    store.update(old.id, content="Maya lives in Lisbon, near the river.")
    refused = supersede(store, old.id, new.id, expected_fingerprint=shown)
    assert not refused.applied and "changed since it was shown" in (refused.detail or "")
    assert store.require(old.id).is_current

    third = store.create("Maya lives in Braga.", category="people", now=T0 + timedelta(days=200))
    assert supersede(store, old.id, new.id).applied
    again = supersede(store, old.id, third.id)
    assert not again.applied and "already replaced" in (again.detail or "")
    assert store.require(old.id).superseded_by == new.id

    gone = store.create("Maya has a cat.", category="people", now=T0)
    store.archive(gone.id, "test")
    assert not supersede(store, gone.id, third.id).applied
    # Nor into something that is not current.
    assert not supersede(store, third.id, old.id).applied
    assert store.require(third.id).is_current


def test_a_retried_supersede_applies_once_even_with_writes_in_between(tmp_path):
    store = _store(tmp_path)
    old, new = _pair(store)
    with faults.armed(faults.JOURNAL_APPENDED), pytest.raises(faults.SimulatedCrash):
        supersede(store, old.id, new.id, op="op-1")
    retry = FileMemoryStore(tmp_path, AGENT)
    assert supersede(retry, old.id, new.id, op="op-1").applied
    revision = retry.require(old.id).revision
    unsupersede(retry, old.id)  # someone undoes it in between
    # The same op again: recorded with the effect, so it is not applied a second time.
    assert supersede(retry, old.id, new.id, op="op-1").applied
    assert retry.require(old.id).is_current
    assert retry.require(old.id).revision == revision + 1


def test_unsupersede_and_dream_undo_restore_the_fact(tmp_path):
    store = _store(tmp_path)
    old, new = _pair(store)
    supersede(store, old.id, new.id)
    back = unsupersede(store, old.id)
    assert back.is_current and back.invalid_at is None and back.content == old.content
    ledger = DreamLedger(store.documents, "cycle-1")
    assert supersede(store, old.id, new.id, ledger=ledger).applied
    assert [line.step for line in ledger.lines()] == ["supersede"]
    assert ledger.lines()[0].before is not None and ledger.lines()[0].before.is_current


def test_history_lists_every_version_oldest_first(tmp_path):
    store = _store(tmp_path)
    a = store.create("The Granite team has 20 people.", category="work", now=T0)
    b = store.create("The Granite team has 3 people.", category="work", now=T0 + timedelta(30))
    c = store.create("The Granite team has 12 people.", category="work", now=T0 + timedelta(60))
    supersede(store, a.id, b.id)
    supersede(store, b.id, c.id)
    for member in (a, b, c):
        assert [e.id for e in history(store, member.id)] == [a.id, b.id, c.id]
    assert store.require(a.id).valid_at(T0 + timedelta(days=1))
    assert store.require(b.id).valid_at(T0 + timedelta(days=45))
    assert not store.require(b.id).valid_at(T0 + timedelta(days=61))


def test_old_entry_files_without_validity_load_as_current(tmp_path):
    raw = {
        "id": "0123456789ab",
        "content": "An old fact.",
        "createdAt": "2025-01-01T00:00:00Z",
    }
    entry = MemoryEntry.model_validate(raw)
    assert entry.is_current and entry.valid_since == entry.created_at


@settings(max_examples=60, deadline=None)
@given(
    superseded_by=st.one_of(st.none(), st.text(max_size=20)),
    invalid=st.booleans(),
)
def test_import_refuses_half_or_malformed_validity(superseded_by, invalid):
    raw = {
        "id": "0123456789ab",
        "content": "A fact.",
        "createdAt": "2025-01-01T00:00:00Z",
        "supersededBy": superseded_by,
        "invalidAt": "2025-06-01T00:00:00Z" if invalid else None,
    }
    try:
        entry = imported_entry(MemoryEntry.model_validate(raw))
    except Exception:
        return  # refused: a validation error, or InvalidInput for a malformed id
    # Whatever was accepted is whole and names a well-formed other entry.
    assert (entry.invalid_at is None) == (entry.superseded_by is None)
    if entry.superseded_by is not None:
        assert len(entry.superseded_by) == 12 and entry.superseded_by != entry.id


def test_default_search_returns_current_facts_and_the_rest_on_request(tmp_path):
    from dreamkeeper.stores.search.query import format_hit, search

    store = _store(tmp_path)
    old, new = _pair(store)
    other = store.create("Maya's sister lives in Lisbon too.", category="people", now=T0)
    supersede(store, old.id, new.id)
    ids = lambda hits: [h.entry.id for h in hits]  # noqa: E731
    assert old.id not in ids(search(store, "Maya lives Lisbon"))
    assert other.id in ids(search(store, "Maya lives Lisbon"))
    assert old.id not in ids(search(store, None, category="people"))
    assert old.id in ids(search(store, "Maya lives Lisbon", include_superseded=True))
    # As of a time: what was valid then, by validity time.
    assert ids(search(store, "Maya lives", as_of=T0 + timedelta(days=10)))[:1] == [old.id]
    assert new.id not in ids(search(store, "Maya lives", as_of=T0 + timedelta(days=10)))
    assert old.id not in ids(search(store, "Maya lives", as_of=T0 + timedelta(days=100)))
    assert ids(search(store, history=new.id)) == [old.id, new.id]
    line = format_hit(store.require(old.id), store.now())
    assert f"replaced on {new.valid_since:%Y-%m-%d} by [{new.id}]" in line


def test_an_old_value_saved_again_is_a_new_entry_not_a_reinforcement_of_history(tmp_path):
    from dreamkeeper.policies.dedup import Candidate, DedupOutcome
    from dreamkeeper.stores.longterm.dedup_save import save_fact

    store = _store(tmp_path)
    old, new = _pair(store)
    supersede(store, old.id, new.id)
    back = save_fact(
        store, Candidate("Maya lives in Lisbon.", "people"), new_id="0000000000aa", op_id="op-b"
    )
    assert back.outcome is DedupOutcome.CREATED and back.entry_id == "0000000000aa"
    assert store.require(old.id).reinforcement_count == 1
    # A repeat of the current value still reinforces it.
    again = save_fact(
        store, Candidate("Maya lives in Porto.", "people"), new_id="0000000000ab", op_id="op-c"
    )
    assert again.outcome is DedupOutcome.REINFORCED and again.entry_id == new.id


def test_supersede_transfers_no_counts_along_a_chain(tmp_path):
    store = _store(tmp_path)
    versions = [
        store.create(f"The Granite team has {n} people.", category="work", now=T0 + timedelta(i))
        for i, n in enumerate((3, 20, 7, 12, 9))
    ]
    for i in range(4):
        store.update(versions[i].id, reinforcement_count=4)
        supersede(store, versions[i].id, versions[i + 1].id)
    current = store.require(versions[-1].id)
    # Five versions seen four times each are five facts, not one fact seen 20 times.
    assert current.reinforcement_count == 1 and current.importance_score == 0.5


def test_a_newer_inferred_preference_replaces_the_older_one(tmp_path):
    from dreamkeeper.policies.dedup import Candidate, DedupOutcome
    from dreamkeeper.stores.longterm.dedup_save import save_fact

    store = _store(tmp_path)
    meta = (("source", "inferred"),)
    cat = "user-preferences/inferred"
    first = save_fact(
        store,
        Candidate("The user prefers short answers.", cat, (), meta),
        new_id="0000000000a1",
        op_id="p-1",
    )
    unrelated = save_fact(
        store,
        Candidate("The user prefers dark mode.", cat, (), meta),
        new_id="0000000000a2",
        op_id="p-2",
    )
    newer = save_fact(
        store,
        Candidate("The user prefers detailed answers.", cat, (), meta),
        new_id="0000000000a3",
        op_id="p-3",
    )
    assert newer.outcome is DedupOutcome.CREATED and newer.replaced == (first.entry_id,)
    assert store.require(first.entry_id).superseded_by == newer.entry_id
    assert store.require(unrelated.entry_id).is_current
    # A user-stated preference is never replaced by an inference this way.
    stated = store.create(
        "The user prefers long answers.", category=cat, metadata={"source": "user"}
    )
    later = save_fact(
        store,
        Candidate("The user prefers brief answers.", cat, (), meta),
        new_id="0000000000a4",
        op_id="p-4",
    )
    assert store.require(stated.id).is_current
    assert later.replaced in ((), (newer.entry_id,))


def test_validity_starts_at_the_subject_time_when_known(tmp_path):
    store = _store(tmp_path)
    dated = store.create(
        "Maya Lund moved to Porto.",
        category="people",
        metadata={"subjectTime": "2025-03-01"},
        now=T0 + timedelta(days=400),
    )
    assert dated.valid_since == datetime(2025, 3, 1, tzinfo=UTC)
    garbled = store.create("Maya Lund has a cat.", metadata={"subjectTime": "soon"}, now=T0)
    assert garbled.valid_since == T0
