"""Bulk writes: `create_many` against one `create` per entry, in the same run.

    .venv/bin/python bench/bulk.py [--entries 10000]

Both write the same entries into fresh stores in a temp directory, with the same crash
guarantees (journal first, atomic files, recoverable; see docs/storage.md). Per-entry
`create` pays a lock, a journal fsync and two fsyncs per file; `create_many` one lock
hold, one journal batch and one filesystem sync per chunk of 1,000. Prints entries/s for
each and the ratio (target ≥ 10× at 10k).
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from dreamkeeper.stores.contract.records import NewEntry
from dreamkeeper.stores.files.memory_store import FileMemoryStore


def items(n: int) -> list[NewEntry]:
    return [
        NewEntry(
            f"Bulk note {i}: the Orion{i} build of {i % 97} passed.",
            category=f"bulk/{i % 10}",
            tags=("bench",),
        )
        for i in range(n)
    ]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--entries", type=int, default=10_000)
    args = parser.parse_args()
    todo = items(args.entries)
    with tempfile.TemporaryDirectory(prefix="dk-bulk-") as tmp:
        store = FileMemoryStore(Path(tmp) / "one", "bench")
        started = time.perf_counter()
        for item in todo:
            store.create(item.content, category=item.category, tags=item.tags)
        single = time.perf_counter() - started
        store = FileMemoryStore(Path(tmp) / "bulk", "bench")
        started = time.perf_counter()
        store.create_many(todo)
        bulk = time.perf_counter() - started
        assert len(FileMemoryStore(Path(tmp) / "bulk", "bench").entries()) == args.entries
    print(
        f"{args.entries} entries: create {args.entries / single:,.0f}/s ({single:.1f} s), "
        f"create_many {args.entries / bulk:,.0f}/s ({bulk:.1f} s): {single / bulk:.1f}x"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
