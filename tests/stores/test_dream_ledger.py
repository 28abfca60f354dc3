"""The per-cycle ledger undo reads: intents before writes, read defensively."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from dreamkeeper.stores.dream_state.dream_ledger import DreamLedger, ledger_for, prune_ledgers
from dreamkeeper.stores.longterm.memory_store import FileMemoryStore

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def test_histories_keep_the_first_state_and_the_last_revision(tmp_path):
    store = FileMemoryStore(tmp_path, "l", clock=lambda: T0)
    entry = store.create("Trish likes tea.", entry_id="a00000000000")
    ledger = DreamLedger(store.files, "run-1")
    assert not ledger.exists()
    ledger.note("merge", [("b00000000000", None)])
    ledger.note("fold", [(entry.id, entry)])
    later = store.update_importance(entry.id, 0.2)
    ledger.note("decay", [(entry.id, later)])
    (store.root / "dreams" / "run-1.jsonl").open("ab").write(b'{"id": "zz"}\n{torn')
    histories = {h.id: h for h in ledger.histories()}
    assert histories["b00000000000"].first is None
    assert histories[entry.id].first == entry and histories[entry.id].last_revision == 2
    assert histories[entry.id].steps == ["fold", "decay"]


def test_no_cycle_id_records_nothing_and_bad_ids_are_refused(tmp_path):
    store = FileMemoryStore(tmp_path, "l")
    ledger_for(store.files, None).note("x", [("a00000000000", None)])
    assert not (store.root / "dreams").exists()
    with pytest.raises(ValueError):
        DreamLedger(store.files, "../escape")


def test_ledgers_older_than_the_cutoff_are_pruned(tmp_path):
    import os

    store = FileMemoryStore(tmp_path, "l")
    for cycle in ("old", "new"):
        DreamLedger(store.files, cycle).note("merge", [("a00000000000", None)])
    old = store.root / "dreams" / "old.jsonl"
    os.utime(old, (T0.timestamp(), T0.timestamp()))
    assert prune_ledgers(store.files, datetime(2026, 2, 1, tzinfo=UTC)) == ["old"]
    assert not old.exists() and DreamLedger(store.files, "new").exists()
