"""Hybrid search benchmark: BM25 + cosine over 384-dimension vectors against BM25 alone,
interleaved in the same run.

    .venv/bin/python bench/hybrid.py [--sizes 10000,100000] [--queries 200]

Corpora are the search bench's (bench/.data/corpus-N). Each entry gets a vector file in
the store's real format, clustered around 200 topics like real embeddings (so a query
has true neighbours above the 0.5 similarity floor). Query vectors are given directly:
what is measured is Dreamkeeper's ranking, not the embedding model's latency. Each size
runs in fresh processes, twice: opened from the files (every entry file parsed, every
vector file read by the first hybrid search) and from the caches (the index snapshot and
the memory-mapped vector pack, written by a preparing process). Each row: the open, the
first hybrid search (which loads the vectors), peak RSS, then hybrid and BM25 searches
interleaved on the same store. Targets: hybrid p50 <= 10 ms at 10k; at 100k from the
caches, open <= 2 s, first hybrid search <= 1 s, RSS <= 600 MB, BM25 p99 <= 25 ms.
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
from search import _percentile, build_corpus, queries

from dreamkeeper.stores.files.memory_store import FileMemoryStore
from dreamkeeper.stores.files.vector_files import write_vector
from dreamkeeper.stores.search.query import search
from dreamkeeper.stores.vectors.embedding_client import EmbeddingClient, EmbeddingSettings

DIM = 384
TOPICS = 200
NOISE = 0.6
MODEL = "bench-384"
AGENT = "bench"


def _settings() -> EmbeddingSettings:
    # Never called: the bench passes query vectors itself. The model names the vectors.
    return EmbeddingSettings(base_url="http://127.0.0.1:9/v1", model=MODEL)


def _centers() -> np.ndarray:
    return np.random.default_rng(1).standard_normal((TOPICS, DIM)).astype(np.float32)


def build_vectors(size: int) -> Path:
    root = build_corpus(size)
    done = root / ".vectors-complete"
    if done.exists():
        return root
    store = FileMemoryStore(root, AGENT)
    rng = np.random.default_rng(2)
    centers = _centers()
    key = _settings().model_key
    for i, entry in enumerate(sorted(store.entries(), key=lambda e: e.id)):
        vector = centers[i % TOPICS] + NOISE * rng.standard_normal(DIM).astype(np.float32)
        write_vector(store.embeddings_dir, entry.id, vector, entry.fingerprint, key)
    done.write_text("ok")
    return root


def _bm25_only(store: FileMemoryStore, text: str) -> list:
    """The same store searched by keywords alone (no query vector, no embedding call)."""
    embeddings, store.embeddings = store.embeddings, None
    try:
        return search(store, text)
    finally:
        store.embeddings = embeddings


def prepare(size: int) -> None:
    """Open once with the caches on, so the index snapshot and the vector pack exist."""
    store = FileMemoryStore(build_vectors(size), AGENT, embeddings=EmbeddingClient(_settings()))
    store.vectors(DIM)
    store.save_snapshot()


def measure(size: int, nq: int, cached: bool) -> dict:
    """One store, opened from the files (`cached` False) or from the index snapshot and
    the vector pack: open, first hybrid search, RSS, then hybrid and BM25 interleaved."""
    root = build_vectors(size)
    rng = np.random.default_rng(3)
    centers = _centers()
    texts = queries(nq)
    vectors = [centers[rng.integers(TOPICS)] + NOISE * rng.standard_normal(DIM) for _ in texts]
    t0 = time.perf_counter()
    store = FileMemoryStore(root, AGENT, embeddings=EmbeddingClient(_settings()), snapshots=cached)
    store.index()
    opened = time.perf_counter() - t0
    t0 = time.perf_counter()
    search(store, texts[0], query_vector=vectors[0])  # loads every vector
    first = time.perf_counter() - t0
    loaded = store.vectors(DIM)
    for text, vector in list(zip(texts, vectors, strict=True))[:10]:  # warm-up
        search(store, text, query_vector=vector)
        _bm25_only(store, text)
    hybrid, bm25, semantic_hits = [], [], []
    for text, vector in zip(texts, vectors, strict=True):
        t = time.perf_counter()
        hits = search(store, text, query_vector=vector)
        hybrid.append(time.perf_counter() - t)
        t = time.perf_counter()
        keyword = _bm25_only(store, text)
        bm25.append(time.perf_counter() - t)
        semantic_hits.append(len({h.entry.id for h in hits} - {h.entry.id for h in keyword}))
    return {
        "vectors": len(loaded) if loaded is not None else 0,
        "open_s": opened,
        "first_s": first,
        "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "hybrid_p50": 1e3 * statistics.median(hybrid),
        "hybrid_p99": 1e3 * _percentile(hybrid, 0.99),
        "bm25_p50": 1e3 * statistics.median(bm25),
        "bm25_p99": 1e3 * _percentile(bm25, 0.99),
        "semantic_only": statistics.mean(semantic_hits),
    }


def _child(size: int, nq: int, mode: str) -> dict:
    proc = subprocess.run(
        [sys.executable, __file__, "--child", mode, "--sizes", str(size), "--queries", str(nq)],
        check=True,
        capture_output=True,
        text=True,
    )
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="10000,100000")
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--child", choices=["prepare", "files", "cached"])
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    if args.child == "prepare":
        prepare(sizes[0])
        print("{}")
        return
    if args.child:
        print(json.dumps(measure(sizes[0], args.queries, args.child == "cached")))
        return
    print(
        f"{'entries':>8} {'opened from':>22} {'open':>7} {'1st hybrid':>10} {'RSS':>7} "
        f"{'hybrid p50':>10} {'p99':>8} {'BM25 p50':>9} {'p99':>8} {'ratio':>6} "
        f"{'found only by vectors':>22}"
    )
    for size in sizes:
        build_vectors(size)
        _child(size, args.queries, "prepare")
        for mode, label in (("files", "files (no caches)"), ("cached", "snapshot + vector pack")):
            r = _child(size, args.queries, mode)
            print(
                f"{size:>8} {label:>22} {r['open_s']:>6.2f}s {r['first_s']:>9.2f}s "
                f"{r['rss_mb']:>5.0f}MB {r['hybrid_p50']:>8.2f}ms {r['hybrid_p99']:>6.2f}ms "
                f"{r['bm25_p50']:>7.2f}ms {r['bm25_p99']:>6.2f}ms "
                f"{r['hybrid_p50'] / r['bm25_p50']:>5.2f}x {r['semantic_only']:>10.1f} per query"
            )


if __name__ == "__main__":
    main()
