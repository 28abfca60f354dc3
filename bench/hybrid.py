"""Hybrid search benchmark: BM25 + cosine over 384-dimension vectors against BM25 alone,
interleaved in the same run.

    .venv/bin/python bench/hybrid.py [--sizes 10000,100000] [--queries 200]

Corpora are the search bench's (bench/.data/corpus-N). Each entry gets a vector file in
the store's real format, clustered around 200 topics like real embeddings (so a query
has true neighbours above the 0.5 similarity floor). Query vectors are given directly:
what is measured is Dreamkeeper's ranking, not the embedding model's latency. Each size
runs in a fresh process; the first hybrid search loads every vector file into the
matrix, reported separately. Target: hybrid p50 <= 10 ms at 10k.
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

from dreamkeeper.stores.embedding_client import EmbeddingClient, EmbeddingSettings
from dreamkeeper.stores.memory_store import FileMemoryStore
from dreamkeeper.stores.search import search
from dreamkeeper.stores.vectors import write_vector

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


def measure(size: int, nq: int) -> dict:
    root = build_vectors(size)
    client = EmbeddingClient(_settings())
    hybrid_store = FileMemoryStore(root, AGENT, embeddings=client)
    bm25_store = FileMemoryStore(root, AGENT)
    hybrid_store.index()
    bm25_store.index()
    rng = np.random.default_rng(3)
    centers = _centers()
    texts = queries(nq)
    vectors = [centers[rng.integers(TOPICS)] + NOISE * rng.standard_normal(DIM) for _ in texts]
    t0 = time.perf_counter()
    loaded = hybrid_store.vectors(DIM)
    load = time.perf_counter() - t0
    for text, vector in list(zip(texts, vectors, strict=True))[:10]:  # warm-up
        search(hybrid_store, text, query_vector=vector)
        search(bm25_store, text)
    hybrid, bm25, semantic_hits = [], [], []
    for text, vector in zip(texts, vectors, strict=True):
        t = time.perf_counter()
        hits = search(hybrid_store, text, query_vector=vector)
        hybrid.append(time.perf_counter() - t)
        t = time.perf_counter()
        keyword = search(bm25_store, text)
        bm25.append(time.perf_counter() - t)
        semantic_hits.append(len({h.entry.id for h in hits} - {h.entry.id for h in keyword}))
    return {
        "vectors": len(loaded),
        "load_s": load,
        "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "hybrid_p50": 1e3 * statistics.median(hybrid),
        "hybrid_p99": 1e3 * _percentile(hybrid, 0.99),
        "bm25_p50": 1e3 * statistics.median(bm25),
        "semantic_only": statistics.mean(semantic_hits),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="10000,100000")
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--child", action="store_true")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    if args.child:
        print(json.dumps(measure(sizes[0], args.queries)))
        return
    print(
        f"{'entries':>8} {'vectors':>8} {'load':>7} {'RSS':>7} {'hybrid p50':>11} "
        f"{'p99':>8} {'BM25 p50':>9} {'ratio':>6} {'top-20 found only by vectors':>29}"
    )
    for size in sizes:
        build_vectors(size)
        proc = subprocess.run(
            [
                sys.executable,
                __file__,
                "--child",
                "--sizes",
                str(size),
                "--queries",
                str(args.queries),
            ],
            check=True,
            capture_output=True,
            text=True,
        )
        r = json.loads(proc.stdout.strip().splitlines()[-1])
        print(
            f"{size:>8} {r['vectors']:>8} {r['load_s']:>6.2f}s {r['rss_mb']:>5.0f}MB "
            f"{r['hybrid_p50']:>9.2f}ms {r['hybrid_p99']:>6.2f}ms {r['bm25_p50']:>7.2f}ms "
            f"{r['hybrid_p50'] / r['bm25_p50']:>5.2f}x {r['semantic_only']:>22.1f} per query"
        )


if __name__ == "__main__":
    main()
