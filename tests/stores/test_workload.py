"""The idle check's counts (stores.dream_state.workload), pass by pass."""

from __future__ import annotations

import os
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dreamkeeper.core.models import MemoryEntry
from dreamkeeper.core.settings import DEFAULT_FLOOR, DecayParams
from dreamkeeper.policies.decay import DECAY_STEP, decay_due, decay_due_at, decayed_importance
from dreamkeeper.policies.gating import SettledCluster
from dreamkeeper.stores.contract.feed import JournalAction
from dreamkeeper.stores.contract.idle_marks import IdleMarks
from dreamkeeper.stores.conversation.conversation_log import ConversationLog
from dreamkeeper.stores.dream_state.consolidation_state import ClusterState
from dreamkeeper.stores.dream_state.dream_ledger import ledger_for
from dreamkeeper.stores.dream_state.workload import dream_work, next_work_at, settings_key
from dreamkeeper.stores.files.idle_marks import FileIdleMarks
from dreamkeeper.stores.files.memory_store import FileMemoryStore

T0 = datetime(2026, 9, 1, 8, 0, tzinfo=UTC)
RETENTION = timedelta(days=90)
PARAMS = DecayParams()


def _work(store, as_of=T0, *, llm=False):
    return dream_work(
        store, as_of, retention=RETENTION, decay=PARAMS, floor=DEFAULT_FLOOR, llm_configured=llm
    )


def test_a_fresh_store_without_an_llm_is_idle_and_with_one_has_its_new_entries_to_review(
    tmp_path,
):
    store = FileMemoryStore(tmp_path, "a1", clock=lambda: T0)
    store.create("The user lives in Chicago.")
    store.create("The user's dog is called Rex.")
    assert _work(store).idle and _work(store).live == 2
    assert _work(store, llm=True).consolidation == 2


def test_reviewed_entries_are_idle_until_a_settled_cluster_comes_due(tmp_path):
    store = FileMemoryStore(tmp_path, "a1", clock=lambda: T0)
    for text in ("The user lives in Chicago.", "The user lives in Chicago, Illinois."):
        entry = store.create(text)
        reviewed = entry.model_copy(update={"consolidation_reviewed_hash": entry.fingerprint})
        store.put(reviewed, action=JournalAction.REVIEWED)
    ids = tuple(sorted(e.id for e in store.entries()))
    ClusterState(store.documents).save([SettledCluster(ids, declines=1, settled_at=T0)])
    assert _work(store, T0 + timedelta(days=6), llm=True).idle
    assert _work(store, T0 + timedelta(days=7), llm=True).consolidation == 1


def test_archives_and_ledgers_past_retention_are_purge_work_but_protected_ones_are_not(
    tmp_path,
):
    old = FileMemoryStore(tmp_path, "a1", clock=lambda: T0 - timedelta(days=200))
    kept = old.create("A protected note.", importance=0.9)
    old.archive(kept.id, "deleted by agent tool")
    assert _work(old).purge == 0
    gone = old.create("An old note.", importance=0.2)
    old.archive(gone.id, "deleted by agent tool")
    assert _work(old).purge == 1
    ledger_for(old.documents, "cycle-1").note("decay", [(kept.id, None)])
    ledger = old.files.path("dreams", "cycle-1.jsonl")
    stamp = (T0 - timedelta(days=100)).timestamp()
    os.utime(ledger, (stamp, stamp))
    assert _work(old).purge == 2


def test_conversation_turns_and_exact_duplicates_are_work(tmp_path):
    store = FileMemoryStore(tmp_path, "a1", clock=lambda: T0)
    store.create("The user lives in Chicago.", category="places")
    ConversationLog(store.documents).append("s1", "user", "No emoji, please.", T0)
    assert _work(store).preferences > 0 and _work(store).consolidation == 0
    store.create("The user lives  in Chicago.", category="places")
    assert _work(store).consolidation == 1


def _entry(importance: float, seen_days: float, updated_days: float) -> MemoryEntry:
    seen = T0 - timedelta(days=seen_days)
    return MemoryEntry(
        id="a00000000001",
        content="A note.",
        importance_score=importance,
        created_at=seen - timedelta(days=1),
        last_seen_at=seen,
        updated_at=T0 - timedelta(days=min(seen_days, updated_days)),
    )


@given(
    importance=st.floats(0.0, 1.0),
    seen_days=st.floats(0, 400),
    updated_days=st.floats(0, 400),
    later_days=st.floats(0, 400),
)
def test_a_decay_step_left_for_later_is_applied_whole_by_the_next_pass(
    importance, seen_days, updated_days, later_days
):
    """Skipping a pass that is not due loses nothing: it was less than a step, and a
    later pass measures from the entry's last rewrite, so it applies the skipped part."""
    entry = _entry(importance, seen_days, updated_days)
    now = decayed_importance(entry, T0, PARAMS)
    if not decay_due(entry, T0, PARAMS):
        assert now is None or entry.importance_score - now < DECAY_STEP
    later = T0 + timedelta(days=later_days)
    skipped = decayed_importance(entry, later, PARAMS)
    if now is not None:
        applied = entry.model_copy(update={"importance_score": now, "updated_at": T0})
        then = decayed_importance(applied, later, PARAMS)
        both = then if then is not None else now
        assert skipped is not None and abs(both - skipped) < 1e-9


@given(
    importance=st.floats(0.0, 1.0),
    seen_days=st.floats(0, 400),
    updated_days=st.floats(0, 400),
    before=st.floats(0, 400),
)
def test_decay_is_never_due_before_the_time_the_idle_mark_waits_for(
    importance, seen_days, updated_days, before
):
    entry = _entry(importance, seen_days, updated_days)
    at = decay_due_at(entry, PARAMS)
    if at is None:
        assert not decay_due(entry, T0 + timedelta(days=before), PARAMS)
    else:
        assert not decay_due(entry, at - timedelta(days=before), PARAMS)
        assert decay_due(entry, at + timedelta(minutes=1), PARAMS)


SETTINGS = settings_key(
    retention=RETENTION, decay=PARAMS, floor=DEFAULT_FLOOR, llm_configured=False, model_key=None
)


@pytest.fixture
def marks(long_term, tier_db, tmp_path) -> IdleMarks:
    """The idle marks of this test's backend (the long-term stores' data directory, or
    the database)."""
    if tier_db is None:
        return FileIdleMarks(tmp_path / "data")
    from dreamkeeper.stores.postgres.idle_marks import PostgresIdleMarks

    return PostgresIdleMarks(tier_db)


def _held(marks: IdleMarks, as_of=T0, settings=SETTINGS, agent="a1"):
    """The agent's work when its mark holds as of `as_of`, else None."""
    [(_, held)] = marks.check([agent], as_of, settings)
    return held


def _state(marks: IdleMarks, agent="a1"):
    [(state, held)] = marks.check([agent], T0, SETTINGS)
    assert held is None
    return state


def _mark(store, marks: IdleMarks, as_of=T0, *, state=None):
    """What the idle check does for an idle agent: state first, then count, then mark."""
    state = state or _state(marks, store.agent_id)
    work = _work(store, as_of)
    assert work.idle and state is not None
    until = next_work_at(
        store, retention=RETENTION, decay=PARAMS, floor=DEFAULT_FLOOR, llm_configured=False
    )
    marks.mark(store.agent_id, state, until, work)
    return until


def test_an_idle_mark_holds_until_its_time_or_any_change(long_term, marks):
    old = long_term.open("a1", clock=lambda: T0 - timedelta(days=20))
    old.create("The user's desk is on the third floor.", importance=0.5)
    until = _mark(old, marks)
    # The mark waits exactly for the decay step: idle just before, work from then on.
    assert until is not None and not _work(old, until).decay
    assert _work(old, until + timedelta(minutes=1)).decay == 1
    assert _held(marks, until - timedelta(hours=1)).live == 1
    assert _held(marks, until + timedelta(minutes=1)) is None
    other = settings_key(
        retention=RETENTION, decay=PARAMS, floor=DEFAULT_FLOOR, llm_configured=True, model_key=None
    )
    assert _held(marks, T0, other) is None
    log = ConversationLog(old.documents)
    log.append("s1", "user", "Please stop using emoji.", T0)
    assert _held(marks) is None
    log.rotate("read")
    assert _held(marks) is not None
    long_term.open("a1", clock=lambda: T0).create("Another note.")
    assert _held(marks) is None


def test_the_mark_waits_for_an_archive_to_pass_the_retention(long_term, marks):
    store = long_term.open("a1", clock=lambda: T0)
    gone = store.create("An old note.", importance=0.2)
    store.archive(gone.id, "deleted by agent tool")
    until = _mark(store, marks)
    assert until == T0 + RETENTION
    assert _work(store, until).purge == 0 and _work(store, until + timedelta(seconds=1)).purge == 1
    assert _held(marks, until - timedelta(seconds=1)) is not None
    assert _held(marks, until) is None


def test_a_write_between_the_state_read_and_the_mark_makes_the_mark_not_hold(long_term, marks):
    store = long_term.open("a1", clock=lambda: T0)
    store.create("The user lives in Chicago.")
    state = _state(marks)
    # Another process saves after the check read the state, before it counted.
    long_term.open("a1", clock=lambda: T0).create("The user's dog is called Rex.")
    _mark(store, marks, state=state)
    assert _held(marks) is None
    _mark(store, marks)  # counted again from a state read first: it holds
    assert _held(marks).live == 2


@pytest.mark.parametrize("change", ["ledger", "clusters", "archive", "purge"])
def test_dream_state_written_after_the_mark_makes_it_not_hold(long_term, marks, change):
    store = long_term.open("a1", clock=lambda: T0)
    kept = store.create("The user lives in Chicago.")
    other = store.create("The user's dog is called Rex.")
    _mark(store, marks)
    assert _held(marks) is not None
    if change == "ledger":
        ledger_for(store.documents, "cycle-1").note("decay", [(kept.id, None)])
    elif change == "clusters":
        ids = tuple(sorted((kept.id, other.id)))
        ClusterState(store.documents).save([SettledCluster(ids, declines=1, settled_at=T0)])
    elif change == "archive":
        store.archive(kept.id, "deleted by agent tool")
    else:
        store.archive(kept.id, "deleted by agent tool")
        _mark(store, marks)
        assert _held(marks) is not None
        later = long_term.open("a1", clock=lambda: T0 + RETENTION + timedelta(days=1))
        assert later.purge(RETENTION, keep=DEFAULT_FLOOR.protects).purged
    assert _held(marks) is None


def test_the_batch_check_answers_each_agent_in_order(long_term, marks):
    for agent in ("b1", "b2"):
        store = long_term.open(agent, clock=lambda: T0)
        store.create("A note.")
        _mark(store, marks)
    ConversationLog(long_term.open("b2").documents).append("s1", "user", "Hi.", T0)
    found = marks.check(["b1", "nobody", "b2"], T0, SETTINGS)
    assert [held is not None for _, held in found] == [True, False, False]
    assert found[1] == (None, None)  # no store yet: nothing to mark
    assert found[0][1].agent_id == "b1" and found[2][0] is not None


def test_a_store_made_again_after_the_agent_is_forgotten_never_meets_the_old_mark(
    long_term, marks, tier_db, tmp_path
):
    from dreamkeeper.stores.files.forgetting import file_forgetting

    store = long_term.open("a1", clock=lambda: T0)
    store.create("The user lives in Chicago.")
    _mark(store, marks)
    if tier_db is None:
        root = tmp_path / "data"
        forgetting = file_forgetting(root)
    else:
        from dreamkeeper.stores.postgres.forget import postgres_forgetting

        forgetting = postgres_forgetting(tier_db)
    forgetting.forget_agent("a1")
    # The same writes again: the same feed counter, the same documents.
    long_term.open("a1", clock=lambda: T0).create("The user lives in Chicago.")
    assert _held(marks) is None
