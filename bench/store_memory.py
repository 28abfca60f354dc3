"""Memory a large long-term store adds once open from its index snapshot.

    .venv/bin/python bench/store_memory.py [--sizes 10000,100000] [--queries 200]
    .venv/bin/python bench/store_memory.py --backend postgres [--sizes ...]

Over bench/search.py's corpus (built under bench/.data/ on first use; a snapshot of an
older format is refused and rewritten by the first open), each figure measured in a
fresh process as resident memory after minus before, both after a garbage collection:
  - store: `FileMemoryStore` opened from its index snapshot, index built (what a worker
    holds for an agent it has served once)
  - after N searches: the same, after N searches (entries read are parsed and kept)
  - baseline: a plain dict of every entry, parsed (`MemoryEntry`), and nothing else —
    what holding the entries as objects costs, without any index
and the store's figure as a share of the baseline's. `--trace` also prints the largest
allocation sites left after the open (tracemalloc; slower); `--dump PREFIX` writes each
query's top 20 (id, score) to PREFIX.{size}.json, to compare rankings across versions.
`--backend postgres` adds a row per size for a PostgreSQL store (a server started for the
run): the corpus imported on the bulk path, one full open that writes the snapshot row,
then the memory a fresh process adds opening from that row (its entries' JSON is held in
memory there, compressed in blocks).
"""

from __future__ import annotations

import argparse
import gc
import json
import resource
import subprocess
import sys
from pathlib import Path

from search import build_corpus, corpus_dir, queries


def _rss_mb() -> float:
    gc.collect()
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize() / 1_048_576


def prepare(size: int) -> dict:
    """The corpus and a snapshot of the current format (a full open writes it)."""
    from dreamkeeper.stores.files.memory_store import FileMemoryStore

    build_corpus(size)
    store = FileMemoryStore(corpus_dir(size), "bench")
    store.index()
    return {"rewritten": not store.opened_from_snapshot}


def measure_store(size: int, nq: int, trace: bool, dump: str) -> dict:
    from dreamkeeper.stores.files.memory_store import FileMemoryStore
    from dreamkeeper.stores.search.query import search

    qs = queries(nq)
    if trace:  # tracemalloc's own bookkeeping inflates the RSS: a run of its own
        import tracemalloc

        tracemalloc.start()
    before = _rss_mb()
    store = FileMemoryStore(corpus_dir(size), "bench")
    store.index()
    opened = _rss_mb() - before
    assert store.opened_from_snapshot, "no snapshot of the current format"
    top: list[str] = []
    if trace:
        import tracemalloc

        stats = tracemalloc.take_snapshot().statistics("lineno")
        top = [f"{s.size / 1_048_576:7.1f} MB {s.traceback[0]}" for s in stats[:12]]
        tracemalloc.stop()
    ranked = [[(h.entry.id, h.score) for h in search(store, q, limit=20)] for q in qs]
    searched = _rss_mb() - before
    if dump:
        Path(dump).write_text(json.dumps(ranked))
    return {"opened_mb": opened, "searched_mb": searched, "top": top}


def load_postgres(size: int, url: str) -> dict:
    from postgres_backend import open_store

    from dreamkeeper.stores.files.memory_store import FileMemoryStore

    entries = FileMemoryStore(corpus_dir(size), "bench").entries(include_archived=True)
    open_store(url, "bench", snapshots=False).import_entries(entries)
    open_store(url, "bench").index()  # a full open: writes the snapshot row
    return {}


def measure_postgres(url: str) -> dict:
    from postgres_backend import open_store

    import dreamkeeper.stores.search.query  # noqa: F401 - imported before measuring

    before = _rss_mb()
    store = open_store(url, "bench")
    store.index()
    assert store.opened_from_snapshot
    return {"opened_mb": _rss_mb() - before}


def measure_baseline(size: int) -> dict:
    from dreamkeeper.core.models import MemoryEntry

    paths = sorted((corpus_dir(size) / "agents" / "bench" / "memory").rglob("*.json"))
    before = _rss_mb()
    held: dict[str, MemoryEntry] = {}
    for path in paths:
        entry = MemoryEntry.from_json(path.read_bytes())
        held[entry.id] = entry
    added = _rss_mb() - before
    assert len(held) == size
    return {"added_mb": added}


def _child(kind: str, size: int, args: argparse.Namespace) -> dict:
    command = [sys.executable, __file__, "--child", kind, "--sizes", str(size)]
    command += ["--queries", str(args.queries), *(["--trace"] if args.trace else [])]
    if args.url:
        command += ["--url", args.url]
    if args.dump and not args.trace:
        command += ["--dump", f"{args.dump}.{size}.json"]
    proc = subprocess.run(command, check=True, capture_output=True, text=True)
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", default="10000,100000")
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--trace", action="store_true", help="print the largest allocations")
    parser.add_argument(
        "--dump", default="", help="write each query's top 20 (id, score) to this JSON file"
    )
    parser.add_argument("--backend", choices=["files", "postgres"], default="files")
    parser.add_argument("--url", default="")
    parser.add_argument("--child", choices=["prepare", "store", "baseline", "pg-load", "pg"])
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    if args.child == "prepare":
        print(json.dumps(prepare(sizes[0])))
        return
    if args.child == "store":
        print(json.dumps(measure_store(sizes[0], args.queries, args.trace, args.dump)))
        return
    if args.child == "baseline":
        print(json.dumps(measure_baseline(sizes[0])))
        return
    if args.child == "pg-load":
        print(json.dumps(load_postgres(sizes[0], args.url)))
        return
    if args.child == "pg":
        print(json.dumps(measure_postgres(args.url)))
        return
    print(
        f"{'entries':>8} {'store open':>11} {f'after {args.queries} searches':>20} "
        f"{'dict of entries':>16} {'store / dict':>13}"
    )
    for size in sizes:
        _child("prepare", size, args)
        store = _child("store", size, argparse.Namespace(**{**vars(args), "trace": False}))
        if args.trace:
            store["top"] = _child("store", size, args)["top"]
        base = _child("baseline", size, args)
        print(
            f"{size:>8} {store['opened_mb']:>8.1f} MB {store['searched_mb']:>17.1f} MB "
            f"{base['added_mb']:>13.1f} MB {store['opened_mb'] / base['added_mb']:>12.2f}x"
        )
        for line in store["top"]:
            print(f"{'':>8} {line}")
        if args.backend == "postgres":
            from postgres_backend import database_url

            with database_url() as url:
                on_db = argparse.Namespace(**{**vars(args), "trace": False, "url": url})
                _child("pg-load", size, on_db)
                pg = _child("pg", size, on_db)
            print(
                f"{'postgres':>8} {pg['opened_mb']:>8.1f} MB {'':>20} {'':>16} "
                f"{pg['opened_mb'] / base['added_mb']:>12.2f}x"
            )


if __name__ == "__main__":
    main()
