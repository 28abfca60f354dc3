"""The kill-storm audit on stores built by hand: each check finds what it should, and
nothing on a clean store. The checks that need only store operations run on every way
of auditing (`audited`): a file store from disk, and any store through the contract."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from dreamkeeper.policies.consolidation import EPHEMERAL_REASON
from dreamkeeper.policies.merge import exact_duplicate_folds
from dreamkeeper.stores.contract.feed import JournalAction
from dreamkeeper.stores.files.memory_store import FileMemoryStore
from dreamkeeper.stores.longterm.supersede import supersede
from tests.harness.audit import AckedSave, StoreAudit, audit_memory_store, audit_store

AGENT = "audit"
NOTE = "Trish Roberts's email is trish@contoso.com. Trish Roberts works at Contoso since 2014."
EMAIL = "Trish Roberts's email is trish@contoso.com."
WORK = "Trish Roberts works at Contoso since 2014."


def _acked(entry_id: str, content: str = NOTE) -> AckedSave:
    return AckedSave(AGENT, entry_id, content, "people")


def _enriched(store: FileMemoryStore, facts: list[str]) -> tuple[str, list[str]]:
    original = store.create(NOTE, category="people")
    ids = [store.create(f, category="people").id for f in facts]
    store.archive(original.id, f"enriched into [{', '.join(sorted(ids))}]")
    return original.id, ids


class Audited:
    """A store to build by hand, and the audit of it, one way."""

    def __init__(self, store, audit) -> None:
        self.store = store
        self._audit = audit

    def audit(self, acked: list[AckedSave]) -> StoreAudit:
        return self._audit(acked)


@pytest.fixture(params=["disk", "contract", "postgres"])
def audited(request, tmp_path) -> Iterator[Audited]:
    if request.param == "postgres":
        from dreamkeeper.stores.postgres.database import Database
        from dreamkeeper.stores.postgres.memory_store import PostgresMemoryStore

        db = Database(request.getfixturevalue("database_url"), max_size=2)
        yield Audited(
            PostgresMemoryStore(db, AGENT),
            lambda acked: audit_memory_store(PostgresMemoryStore(db, AGENT), acked),
        )
        db.close()
        return
    store = FileMemoryStore(tmp_path, AGENT)
    if request.param == "disk":
        yield Audited(store, lambda acked: audit_store(tmp_path, AGENT, acked))
    else:
        yield Audited(
            store, lambda acked: audit_memory_store(FileMemoryStore(tmp_path, AGENT), acked)
        )


def test_a_clean_store_passes_every_check(audited):
    store = audited.store
    live = store.create("Met Duane Lhotka at PyCon on 2026-05-02.", category="events")
    original, _ = _enriched(store, [EMAIL, WORK])
    audit = audited.audit([_acked(original), _acked(live.id, live.content)])
    assert (audit.acked, audit.covered, audit.lost, audit.pruned) == (2, 2, [], [])
    assert audit.duplicates == 0 and audit.applied_twice == 0
    assert audit.unjournaled_files == [] and audit.unrecorded_states == []
    assert audit.journaled_but_missing == []


def test_a_save_retired_into_entries_that_miss_a_specific_is_lost(audited):
    original, _ = _enriched(audited.store, ["Trish Roberts's email is on file.", WORK])
    audit = audited.audit([_acked(original)])
    assert [loss.entry_id for loss in audit.lost] == [original]
    assert audit.lost[0].missing == ["trish@contoso.com"]


def test_chains_are_followed_and_ephemeral_prunes_count_apart(audited):
    store = audited.store
    original, (email, work) = _enriched(store, [EMAIL, WORK])
    merged = store.create(f"{EMAIL} {WORK}", category="people")
    store.archive(email, f"merged into {merged.id}")
    store.archive(work, f"merged into {merged.id}")
    assert audited.audit([_acked(original)]).covered == 1
    store.archive(merged.id, EPHEMERAL_REASON)
    audit = audited.audit([_acked(original)])
    assert audit.pruned == [original] and audit.lost == []


def test_retired_into_field_wins_over_the_reason(tmp_path):
    store = FileMemoryStore(tmp_path, AGENT)
    original, (email, work) = _enriched(store, [EMAIL, WORK])
    path = store.path_for(original, "people")
    raw = json.loads(path.read_text())
    path.write_text(json.dumps({**raw, "retiredInto": [email]}))  # work is not listed
    audit = audit_store(tmp_path, AGENT, [_acked(original)])
    assert audit.lost and audit.lost[0].missing == ["2014"]


def test_duplicate_live_entries_and_retry_copies(audited):
    store = audited.store
    first = store.create(WORK, category="people")
    store.create(WORK.replace(" ", "  "), category="people")
    store.create(WORK, category="other")  # another category: not a duplicate
    audit = audited.audit([_acked(first.id, WORK)])
    assert audit.duplicates == 1
    second = store.create(WORK, category="people/work")
    audit = audited.audit([_acked(first.id, WORK)])
    assert audit.retry_copies and second.id in audit.retry_copies[0]


def test_a_fact_true_again_after_its_change_is_no_duplicate(audited):
    # A, then B, then A again: the first A is history (superseded), the last is current.
    store = audited.store
    home = "Trish Roberts lives in Porto."
    first = store.create(home, category="people")
    moved = store.create("Trish Roberts lives in Lisbon.", category="people")
    assert supersede(store, first.id, moved.id).applied
    back = store.create(home, category="people")
    assert supersede(store, moved.id, back.id).applied
    assert audited.audit([_acked(first.id, home)]).duplicates == 0
    store.create(home, category="people")  # a second current copy is one
    assert audited.audit([_acked(first.id, home)]).duplicates == 1


class _NoLedger:
    def note(self, step, befores) -> None:
        pass


def test_a_fold_sums_its_copies_once_and_the_audit_counts_them(audited):
    # The fold's record says "folded 2 exact duplicate(s)"; the copies it summed are its
    # op's detail in the survivor: a survivor reinforced 3 times is not over its bound.
    store = audited.store
    first = store.create(WORK, category="people")
    for _ in range(2):
        store.create(WORK, category="people")
    (fold,) = exact_duplicate_folds(store.entries())
    store.fold(fold, op="fold-1", reason=f"merged into {first.id}", ledger=_NoLedger())
    assert store.require(first.id).reinforcement_count == 3
    audit = audited.audit([_acked(first.id, WORK)])
    assert audit.over_reinforced == [] and audit.twice_records == []
    # One more reinforcement than any op explains is reported.
    bumped = store.require(first.id).model_copy(update={"reinforcement_count": 4})
    store.put(bumped, action=JournalAction.REINFORCED, reason=None)
    assert audited.audit([_acked(first.id, WORK)]).over_reinforced


def test_files_the_journal_does_not_know(tmp_path):
    store = FileMemoryStore(tmp_path, AGENT)
    entry = store.create(WORK, category="people")
    stray = json.loads(store.path_for(entry.id, "people").read_text())
    stray_path = store.path_for("0123456789ab", "people")
    stray_path.write_text(json.dumps({**stray, "id": "0123456789ab"}))
    path = store.path_for(entry.id, "people")
    path.write_text(json.dumps({**json.loads(path.read_text()), "content": EMAIL}))
    audit = audit_store(tmp_path, AGENT, [])
    assert audit.unjournaled_files == [str(stray_path)]
    assert [s.split(":")[0] for s in audit.unrecorded_states] == [entry.id]


def test_an_archive_the_journal_never_saw(tmp_path):
    store = FileMemoryStore(tmp_path, AGENT)
    entry = store.create(WORK, category="people")
    path = store.path_for(entry.id, "people")
    raw = json.loads(path.read_text())
    path.write_text(json.dumps({**raw, "archivedAt": raw["createdAt"], "archiveReason": "x"}))
    audit = audit_store(tmp_path, AGENT, [])
    assert audit.unrecorded_states and "journal says live" in audit.unrecorded_states[0]


def test_an_op_recorded_twice_and_a_count_no_op_explains(audited):
    store = audited.store
    entry = store.create(WORK, category="people")
    once = store.put(
        entry.model_copy(update={"reinforcement_count": 2}),
        action=JournalAction.REINFORCED,
        reason="save op-1",
    )
    assert audited.audit([]).applied_twice == 0
    store.put(
        once.model_copy(update={"reinforcement_count": 3}),
        action=JournalAction.REINFORCED,
        reason="save op-1",
    )
    audit = audited.audit([])
    assert audit.twice_records == [f"{entry.id}: 'save op-1' ×2"]
    assert audit.over_reinforced  # 3 > 1 created + 1 distinct op


def test_retiring_into_an_entry_already_folded_back_into_it_is_a_loss(audited):
    # The shape a kill storm produced: the fact (a copy of its original) is folded into
    # the original by a dream, then the save's late archive retires the original into it.
    store = audited.store
    original = store.create(WORK, category="people")
    fact = store.create(WORK, category="people")
    store.archive(fact.id, f"merged into {original.id}")
    store.archive(original.id, f"enriched into [{fact.id}]")
    audit = audited.audit([_acked(original.id, WORK)])
    assert [loss.entry_id for loss in audit.lost] == [original.id]
    assert "loops" in audit.lost[0].fate
    assert len(audit.late_retirements) == 1 and audit.late_retirements[0].startswith(original.id)


def test_a_prune_reached_through_a_late_retirement_is_not_deliberate(audited):
    store = audited.store
    original = store.create(WORK, category="people")
    fact = store.create(WORK, category="people")
    store.archive(fact.id, EPHEMERAL_REASON)
    store.archive(original.id, f"enriched into [{fact.id}]")
    audit = audited.audit([_acked(original.id, WORK)])
    assert audit.pruned == [] and [loss.entry_id for loss in audit.lost] == [original.id]


def test_a_write_that_never_landed_and_its_retry_count_once(tmp_path):
    from dreamkeeper.policies.dedup import Candidate
    from dreamkeeper.stores import faults
    from dreamkeeper.stores.longterm.dedup_save import save_fact

    store = FileMemoryStore(tmp_path, AGENT)
    target = store.create(NOTE, category="people")
    with faults.armed(faults.JOURNAL_APPENDED), pytest.raises(faults.SimulatedCrash):
        save_fact(store, Candidate(NOTE, "people"), new_id="aaaaaaaaaaaa", op_id="op-1")
    save_fact(
        FileMemoryStore(tmp_path, AGENT),
        Candidate(NOTE, "people"),
        new_id="aaaaaaaaaaaa",
        op_id="op-1",
    )
    audit = audit_store(tmp_path, AGENT, [_acked(target.id)])
    assert audit.applied_twice == 0, audit.twice_records


def test_a_row_changed_behind_the_change_feed(database_url):
    # The database's version of a file the journal never saw: a row whose content, or
    # archived state, no feed record names.
    from dreamkeeper.stores.postgres.database import Database
    from dreamkeeper.stores.postgres.memory_store import PostgresMemoryStore

    db = Database(database_url, max_size=2)
    try:
        store = PostgresMemoryStore(db, AGENT)
        edited = store.create(WORK, category="people")
        archived = store.create(EMAIL, category="people")
        clean = store.create("Met Duane Lhotka at PyCon on 2026-05-02.", category="events")
        assert audit_memory_store(PostgresMemoryStore(db, AGENT), []).unrecorded_states == []
        edit = json.loads(edited.to_json())
        edit.update(content=EMAIL + " (edited)")
        hidden = json.loads(archived.to_json())
        hidden.update(archivedAt=hidden["createdAt"], archiveReason="x")
        with db.transaction() as conn:
            for doc in (edit, hidden):
                conn.execute(
                    "UPDATE dk_memory SET doc = %s WHERE agent_id = %s AND id = %s",
                    (json.dumps(doc), AGENT, doc["id"]),
                )
        audit = audit_memory_store(PostgresMemoryStore(db, AGENT), [])
        found = sorted(s.split(":")[0] for s in audit.unrecorded_states)
        assert found == sorted([edited.id, archived.id]) and clean.id not in found
    finally:
        db.close()
