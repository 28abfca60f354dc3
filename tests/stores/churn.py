"""Writes of every kind on a long-term store, and what it holds, for the tests that
compact a store's change feed (the file journal, the PostgreSQL feed table)."""

from __future__ import annotations

from dreamkeeper.stores.contract.memory import MemoryStore


def state(store: MemoryStore) -> dict[str, tuple[int, str, bool]]:
    """Every entry, archived ones too: revision, content, archived."""
    return {
        e.id: (e.revision, e.content, e.archived_at is not None)
        for e in store.entries(include_archived=True)
    }


def churn(store: MemoryStore, writes: int, tag: str) -> list[str]:
    """`writes` writes of every kind: creates, updates, archives and restores."""
    ids: list[str] = []
    for n in range(writes):
        if n % 4 == 0 or not ids:
            ids.append(store.create(f"{tag} fact number {n} about Quorvath").id)
        elif n % 4 == 3:
            target = ids[n % len(ids)]
            current = store.get(target)
            assert current is not None
            if current.archived_at is None:
                store.archive(target, "set aside in the test")
            else:
                store.restore(target, force=True)
        else:
            target = ids[n % len(ids)]
            store.update(target, content=f"{tag} fact {target} rewritten at {n} Quorvath")
    return ids
