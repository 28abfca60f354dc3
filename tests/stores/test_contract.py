"""The store contract (`stores.contract`): each backend has every operation of each
Protocol with the same parameters, and the operations that moved out of the activities
keep their guarantees (exactly once by op id, nothing archived that changed since shown).

Types: `stores.conformance` assigns each file class to its Protocol, which mypy checks in
CI; here the same is checked at runtime, member by member."""

from __future__ import annotations

import inspect
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from dreamkeeper.core.models import MemoryEntry
from dreamkeeper.policies.merge import exact_duplicate_folds
from dreamkeeper.stores import conformance
from dreamkeeper.stores.contract import (
    AgentDocuments,
    ConversationStore,
    IntentLog,
    MemoryStore,
    WorkingMemoryStore,
)
from dreamkeeper.stores.files.agent_files import AgentFiles
from dreamkeeper.stores.files.conversation_memory import FileConversationStore
from dreamkeeper.stores.files.documents import FileDocuments
from dreamkeeper.stores.files.memory_store import FileMemoryStore
from dreamkeeper.stores.files.working_memory import FileWorkingMemoryStore

T0 = datetime(2026, 3, 1, tzinfo=UTC)

BACKENDS = [
    (MemoryStore, FileMemoryStore, conformance.long_term),
    (WorkingMemoryStore, FileWorkingMemoryStore, conformance.working),
    (ConversationStore, FileConversationStore, conformance.conversations),
]


def _members(protocol: type) -> dict[str, Any]:
    """The Protocol's own members: its methods and its annotated attributes."""
    found: dict[str, Any] = {
        name: value
        for name, value in vars(protocol).items()
        if callable(value) and (not name.startswith("_") or name == "__len__")
    }
    found.update(dict.fromkeys(vars(protocol).get("__annotations__", {})))
    return found


def _parameters(function: Any) -> list[tuple[str, Any, bool]]:
    return [
        (p.name, p.kind, p.default is not inspect.Parameter.empty)
        for p in inspect.signature(function).parameters.values()
    ]


@pytest.mark.parametrize(("protocol", "backend", "conforms"), BACKENDS, ids=lambda v: v.__name__)
def test_the_file_backend_has_every_contract_operation_with_its_parameters(
    tmp_path: Path, protocol: type, backend: type, conforms: Any
) -> None:
    _check_members(protocol, backend, backend(tmp_path, "contract"), conforms)


def test_the_documents_and_postgres_backends_have_every_contract_operation(
    tmp_path: Path, database_url: str
) -> None:
    from dreamkeeper.stores.postgres.conversation_memory import PostgresConversationStore
    from dreamkeeper.stores.postgres.database import Database
    from dreamkeeper.stores.postgres.documents import PostgresDocuments
    from dreamkeeper.stores.postgres.memory_store import PostgresMemoryStore
    from dreamkeeper.stores.postgres.working_memory import PostgresWorkingMemoryStore

    db = Database(database_url, max_size=2)
    files = AgentFiles(tmp_path, "contract")
    for protocol, backend, store, conforms in [
        (AgentDocuments, FileDocuments, FileDocuments(files), conformance.file_documents),
        (
            AgentDocuments,
            PostgresDocuments,
            PostgresDocuments(db, "contract"),
            conformance.postgres_documents,
        ),
        (
            MemoryStore,
            PostgresMemoryStore,
            PostgresMemoryStore(db, "contract"),
            conformance.long_term_postgres,
        ),
        (
            WorkingMemoryStore,
            PostgresWorkingMemoryStore,
            PostgresWorkingMemoryStore(db, "contract"),
            conformance.postgres_working,
        ),
        (
            ConversationStore,
            PostgresConversationStore,
            PostgresConversationStore(db, "contract"),
            conformance.postgres_conversations,
        ),
    ]:
        _check_members(protocol, backend, store, conforms)
    db.close()


def _check_members(protocol: type, backend: type, store: Any, conforms: Any) -> None:
    members = _members(protocol)
    assert len(members) >= 5, f"no members found on {protocol.__name__}"
    assert isinstance(store, protocol)
    assert conforms(store) is store
    for name, declared in members.items():
        assert hasattr(store, name), f"{backend.__name__} lacks {name}"
        if declared is None:  # an attribute
            continue
        implemented = getattr(backend, name)
        assert _parameters(implemented) == _parameters(declared), (
            f"{backend.__name__}.{name} differs from {protocol.__name__}.{name}"
        )


class _Ledger:
    def __init__(self) -> None:
        self.notes: list[tuple[str, list[str]]] = []

    def note(self, step: str, befores: Any) -> None:
        self.notes.append((step, [entry_id for entry_id, _ in befores]))


def _duplicates(store: MemoryStore) -> list[MemoryEntry]:
    return [
        store.create("Trish takes her tea with lemon.", now=T0),
        store.create("Trish takes her tea with lemon.", now=T0.replace(day=2)),
        store.create("Trish  takes her tea with lemon.", now=T0.replace(day=3)),
    ]


def test_a_fold_sums_once_and_a_retry_of_its_op_retires_the_same_copies(long_term: Any) -> None:
    store: MemoryStore = long_term.open("fold", clock=lambda: T0)
    oldest, *copies = _duplicates(store)
    (fold,) = exact_duplicate_folds(store.entries())
    ledger: IntentLog = _Ledger()
    retired = store.fold(fold, op="fold-1", reason=f"merged into {oldest.id}", ledger=ledger)
    assert sorted(retired) == sorted(c.id for c in copies)
    survivor = store.require(oldest.id)
    assert survivor.reinforcement_count == 3
    assert store.applied("fold-1") is not None
    # A retry (the activity ran again after a crash): the survivor is not summed again,
    # and the copies it recorded are reported as retired.
    again = store.fold(fold, op="fold-1", reason=f"merged into {oldest.id}", ledger=ledger)
    assert sorted(again) == sorted(retired)
    assert store.require(oldest.id) == survivor
    assert [step for step, _ in ledger.notes] == ["fold", "fold", "fold"]
    assert ledger.notes[0][1] == [oldest.id]


def test_archive_if_unchanged_refuses_an_entry_edited_since_it_was_shown(long_term: Any) -> None:
    store: MemoryStore = long_term.open("prune", clock=lambda: T0)
    shown = store.create("a passing remark about the weather")
    other = store.create("another passing remark")
    ledger = _Ledger()
    edited = store.update(other.id, content="another remark, edited since it was shown")
    assert not store.archive_if_unchanged(other.id, other.fingerprint, "ephemeral", ledger=ledger)
    assert store.require(other.id) == edited
    assert store.archive_if_unchanged(shown.id, shown.fingerprint, "ephemeral", ledger=ledger)
    assert store.require(shown.id).archive_reason == "ephemeral"
    # A retry finds it done for this reason; another reason is not this archive.
    assert store.archive_if_unchanged(shown.id, shown.fingerprint, "ephemeral", ledger=ledger)
    assert not store.archive_if_unchanged(shown.id, shown.fingerprint, "other", ledger=ledger)
    assert ledger.notes == [("prune", [shown.id])]
