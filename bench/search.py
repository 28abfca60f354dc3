"""Long-term search benchmark: Dreamkeeper's index against plain rank_bm25, same run.

    .venv/bin/python bench/search.py [--sizes 1000,10000,100000] [--queries 200]
    .venv/bin/python bench/search.py --backend postgres [--sizes ...]
    .venv/bin/python bench/search.py --engines   # also tantivy and bm25s (the bench extra)

For each corpus size (synthetic entries of realistic length over a Zipf vocabulary,
written once under bench/.data/) it prints two rows — the store opened from the files,
and from its index snapshot (written in between, timed) — each measured in a fresh
process:
  - cold open: constructing the store and loading every file into the index (or the
    snapshot, then the journal tail)
  - RSS after open (ru_maxrss)
  - search p50/p99 over the same queries
  - the same ranking done with `rank_bm25.BM25Okapi(...).get_scores` (given Lucene's idf,
    as the index uses) plus the same importance boost and phrase bonus (the plain
    baseline), its p50, and the ratio
  - whether both produce the same top-20 for every query
  - with --engines (the `bench` extra installed): Dreamkeeper, tantivy (search alone, and
    with the hits' texts read back) and bm25s in one process over the same entry texts,
    each query on each engine in turn, top 20 (the others by their own plain BM25):
    p50/p99, the memory each adds (resident set after building minus before), and
    Dreamkeeper's p50/p99 as a multiple of theirs

`--backend postgres` adds a row per size for a PostgreSQL store (a durable server started
for the run): the corpus imported on the bulk path (timed), one full open that writes the
snapshot row, then a fresh process opening cold from that row (the ≤ 2 s target at 100k)
and searching it and the file store query by query in turn; both p50s, and whether its
result ids equal the file store's for every query (identical ranking).
"""

from __future__ import annotations

import argparse
import json
import random
import resource
import statistics
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

DATA = Path(__file__).resolve().parent / ".data"
SEED = 20261202
CATEGORIES = [
    "user-preferences/style",
    "user-preferences/timezone",
    "user-preferences/tools",
    "project-context/dreamkeeper",
    "project-context/blazor-class",
    "project-context/infra",
    "anti-patterns/file-operations",
    "anti-patterns/email",
    "agent-knowledge/self-model",
    "agent-knowledge/infrastructure",
    "people/colleagues",
    "people/family",
    "travel/trips",
    "finance/accounts",
    "health/habits",
    "general",
]


def _vocabulary(rng: random.Random, size: int = 30_000) -> list[str]:
    syllables = [
        "ka",
        "lo",
        "mi",
        "ne",
        "ru",
        "sa",
        "ti",
        "vo",
        "zen",
        "tra",
        "bel",
        "dor",
        "an",
        "is",
        "el",
        "or",
        "un",
        "qua",
        "sto",
        "fin",
    ]
    words: set[str] = set()
    while len(words) < size:
        words.add("".join(rng.choice(syllables) for _ in range(rng.randint(2, 4))))
    return sorted(words, key=lambda w: (len(w), w))


def _zipf_weights(n: int, s: float = 1.07) -> list[float]:
    return [1.0 / (rank**s) for rank in range(1, n + 1)]


def corpus_dir(size: int) -> Path:
    return DATA / f"corpus-{size}"


def build_corpus(size: int) -> Path:
    """Write `size` entries as store files (no fsync: this is test data)."""
    from dreamkeeper.core.models import MemoryEntry

    root = corpus_dir(size)
    done = root / ".complete"
    if done.exists():
        return root
    rng = random.Random(SEED)
    vocab = _vocabulary(rng)
    weights = _zipf_weights(len(vocab))
    base = datetime(2025, 1, 1, tzinfo=UTC)
    memory = root / "agents" / "bench" / "memory"
    for i in range(size):
        words = rng.choices(vocab, weights, k=rng.randint(12, 60))
        content = " ".join(words).capitalize() + "."
        category = rng.choice(CATEGORIES)
        created = base + timedelta(minutes=rng.randint(0, 500_000))
        entry = MemoryEntry(
            id=f"{i:012x}",
            content=content,
            category=category,
            tags=rng.sample(vocab[:200], k=rng.randint(0, 3)),
            created_at=created,
            last_seen_at=created,
            importance_score=round(rng.uniform(0.1, 0.95), 2),
            metadata={"source": rng.choice(["user", "tool:web", "inferred"])},
        )
        path = memory / category / f"{entry.id}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(entry.to_json())
    done.write_text("ok")
    return root


def queries(n: int) -> list[str]:
    rng = random.Random(SEED + 1)
    vocab = _vocabulary(random.Random(SEED))
    weights = _zipf_weights(len(vocab))
    out = []
    for _ in range(n):
        # Mostly mid-frequency words, as in recall of a specific fact, plus common ones.
        words = rng.choices(vocab[20:5000], weights[20:5000], k=rng.randint(1, 3))
        words += rng.choices(vocab[:20], k=rng.randint(0, 1))
        out.append(" ".join(words))
    return out


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def write_snapshot(size: int) -> dict:
    """Open from the files and write the index snapshot (what a full open of a large store
    does by itself): how long writing it takes."""
    from dreamkeeper.stores.files.memory_store import FileMemoryStore

    store = FileMemoryStore(corpus_dir(size), "bench", snapshots=False)
    store.index()
    t0 = time.perf_counter()
    store.storage._snapshots = True
    assert store.save_snapshot()
    return {"write_s": time.perf_counter() - t0}


def measure_dreamkeeper(size: int, nq: int, cached: bool = False) -> dict:
    from dreamkeeper.stores.files.memory_store import FileMemoryStore

    root = corpus_dir(size)
    t0 = time.perf_counter()
    store = FileMemoryStore(root, "bench", snapshots=cached)
    store.index()
    cold = time.perf_counter() - t0
    assert store.opened_from_snapshot == cached
    rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    ((times, tops),) = _query_each(queries(nq), [store])
    return {
        "cold_s": cold,
        "rss_mb": rss_mb,
        "p50_ms": 1e3 * statistics.median(times),
        "p99_ms": 1e3 * _percentile(times, 0.99),
        "tops": tops,
    }


def _query_each(qs: list[str], stores: list) -> list[tuple[list[float], list[list[str]]]]:
    """Each query on each store in turn, after a warm-up: per store its times and ids."""
    from dreamkeeper.stores.search.query import search

    for q in qs[:10]:
        for store in stores:
            search(store, q)
    out: list[tuple[list[float], list[list[str]]]] = [([], []) for _ in stores]
    for q in qs:
        for store, (times, tops) in zip(stores, out, strict=True):
            t = time.perf_counter()
            hits = search(store, q)
            times.append(time.perf_counter() - t)
            tops.append([h.entry.id for h in hits])
    return out


def load_postgres(size: int, url: str) -> dict:
    """Import the corpus into the database on the bulk path, then open it once in full
    (which writes the snapshot row): how long each took."""
    from postgres_backend import open_store

    from dreamkeeper.stores.files.memory_store import FileMemoryStore

    entries = FileMemoryStore(corpus_dir(size), "bench").entries(include_archived=True)
    store = open_store(url, "bench", snapshots=False)
    t0 = time.perf_counter()
    report = store.import_entries(entries)
    imported = time.perf_counter() - t0
    assert len(report.created) + len(report.unchanged) == size, report.conflicts
    t0 = time.perf_counter()
    full = open_store(url, "bench")
    full.index()
    return {"import_s": imported, "full_open_s": time.perf_counter() - t0}


def measure_postgres(size: int, nq: int, url: str) -> dict:
    """Open the PostgreSQL store cold (from its snapshot row), then search it and the file
    store (opened from its snapshot) query by query in turn: load on the host hits both."""
    from postgres_backend import open_store

    from dreamkeeper.stores.files.memory_store import FileMemoryStore

    t0 = time.perf_counter()
    store = open_store(url, "bench")
    store.index()
    cold = time.perf_counter() - t0
    assert store.opened_from_snapshot
    rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    t0 = time.perf_counter()
    files = FileMemoryStore(corpus_dir(size), "bench")
    files.index()
    file_cold = time.perf_counter() - t0
    (times, tops), (file_times, file_tops) = _query_each(queries(nq), [store, files])
    return {
        "cold_s": cold,
        "rss_mb": rss_mb,
        "p50_ms": 1e3 * statistics.median(times),
        "p99_ms": 1e3 * _percentile(times, 0.99),
        "file_p50_ms": 1e3 * statistics.median(file_times),
        "file_cold_s": file_cold,
        "file_from_snapshot": files.opened_from_snapshot,
        "tops": tops,
        "file_tops": file_tops,
    }


def _rss_now_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize() / 1_048_576


def measure_engines(size: int, nq: int) -> dict:
    """Dreamkeeper (opened from its snapshot), tantivy and bm25s in one process over the
    same entry texts, each query run on every engine in turn (so load on the host hits
    them alike), top 20 each. The others rank by their own plain BM25 (no importance
    boost or phrase bonus). tantivy is timed twice: the search alone (addresses of the
    hits, as the issue measured it) and with the 20 hits' stored texts read back, which
    is what Dreamkeeper's search returns (whole entries). Memory: resident set after
    each index is built minus before, garbage collected. Needs the `bench` extra."""
    import gc

    import bm25s
    import tantivy

    from dreamkeeper.stores.files.memory_store import FileMemoryStore
    from dreamkeeper.stores.longterm.records import document_text
    from dreamkeeper.stores.search.query import search

    texts = [document_text(e) for e in FileMemoryStore(corpus_dir(size), "bench").entries()]
    qs = queries(nq)
    added: dict[str, float] = {}
    gc.collect()
    before = _rss_now_mb()
    store = FileMemoryStore(corpus_dir(size), "bench")
    store.index()
    assert store.opened_from_snapshot
    gc.collect()
    added["dreamkeeper"] = _rss_now_mb() - before
    before = _rss_now_mb()
    schema_builder = tantivy.SchemaBuilder()
    schema_builder.add_text_field("body", stored=True)
    schema = schema_builder.build()
    index = tantivy.Index(schema)
    writer = index.writer(heap_size=50_000_000, num_threads=1)
    for text in texts:
        writer.add_document(tantivy.Document(body=text))
    writer.commit()
    writer.wait_merging_threads()
    index.reload()
    searcher = index.searcher()
    gc.collect()
    added["tantivy"] = added["tantivy + texts"] = _rss_now_mb() - before
    before = _rss_now_mb()
    retriever = bm25s.BM25()
    retriever.index(bm25s.tokenize(texts, show_progress=False), show_progress=False)
    del texts
    gc.collect()
    added["bm25s"] = _rss_now_mb() - before

    def tantivy_search(q: str, texts: bool = False) -> None:
        hits = searcher.search(index.parse_query(q, ["body"]), 20).hits
        if texts:
            for _, address in hits:
                searcher.doc(address)

    engines = {
        "dreamkeeper": lambda q: search(store, q, limit=20),
        "tantivy": tantivy_search,
        "tantivy + texts": lambda q: tantivy_search(q, texts=True),
        "bm25s": lambda q: retriever.retrieve(
            bm25s.tokenize([q], show_progress=False), k=20, show_progress=False
        ),
    }
    times: dict[str, list[float]] = {name: [] for name in engines}
    for q in qs[:10]:
        for run in engines.values():
            run(q)
    for q in qs:
        for name, run in engines.items():
            t = time.perf_counter()
            run(q)
            times[name].append(time.perf_counter() - t)
    return {
        name: {
            "p50_ms": 1e3 * statistics.median(ts),
            "p99_ms": 1e3 * _percentile(ts, 0.99),
            "added_mb": added[name],
        }
        for name, ts in times.items()
    }


def lucene_bm25(docs: list[list[str]]):
    """rank_bm25's BM25Okapi with Lucene's idf, ln(1 + (N − n + 0.5) / (n + 0.5))."""
    import math

    from rank_bm25 import BM25Okapi

    class LuceneBM25(BM25Okapi):
        def _calc_idf(self, nd: dict[str, int]) -> None:
            for word, freq in nd.items():
                self.idf[word] = math.log(1 + (self.corpus_size - freq + 0.5) / (freq + 0.5))

    return LuceneBM25(docs)


def measure_baseline(size: int, nq: int) -> dict:
    """The same ranking with rank_bm25 doing the scoring, the obvious way."""
    from dreamkeeper.stores.files.memory_store import FileMemoryStore
    from dreamkeeper.stores.longterm.records import document_text
    from dreamkeeper.stores.search.bm25 import has_phrase, query_phrases, query_terms, tokenize

    store = FileMemoryStore(corpus_dir(size), "bench", snapshots=False)
    entries = store.entries()
    docs = [tokenize(document_text(e)) for e in entries]
    bm25 = lucene_bm25(docs)
    times, tops = [], []
    for q in queries(nq):
        t = time.perf_counter()
        toks = query_terms(q)
        scores = bm25.get_scores(list(dict.fromkeys(toks)))  # each query word once
        phrases = query_phrases(toks)
        ranked = []
        for i, base in enumerate(scores):
            if base <= 0:
                continue
            factor = 0.5 + 0.5 * entries[i].importance_score
            if phrases and any(has_phrase(docs[i], p) for p in phrases):
                factor *= 2.0
            e = entries[i]  # ties as the store orders them: last seen, content, id
            ranked.append((-base * factor, -e.last_seen_at.timestamp(), e.content, e.id))
        ranked.sort()
        times.append(time.perf_counter() - t)
        tops.append([r[-1] for r in ranked[:20]])
    return {"p50_ms": 1e3 * statistics.median(times), "tops": tops}


def _child(kind: str, size: int, nq: int, url: str = "") -> dict:
    proc = subprocess.run(
        [
            *(sys.executable, __file__, "--child", kind, "--sizes", str(size)),
            *("--queries", str(nq), "--url", url),
        ],
        check=True,
        capture_output=True,
        text=True,
    )
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", default="1000,10000,100000")
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--baseline-queries-100k", type=int, default=10)
    parser.add_argument(
        "--child",
        choices=["dreamkeeper", "snapshot", "write", "baseline", "engines", "pg-load", "postgres"],
    )
    parser.add_argument(
        "--engines", action="store_true", help="also tantivy and bm25s (the bench extra)"
    )
    parser.add_argument("--backend", choices=["files", "postgres"], default="files")
    parser.add_argument("--url", default="")
    parser.add_argument(
        "--postgres-only",
        action="store_true",
        help="with --backend postgres: only the PostgreSQL rows (the file store is still "
        "searched in turn with it), no rank_bm25 baseline or file-open rows",
    )
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    if args.child:
        size, nq = sizes[0], args.queries
        if args.child == "pg-load":
            print(json.dumps(load_postgres(size, args.url)))
        elif args.child == "postgres":
            print(json.dumps(measure_postgres(size, nq, args.url)))
        elif args.child == "write":
            print(json.dumps(write_snapshot(size)))
        elif args.child == "baseline":
            print(json.dumps(measure_baseline(size, nq)))
        elif args.child == "engines":
            print(json.dumps(measure_engines(size, nq)))
        else:
            print(json.dumps(measure_dreamkeeper(size, nq, cached=args.child == "snapshot")))
        return
    if args.backend == "postgres":
        from postgres_backend import database_url

        with database_url() as url:
            run(sizes, args, url)
    else:
        run(sizes, args, "")


def run(sizes: list[int], args: argparse.Namespace, url: str) -> None:
    print(
        f"{'entries':>8} {'opened from':>12} {'cold open':>10} {'RSS':>8} {'p50':>9} {'p99':>9} "
        f"{'rank_bm25 p50':>14} {'speed-up':>9} {'same top-20':>12}"
    )
    for size in sizes:
        build_corpus(size)
        if args.postgres_only:
            _postgres_rows(size, args, url)
            continue
        nq = args.queries if size <= 10_000 else args.baseline_queries_100k
        base = _child("baseline", size, nq)
        files = _child("dreamkeeper", size, args.queries)
        wrote = _child("write", size, args.queries)
        snap = _child("snapshot", size, args.queries)
        for label, ours in (("files", files), ("snapshot", snap)):
            same = sum(a == b for a, b in zip(ours["tops"], base["tops"], strict=False))
            print(
                f"{size:>8} {label:>12} {ours['cold_s']:>9.2f}s {ours['rss_mb']:>6.0f}MB "
                f"{ours['p50_ms']:>7.2f}ms {ours['p99_ms']:>7.2f}ms {base['p50_ms']:>12.2f}ms "
                f"{base['p50_ms'] / ours['p50_ms']:>8.1f}x {same:>5}/{len(base['tops'])}"
            )
        print(
            f"{'':>8} snapshot written in {wrote['write_s']:.2f}s; cold open from it "
            f"{files['cold_s'] / snap['cold_s']:.1f}x faster than from the files"
        )
        if args.engines:
            rows = _child("engines", size, args.queries)
            ours = rows.pop("dreamkeeper")
            print(
                f"{'':>8} engines in one process, each query on each in turn: Dreamkeeper "
                f"p50 {ours['p50_ms']:.2f}ms p99 {ours['p99_ms']:.2f}ms, open store adds "
                f"{ours['added_mb']:.0f}MB"
            )
            for name, row in rows.items():
                print(
                    f"{'':>8} {name}: p50 {row['p50_ms']:.2f}ms p99 {row['p99_ms']:.2f}ms, "
                    f"index adds {row['added_mb']:.0f}MB; Dreamkeeper p50 "
                    f"{ours['p50_ms'] / row['p50_ms']:.2f}x and p99 "
                    f"{ours['p99_ms'] / row['p99_ms']:.2f}x its"
                )
        if url:
            _postgres_rows(size, args, url, base)


def _postgres_rows(size: int, args: argparse.Namespace, url: str, base: dict | None = None) -> None:
    # Each size is its own agent's corpus: a fresh database per size keeps them apart.
    loaded = _child("pg-load", size, args.queries, _fresh_database(url, size))
    pg = _child("postgres", size, args.queries, _fresh_database(url, size, make=False))
    same_ranking = sum(a == b for a, b in zip(pg["tops"], pg["file_tops"], strict=True))
    if base is not None:
        same = sum(a == b for a, b in zip(pg["tops"], base["tops"], strict=False))
        print(
            f"{size:>8} {'postgres':>12} {pg['cold_s']:>9.2f}s {pg['rss_mb']:>6.0f}MB "
            f"{pg['p50_ms']:>7.2f}ms {pg['p99_ms']:>7.2f}ms {base['p50_ms']:>12.2f}ms "
            f"{base['p50_ms'] / pg['p50_ms']:>8.1f}x {same:>5}/{len(base['tops'])}"
        )
    print(
        f"{size:>8} postgres: imported in {loaded['import_s']:.2f}s, first full open "
        f"{loaded['full_open_s']:.2f}s (writes the snapshot row); cold open from it "
        f"{pg['cold_s']:.2f}s (target <= 2 s at 100k; the file store then opened in "
        f"{pg['file_cold_s']:.2f}s, from its snapshot: {pg['file_from_snapshot']}); search p50 {pg['p50_ms']:.2f} ms "
        f"(p99 {pg['p99_ms']:.2f} ms) against the file store's {pg['file_p50_ms']:.2f} ms "
        f"queried in turn: {pg['p50_ms'] / pg['file_p50_ms']:.2f}x (target <= 1.2x); same "
        f"result ids as the file store for {same_ranking}/{len(pg['tops'])} queries"
    )


def _fresh_database(url: str, size: int, *, make: bool = True) -> str:
    """The URL of database `dk_search_{size}` on the server of `url` (created if `make`)."""
    import psycopg
    from psycopg import conninfo

    from dreamkeeper.stores.postgres.database import Database
    from dreamkeeper.stores.postgres.migrations import upgrade

    name = f"dk_search_{size}"
    parts = conninfo.conninfo_to_dict(url)
    target = conninfo.make_conninfo(url, dbname=name)
    if make:
        with psycopg.connect(conninfo.make_conninfo(url, dbname="postgres"), autocommit=True) as c:
            c.execute(f'DROP DATABASE IF EXISTS "{name}"')
            c.execute(f'CREATE DATABASE "{name}"')
        db = Database(target, max_size=1)
        upgrade(db)
        db.close()
    assert parts.get("dbname")
    return target


if __name__ == "__main__":
    main()
