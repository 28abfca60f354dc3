"""The idle check's counts (stores.dream_state.workload), pass by pass."""

from __future__ import annotations

import os
from datetime import UTC, datetime, timedelta

from hypothesis import given
from hypothesis import strategies as st

from dreamkeeper.core.models import MemoryEntry
from dreamkeeper.core.settings import DEFAULT_FLOOR, DecayParams
from dreamkeeper.policies.decay import DECAY_STEP, decay_due, decay_due_at, decayed_importance
from dreamkeeper.policies.gating import SettledCluster
from dreamkeeper.stores.conversation.conversation_log import ConversationLog
from dreamkeeper.stores.dream_state.consolidation_state import ClusterState
from dreamkeeper.stores.dream_state.dream_ledger import ledger_for
from dreamkeeper.stores.dream_state.workload import (
    dream_work,
    idle_by_mark,
    mark_idle,
    next_work_at,
    settings_key,
    state_key,
)
from dreamkeeper.stores.longterm.journal import JournalAction
from dreamkeeper.stores.longterm.memory_store import FileMemoryStore

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


def _mark(store, as_of=T0):
    """What the idle check does for an idle agent: state first, then count, then mark."""
    state = state_key(store.root, SETTINGS)
    work = _work(store, as_of)
    assert work.idle and state is not None
    until = next_work_at(
        store, retention=RETENTION, decay=PARAMS, floor=DEFAULT_FLOOR, llm_configured=False
    )
    mark_idle(store.root, state, until, work)
    return until


def test_an_idle_mark_holds_until_its_time_or_any_change(tmp_path):
    old = FileMemoryStore(tmp_path, "a1", clock=lambda: T0 - timedelta(days=20))
    old.create("The user's desk is on the third floor.", importance=0.5)
    until = _mark(old)
    # The mark waits exactly for the decay step: idle just before, work from then on.
    assert until is not None and not _work(old, until).decay
    assert _work(old, until + timedelta(minutes=1)).decay == 1
    assert idle_by_mark(old.files, until - timedelta(hours=1), SETTINGS).live == 1
    assert idle_by_mark(old.files, until + timedelta(minutes=1), SETTINGS) is None
    other = settings_key(
        retention=RETENTION, decay=PARAMS, floor=DEFAULT_FLOOR, llm_configured=True, model_key=None
    )
    assert idle_by_mark(old.files, T0, other) is None
    log = ConversationLog(old.documents)
    log.append("s1", "user", "Please stop using emoji.", T0)
    assert idle_by_mark(old.files, T0, SETTINGS) is None
    log.rotate("read")
    assert idle_by_mark(old.files, T0, SETTINGS) is not None
    FileMemoryStore(tmp_path, "a1", clock=lambda: T0).create("Another note.")
    assert idle_by_mark(old.files, T0, SETTINGS) is None


def test_the_mark_waits_for_an_archive_to_pass_the_retention(tmp_path):
    store = FileMemoryStore(tmp_path, "a1", clock=lambda: T0)
    gone = store.create("An old note.", importance=0.2)
    store.archive(gone.id, "deleted by agent tool")
    until = _mark(store)
    assert until == T0 + RETENTION
    assert _work(store, until).purge == 0 and _work(store, until + timedelta(seconds=1)).purge == 1
