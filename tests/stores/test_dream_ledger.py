"""The per-cycle ledger undo reads (#17): intents before writes, read defensively."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from dreamkeeper.stores.dream_ledger import DreamLedger, ledger_for
from dreamkeeper.stores.memory_store import FileMemoryStore

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
