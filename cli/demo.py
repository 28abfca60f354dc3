"""A short, narrated tour of the long-term store: save, search, archive, restore."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from dreamkeeper.core.settings import StoreSettings
from dreamkeeper.stores.backends import open_backend
from dreamkeeper.stores.search.query import format_hit, format_taxonomy, search

FACTS = [
    ("User lives in Chicago (America/Chicago, UTC-6).", "user-preferences/timezone", 0.9),
    ("User prefers short answers with code first.", "user-preferences/style", 0.7),
    ("Don't use search_files for content search; use grep.", "anti-patterns/file-operations", 0.8),
    ("The Blazor online class runs on Fridays at 12:30.", "project-context/blazor-class", 0.6),
]


def _step(title: str) -> None:
    print(f"\n== {title}")


def run_demo(*, keep: bool = False, data_dir: Path | None = None) -> Path:
    root = Path(data_dir) if data_dir else Path(tempfile.mkdtemp(prefix="dreamkeeper-demo-"))
    # A throwaway data directory of its own, whatever the environment names.
    store = open_backend(StoreSettings(data_dir=root)).memory("demo")
    now = store.now()
    print(f"Dreamkeeper demo: a throwaway store for agent 'demo' under {root}")

    _step("1. Save four facts (each becomes one JSON file under memory/{category}/)")
    ids = []
    for content, category, importance in FACTS:
        entry = store.create(
            content, category=category, importance=importance, metadata={"source": "user"}
        )
        ids.append(entry.id)
        print(f"saved [{entry.id}] {category}")

    _step("2. Search 'chicago timezone' (BM25 x importance)")
    for hit in search(store, "chicago timezone"):
        print(format_hit(hit.entry, now))

    _step("3. Browse with no query: most recently seen first, then the category taxonomy")
    for hit in search(store, None, limit=3):
        print(format_hit(hit.entry, now))
    print(format_taxonomy(store.categories()))

    _step(f"4. Archive [{ids[3]}]: hidden from search, still on disk, fetchable by id")
    store.archive(ids[3], "deleted by agent tool")
    print(f"search 'Blazor class' now finds {len(search(store, 'Blazor class'))} entries")
    archived = store.require(ids[3])
    print(
        f"but it is still there: archivedAt={archived.archived_at:%Y-%m-%d %H:%M}, "
        f"reason={archived.archive_reason!r}"
    )

    _step(f"5. Restore [{ids[3]}]")
    store.restore(ids[3])
    for hit in search(store, "Blazor class"):
        print(format_hit(hit.entry, now))

    _step("6. The journal: every change, with fingerprints, never the content")
    for record in store.changes():
        print(f"{record.at:%H:%M:%S} {record.action:<9} {record.id} {record.fingerprint}")

    if keep:
        print(f"\nThe store is kept at {root}; try: dreamkeeper --data {root} --agent demo search")
    elif data_dir is None:
        shutil.rmtree(root, ignore_errors=True)
        print("\nDemo store removed (pass --keep to keep it).")
    return root
