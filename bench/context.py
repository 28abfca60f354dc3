"""Per-turn context benchmark: one turn's memory context with 10k long-term entries, 50
working-memory entries and a 500-turn conversation.

    .venv/bin/python bench/context.py [--entries 10000] [--turns 300]

Prints the builder's p50/p90/p99 per turn, the share of it spent in long-term search,
and — measured in the same run, interleaved turn by turn — the same context built the
obvious way: rank_bm25 over the corpus (model kept in memory), working-memory and
conversation files re-read every turn, and a fresh rank_bm25 over the hidden turns
(both BM25Okapi with Lucene's idf, as the index uses).
Target: p50 ≤ 10 ms.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import tempfile
import time
from pathlib import Path

from search import _percentile, _vocabulary, build_corpus, lucene_bm25, queries

from dreamkeeper.agent.context import ContextBuilder
from dreamkeeper.agent.out_of_window import content_words
from dreamkeeper.agent.session import SessionContext
from dreamkeeper.stores.files.conversation_memory import FileConversationStore
from dreamkeeper.stores.files.memory_store import FileMemoryStore
from dreamkeeper.stores.files.working_memory import FileWorkingMemoryStore
from dreamkeeper.stores.longterm.records import document_text
from dreamkeeper.stores.search.bm25 import query_terms, tokenize

AGENT = "bench"
SESSION = SessionContext.user("bench-session")


def prepare(entries: int, turns: int, seed: int = 7) -> Path:
    """A data dir whose long-term memory is the search bench's corpus (linked, not
    copied), plus fresh working memory and a conversation."""
    corpus = build_corpus(entries) / "agents" / AGENT / "memory"
    data = Path(tempfile.mkdtemp(prefix="dk-bench-context-"))
    (data / "agents" / AGENT).mkdir(parents=True)
    os.symlink(corpus, data / "agents" / AGENT / "memory")
    rng = random.Random(seed)
    vocab = _vocabulary(random.Random(seed))[:5000]
    working = FileWorkingMemoryStore(data, AGENT)
    for i in range(50):
        size = rng.choice([200, 1_000, 5_000])
        working.save(
            SESSION.namespace,
            f"payload-{i}",
            " ".join(rng.choices(vocab, k=size // 6)),
            ttl=None,
            category=rng.choice(["email", "web", "notes"]),
            tags=["bench"],
        )
    for i in range(10):
        working.save("patrol/heartbeat", f"finding-{i}", "finding text", background=True)
    for i in range(5):
        working.save(f"subagent/t{i}", "research-index", "index", background=True)
    conversations = FileConversationStore(data, AGENT)
    for i in range(turns):
        role = "user" if i % 2 == 0 else "assistant"
        conversations.add_turn(
            SESSION.conversation_id, role, " ".join(rng.choices(vocab, k=rng.randint(8, 80)))
        )
    return data


def messages(n: int) -> list[str]:
    return [f"Can you remind me about {q} and what we decided?" for q in queries(n)]


class ObviousBuilder:
    """The same context, built without Dreamkeeper's indexes and caches."""

    def __init__(self, data: Path) -> None:
        store = FileMemoryStore(data, AGENT)
        self.entries = store.entries()
        self.bm25 = lucene_bm25([tokenize(document_text(e)) for e in self.entries])
        self.root = data / "agents" / AGENT

    def build(self, message: str) -> tuple[list[dict], float]:
        started = time.perf_counter()
        scores = self.bm25.get_scores(list(dict.fromkeys(query_terms(message))))
        boosted = [
            (s * (0.5 + 0.5 * e.importance_score), e.id)
            for s, e in zip(scores.tolist(), self.entries, strict=True)
            if s > 0
        ]
        recalled = sorted(boosted, reverse=True)[:8]
        long_term = time.perf_counter() - started
        out = [{"role": "system", "content": "\n".join(i for _, i in recalled)}]
        for path in sorted((self.root / "working-memory").glob("*.json")):
            items = json.loads(path.read_text())["entries"]
            out.append({"role": "system", "content": "\n".join(e["key"] for e in items)})
        conv = self.root / "conversations"
        session = json.loads((conv / "sessions" / f"{SESSION.conversation_id}.json").read_text())
        archived = [
            json.loads(line)
            for line in (conv / "archive" / f"{SESSION.conversation_id}.jsonl")
            .read_text()
            .splitlines()
        ]
        turns = archived + session["turns"]
        hidden = turns[:-20]
        words = content_words(message)
        if hidden and words:
            turn_scores = lucene_bm25([tokenize(t["content"]) for t in hidden]).get_scores(words)
            best = sorted(range(len(hidden)), key=lambda i: -turn_scores[i])[:3]
            out.append({"role": "system", "content": "\n".join(hidden[i]["content"] for i in best)})
        out += [{"role": t["role"], "content": t["content"]} for t in turns[-20:]]
        return out, long_term


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--entries", type=int, default=10_000)
    parser.add_argument("--conversation", type=int, default=500)
    parser.add_argument("--turns", type=int, default=300, help="context builds measured")
    args = parser.parse_args()
    data = prepare(args.entries, args.conversation)
    store = FileMemoryStore(data, AGENT)
    t0 = time.perf_counter()
    store.index()
    cold = time.perf_counter() - t0
    builder = ContextBuilder(
        store, FileWorkingMemoryStore(data, AGENT), FileConversationStore(data, AGENT)
    )
    obvious = ObviousBuilder(data)
    texts = messages(args.turns + 20)
    for text in texts[:20]:  # warm-up
        builder.build(SESSION, text)
        obvious.build(text)
    ours, share, ours_lt, base, base_lt = [], [], [], [], []
    sizes = []
    for text in texts[20:]:
        started = time.perf_counter()
        context = builder.build(SESSION, text)
        ours.append(time.perf_counter() - started)
        ours_lt.append(context.timings["long_term"])
        share.append(context.timings["long_term"] / context.timings["total"])
        sizes.append(len(context.messages))
        started = time.perf_counter()
        _, lt = obvious.build(text)
        base.append(time.perf_counter() - started)
        base_lt.append(lt)
    conv = FileConversationStore(data, AGENT).conversation(SESSION.conversation_id)
    ms = lambda v: 1e3 * v  # noqa: E731
    print(
        f"corpus: {len(store)} long-term entries (cold open {cold:.2f} s), "
        f"{FileWorkingMemoryStore(data, AGENT).list().total} working entries, "
        f"{len(conv)} conversation turns ({len(conv.archived)} archived); "
        f"{len(ours)} turns measured, {statistics.mean(sizes):.0f} messages per context"
    )
    print(
        f"Dreamkeeper context build: p50 {ms(statistics.median(ours)):.2f} ms, "
        f"p90 {ms(_percentile(ours, 0.9)):.2f} ms, p99 {ms(_percentile(ours, 0.99)):.2f} ms "
        f"(target p50 <= 10 ms)"
    )
    print(
        f"  long-term search: p50 {ms(statistics.median(ours_lt)):.2f} ms, "
        f"median share of the build {100 * statistics.median(share):.0f}%"
    )
    print(
        f"obvious build (same run): p50 {ms(statistics.median(base)):.2f} ms "
        f"(long-term {ms(statistics.median(base_lt)):.2f} ms) -> Dreamkeeper is "
        f"{statistics.median(base) / statistics.median(ours):.1f}x faster"
    )


if __name__ == "__main__":
    main()
