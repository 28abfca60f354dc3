"""The change feed's size after N writes, with and without compaction: PostgreSQL's
feed table, or the file store's journal.

    nice -n 10 .venv/bin/python bench/feed.py [--writes 100000] [--entries 1000]
    nice -n 10 .venv/bin/python bench/feed.py --backend files [--writes 1000000] [--dir D]

One agent on a durable throwaway PostgreSQL (bench/postgres_backend.py): `--entries`
entries made in one bulk write, an index snapshot cached (as a dream's maintenance step
leaves it), then single writes up to `--writes` in all — each one transaction and one
feed row, as the write path makes them (importance changes, every tenth a content
update). Run twice, each in its own database: with compaction as shipped
(`stores.postgres.memory_store.compact_feed`: COMPACT_EVERY, FEED_KEEP, SNAPSHOT_LAG),
and with compaction off. Prints per run the feed's rows, `pg_total_relation_size` of
dk_memory_feed before and after a VACUUM, the writes/s, and that a store opened after
the run holds exactly the writer's entries (docs/scale.md, "The change feed").

With `--backend files` the same workload runs on a `FileMemoryStore` in a fresh directory
under `--dir` (default: the system's temp directory; the writes fsync as they always do,
so a tmpfs such as /dev/shm measures the sizes, which do not depend on it, faster), with
the journal's compaction as shipped (`stores.files.memory_store.compact_journal`:
COMPACT_BYTES, COMPACT_BYTES_PER_ENTRY) and off. Prints per run `journal.jsonl`'s size at
the end and its largest size during the run, the generations written, the writes/s, and
that a store opened afterwards holds exactly the writer's entries (docs/scale.md, "The
file journal").
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
import uuid
from pathlib import Path

import _repo_root  # noqa: F401  (puts the repo root on sys.path for tests.harness)

from dreamkeeper.stores.contract.records import NewEntry
from dreamkeeper.stores.files import memory_store as file_memory_store
from dreamkeeper.stores.files.memory_store import FileMemoryStore
from dreamkeeper.stores.postgres import memory_store
from dreamkeeper.stores.postgres.database import Database
from dreamkeeper.stores.postgres.memory_store import PostgresMemoryStore
from dreamkeeper.stores.postgres.migrations import upgrade

AGENT = "feed-bench"


def _seed(store, entries: int) -> list[str]:  # noqa: ANN001 - either backend's store
    """`entries` notes and the snapshot written after them: the store the writes churn."""
    made = store.create_many(
        NewEntry(f"Feed note {i}: the Orion{i} build of {i % 97} passed.") for i in range(entries)
    )
    assert store.save_snapshot()
    return [e.id for e in made]


def _write(store, ids: list[str], n: int) -> None:  # noqa: ANN001 - either backend's store
    """The n-th write: a rewrite one time in ten, else an importance change."""
    target = ids[n % len(ids)]
    if n % 10 == 9:
        store.update(target, content=f"Feed note {target} rewritten at write {n}.")
    else:
        store.update_importance(target, round(0.1 + (n % 80) / 100, 2))


def _size(db: Database) -> tuple[int, int]:
    row = db.fetch(
        "SELECT (SELECT count(*) FROM dk_memory_feed), pg_total_relation_size('dk_memory_feed')",
        (),
    )[0]
    return int(row[0]), int(row[1])


def run(url: str, writes: int, entries: int, compact: bool) -> dict[str, object]:
    if not compact:
        memory_store.COMPACT_EVERY = writes + entries + 1  # never crossed: no compaction
    db = Database(url, max_size=2)
    upgrade(db)
    store = PostgresMemoryStore(db, AGENT)
    ids = _seed(store, entries)
    started = time.perf_counter()
    for n in range(writes - entries):
        _write(store, ids, n)
    elapsed = time.perf_counter() - started
    rows, size = _size(db)
    with db.transaction() as conn:
        conn.autocommit = True
        conn.execute("VACUUM dk_memory_feed")
        conn.autocommit = False
    _, vacuumed = _size(db)
    fresh = PostgresMemoryStore(db, AGENT)
    same = {e.id: e for e in fresh.entries(include_archived=True)} == {
        e.id: e for e in store.entries(include_archived=True)
    }
    db.close()
    return {
        "compaction": "on" if compact else "off",
        "rows": rows,
        "bytes": size,
        "bytes after VACUUM": vacuumed,
        "writes/s": (writes - entries) / elapsed,
        "seconds": elapsed,
        "reopened store equal": same,
    }


def run_files(root: Path, writes: int, entries: int, compact: bool) -> dict[str, object]:
    if not compact:
        file_memory_store.COMPACT_BYTES = 1 << 62  # never reached: no compaction
    store = FileMemoryStore(root, AGENT)
    ids = _seed(store, entries)
    largest = store.journal.size()
    started = time.perf_counter()
    for n in range(writes - entries):
        _write(store, ids, n)
        largest = max(largest, store.feed_offset)  # the writer's offset: the journal's end
    elapsed = time.perf_counter() - started
    fresh = FileMemoryStore(root, AGENT)
    same = {e.id: e for e in fresh.entries(include_archived=True)} == {
        e.id: e for e in store.entries(include_archived=True)
    }
    return {
        "compaction": "on" if compact else "off",
        "bytes": store.journal.size(),
        "largest": largest,
        "generations": store.journal.generation(),
        "writes/s": (writes - entries) / elapsed,
        "seconds": elapsed,
        "reopened store equal": same,
        "opened from snapshot": fresh.opened_from_snapshot,
    }


def main_files(args: argparse.Namespace) -> int:
    for compact in (True, False):
        if args.only and args.only != ("on" if compact else "off"):
            continue
        root = Path(tempfile.mkdtemp(prefix="dk-feed-", dir=args.dir))
        try:
            result = run_files(root, args.writes, args.entries, compact)
        finally:
            shutil.rmtree(root, ignore_errors=True)
        print(
            f"files: {args.writes:,} writes ({args.entries:,} entries), compaction "
            f"{result['compaction']}: journal {result['bytes']:,} bytes (largest "
            f"{result['largest']:,}), {result['generations']} compactions, "
            f"{result['writes/s']:,.0f} writes/s ({result['seconds']:.0f} s), "
            f"reopened store equal: {result['reopened store equal']} "
            f"(from the snapshot: {result['opened from snapshot']})",
            flush=True,
        )
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--writes", type=int, default=100_000)
    parser.add_argument("--entries", type=int, default=1_000)
    parser.add_argument("--only", choices=["on", "off"], help="run one mode only")
    parser.add_argument("--backend", choices=["postgres", "files"], default="postgres")
    parser.add_argument("--dir", help="files: where the store's directory is made")
    args = parser.parse_args()
    if args.backend == "files":
        return main_files(args)
    from tests.harness.postgres import PostgresCluster, find_bindir

    bindir = find_bindir()
    if bindir is None:
        raise SystemExit("no PostgreSQL server binaries (install postgresql)")
    cluster = PostgresCluster(bindir, durable=True)
    cluster.start()
    try:
        for compact in (True, False):
            if args.only and args.only != ("on" if compact else "off"):
                continue
            url = cluster.create_database(f"dk_feed_{uuid.uuid4().hex[:8]}")
            result = run(url, args.writes, args.entries, compact)
            print(
                f"{args.writes:,} writes ({args.entries:,} entries), compaction "
                f"{result['compaction']}: {result['rows']:,} feed rows, "
                f"{result['bytes']:,} bytes ({result['bytes after VACUUM']:,} after VACUUM), "
                f"{result['writes/s']:,.0f} writes/s ({result['seconds']:.0f} s), "
                f"reopened store equal: {result['reopened store equal']}",
                flush=True,
            )
    finally:
        cluster.destroy()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
