"""The per-cycle ledger undo reads: intents before writes, read defensively (both
backends: `tests/stores/conftest.py`)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from dreamkeeper.stores.dream_state.dream_ledger import DreamLedger, ledger_for, prune_ledgers
from dreamkeeper.stores.files.memory_store import FileMemoryStore

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def test_histories_keep_the_first_state_and_the_last_revision(tmp_path, documents):
    store = FileMemoryStore(tmp_path / "entries", "l", clock=lambda: T0)
    entry = store.create("Trish likes tea.", entry_id="a00000000000")
    ledger = DreamLedger(documents, "run-1")
    assert not ledger.exists()
    ledger.note("merge", [("b00000000000", None)])
    ledger.note("fold", [(entry.id, entry)])
    later = store.update_importance(entry.id, 0.2)
    ledger.note("decay", [(entry.id, later)])
    documents.append("dreams/run-1.jsonl", b'{"id": "zz"}\n{torn')  # a crash mid-append
    histories = {h.id: h for h in ledger.histories()}
    assert histories["b00000000000"].first is None
    assert histories[entry.id].first == entry and histories[entry.id].last_revision == 2
    assert histories[entry.id].steps == ["fold", "decay"]
    # The next intent is not glued onto the torn line: it is read back whole.
    ledger.note("prune", [("c00000000000", None)])
    assert [h.id for h in ledger.histories()][-1] == "c00000000000"


def test_no_cycle_id_records_nothing_and_bad_ids_are_refused(documents):
    ledger_for(documents, None).note("x", [("a00000000000", None)])
    assert documents.names("dreams/") == []
    with pytest.raises(ValueError):
        DreamLedger(documents, "../escape")


def test_ledgers_older_than_the_cutoff_are_pruned(documents, age_document):
    for cycle in ("old", "new"):
        DreamLedger(documents, cycle).note("merge", [("a00000000000", None)])
    age_document("dreams/old.jsonl", T0)
    assert prune_ledgers(documents, datetime(2026, 2, 1, tzinfo=UTC)) == ["old"]
    assert not DreamLedger(documents, "old").exists() and DreamLedger(documents, "new").exists()
