"""Save-time deduplication: is a new fact a new entry, a reinforcement, or an extension?

A near-duplicate (cosine ≥ 0.88 where both texts have an embedding, Jaccard ≥ 0.60 over
content tokens otherwise) is only where the question starts; similarity cannot tell
"Bob's phone is 555-1234" from "…555-9876". The outcome is decided sentence by sentence
(`covers`): a sentence is covered by another when every one of its fact words and every
one of its specifics is in it, and both say the same about negation and tense.

- **Reinforced**: every sentence of the candidate is covered by one sentence of the
  existing entry — the candidate adds nothing, so the same fact was seen again.
- **Extended**: every sentence of the existing entry is covered by one sentence of the
  candidate, which adds something — the candidate restates the whole fact and adds a
  detail, replacing nothing.
- **Created** otherwise: a different value for the same thing (it drops the old value),
  a reworded partial overlap, a paraphrase in other words.

Biased toward Created: a wrongly separate entry costs a duplicate until a dream merges
it; a wrong reinforcement or extension glues two facts together and counts a fact
never repeated toward the high-value floor.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection, Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime

import numpy as np

from dreamkeeper.core.models import SOURCE_KEY, MemoryEntry
from dreamkeeper.core.payloads import DedupOutcome
from dreamkeeper.core.validation import cap_metadata, cap_tags
from dreamkeeper.policies.coverage import (
    ABBREVIATIONS,
    DEFAULT_VOCABULARY,
    Source,
    Vocabulary,
    find_missing_specifics,
)
from dreamkeeper.policies.provenance import combined_source, reinforced_source

JACCARD_THRESHOLD = 0.60
COSINE_THRESHOLD = 0.88
MAX_EXTENDED_CHARS = 2_000
# How many near-duplicates a save is compared with, most similar first: enough for the
# ties of one subject's versions, bounded so a save's cost does not grow with them.
MAX_COMPARED = 8
BYPASS_PREFIXES = ("feedback", "claim/capability")
_CONTENT_TOKEN = re.compile(r"[a-z0-9']+")
# Words that only glue a sentence together: a repeat may add or drop them. Deliberately
# short — pronouns, prepositions ("to" vs "from"), quantifiers and modals change what a
# sentence says, so they are fact words; present-tense "is/has/does" are glue, their past
# forms are markers (below).
FILLER_WORDS = frozenset(
    "a an the am is are be been being has have having do does and of that which who it".split()
)
# Negation and tense: "Bob is not the CEO" and "Bob was the CEO" are not "Bob is the
# CEO". Compared both ways: a repeat must carry exactly the markers of what it repeats.
MARKER_WORDS = frozenset("not no never nor was were had did will".split())
_FACT_WORD = re.compile(r"[^\W_]+(?:['’][^\W_]+)*")
_SENTENCE_BREAK = re.compile(r"(?<=[.!?;])\s+|\s*\n\s*")
_IRREGULAR_NEGATIONS = {"ca": "can", "wo": "will", "sha": "shall"}


@dataclass(frozen=True)
class Candidate:
    content: str
    category: str | None
    tags: tuple[str, ...] = ()
    metadata: tuple[tuple[str, str], ...] = ()
    importance: float = 0.5

    @property
    def source(self) -> str | None:
        return dict(self.metadata).get(SOURCE_KEY)


@dataclass(frozen=True)
class DedupDecision:
    outcome: DedupOutcome
    updated: MemoryEntry | None = None  # the existing entry as it should be written
    similarity: float = 0.0


def content_tokens(text: str) -> frozenset[str]:
    """Jaccard tokens: runs of [a-z0-9'] longer than three characters."""
    return frozenset(t for t in _CONTENT_TOKEN.findall(text.lower()) if len(t) > 3)


def fact_words(text: str) -> frozenset[str]:
    """The words a repeat must carry: lowercased, possessive "'s" stripped, "n't" read as
    "not" (doesn't → does not), filler words dropped. Numbers are words too, one digit
    included."""
    out: set[str] = set()
    for m in _FACT_WORD.finditer(text.lower().replace("’", "'")):
        word = m.group(0)
        if word.endswith("'s"):
            word = word[:-2]
        elif word.endswith("n't"):
            base = word[:-3]
            out.add("not")
            word = _IRREGULAR_NEGATIONS.get(base, base)
        elif word == "cannot":
            out.add("not")
            word = "can"
        if word and word not in FILLER_WORDS:
            out.add(word)
    return frozenset(out)


@dataclass(frozen=True)
class _Sentence:
    text: str
    words: frozenset[str]

    @property
    def markers(self) -> frozenset[str]:
        return self.words & MARKER_WORDS


def _sentences(text: str) -> list[_Sentence]:
    """Split at . ! ? ; followed by space, and at line breaks — not after "Dr." or "e.g."."""
    pieces: list[str] = []
    pending = ""
    for piece in _SENTENCE_BREAK.split(text):
        pending = f"{pending} {piece}" if pending else piece
        last = pending.split()[-1].lower() if pending.split() else ""
        if last not in ABBREVIATIONS:
            pieces.append(pending)
            pending = ""
    if pending:
        pieces.append(pending)
    return [_Sentence(p, fact_words(p)) for p in pieces if p.strip()]


def covers(
    container: str,
    text: str,
    category: str | None = None,
    vocabulary: Vocabulary = DEFAULT_VOCABULARY,
) -> bool:
    """Does `container` already say everything `text` says? Every sentence of `text` must
    be covered by one sentence of `container`: its fact words a subset, the same negation
    and tense markers, and every specific (names, acronyms, every number — one digit
    included —, dates, identifiers, emails, URLs, handles, phones) in it. One sentence,
    not the whole container: an entry stating "Bob's phone is 555-1234. Alice's is
    555-9876." does not cover "Bob's phone is 555-9876"."""
    targets = _sentences(container)
    index: dict[str, set[int]] = {}
    for i, target in enumerate(targets):
        for word in target.words:
            index.setdefault(word, set()).add(i)
    everywhere = set(range(len(targets)))
    verbatim = {" ".join(t.text.split()) for t in targets}
    for sentence in _sentences(text):
        if " ".join(sentence.text.split()) in verbatim:
            continue  # the same sentence: covered, without the slower specifics check
        # Only sentences holding every word of this one can cover it: the rarest first.
        possible = everywhere
        for word in sorted(sentence.words, key=lambda w: len(index.get(w, ()))):
            possible = possible & index.get(word, set())
            if not possible:
                return False
        if not any(
            targets[i].markers == sentence.markers
            and not find_missing_specifics(
                [Source(sentence.text, category)],
                targets[i].text,
                vocabulary,
                every_number=True,
            )
            for i in possible
        ):
            return False
    return True


def jaccard(a: frozenset[str], b: frozenset[str]) -> float:
    if not a and not b:
        return 0.0
    return len(a & b) / len(a | b)


def bypasses_dedup(category: str | None) -> bool:
    if category is None:
        return False
    cat = category.lower()
    return any(cat == p or cat.startswith(p + "/") for p in BYPASS_PREFIXES)


def same_scope(a: str | None, b: str | None) -> bool:
    """Same top-level category; no category matches only uncategorized."""
    top = lambda c: None if c is None else c.split("/", 1)[0].lower()  # noqa: E731
    return top(a) == top(b)


def _scored(
    candidate: Candidate,
    entries: Iterable[MemoryEntry],
    tokens_of: Callable[[MemoryEntry], frozenset[str]],
    candidate_vector: np.ndarray | None,
    vector_of: Callable[[MemoryEntry], np.ndarray | None],
) -> Iterator[tuple[MemoryEntry, float, float]]:
    """Each current entry in the candidate's scope, its similarity and the threshold that
    applies: cosine (0.88) where both have a vector, else Jaccard (0.60). A superseded
    entry is history: a save repeating its old value is that value again (a change
    back), a new entry — never a reinforcement of the replaced version."""
    wanted = content_tokens(candidate.content)
    query = None if candidate_vector is None else _unit(candidate_vector)
    for entry in entries:
        if not entry.is_current or not same_scope(entry.category, candidate.category):
            continue
        vector = vector_of(entry) if query is not None else None
        if vector is not None and query is not None and vector.shape == query.shape:
            yield entry, float(_unit(vector) @ query), COSINE_THRESHOLD
        else:
            yield entry, jaccard(wanted, tokens_of(entry)), JACCARD_THRESHOLD


def closest(
    candidate: Candidate,
    entries: Iterable[MemoryEntry],
    tokens_of: Callable[[MemoryEntry], frozenset[str]] = lambda e: content_tokens(e.content),
    *,
    candidate_vector: np.ndarray | None = None,
    vector_of: Callable[[MemoryEntry], np.ndarray | None] = lambda e: None,
) -> tuple[MemoryEntry | None, float, float]:
    """The live entry in the candidate's scope it most resembles, the similarity, and the
    threshold that applies to it: cosine (0.88) where both have a vector, else Jaccard
    over content tokens (0.60). Entries are compared by similarity over threshold, so
    the two measures meet on one scale."""
    best, best_score, best_threshold, best_ratio = None, 0.0, JACCARD_THRESHOLD, 0.0
    for entry, score, threshold in _scored(
        candidate, entries, tokens_of, candidate_vector, vector_of
    ):
        ratio = score / threshold
        if ratio > best_ratio or (ratio == best_ratio and best is not None and entry.id < best.id):
            best, best_score, best_threshold, best_ratio = entry, score, threshold, ratio
    return best, best_score, best_threshold


def near_duplicates(
    candidate: Candidate,
    entries: Iterable[MemoryEntry],
    tokens_of: Callable[[MemoryEntry], frozenset[str]] = lambda e: content_tokens(e.content),
    *,
    candidate_vector: np.ndarray | None = None,
    vector_of: Callable[[MemoryEntry], np.ndarray | None] = lambda e: None,
    limit: int = MAX_COMPARED,
) -> list[tuple[MemoryEntry, float, float]]:
    """The entries at or above their threshold (as `closest` scores them), most similar
    first, at most `limit`. Ties are common — numbers shorter than four characters are
    no Jaccard tokens, so "team has 3 people" and "team has 20 people" both score 1.0
    against either — and are broken by shared fact words, then by id."""
    above = [
        (entry, score, threshold)
        for entry, score, threshold in _scored(
            candidate, entries, tokens_of, candidate_vector, vector_of
        )
        if score >= threshold
    ]
    words = fact_words(candidate.content)
    above.sort(key=lambda m: (-m[1] / m[2], -jaccard(words, fact_words(m[0].content)), m[0].id))
    return above[:limit]


def decide_best(
    candidate: Candidate,
    near: Sequence[tuple[MemoryEntry, float, float]],
    now: datetime,
    *,
    vocabulary: Vocabulary = DEFAULT_VOCABULARY,
    max_extended_chars: int = MAX_EXTENDED_CHARS,
    touched: Collection[str] = (),
) -> tuple[MemoryEntry | None, DedupDecision]:
    """`decide` against each near-duplicate (`near_duplicates`), most similar first: the
    first that the candidate repeats is reinforced; else the first it extends is
    extended; else the candidate is Created. A repeat anywhere wins over an extension,
    which would only copy the fact into a second entry. `touched`: entries this save
    already reinforced, which are not counted again."""
    extension: tuple[MemoryEntry, DedupDecision] | None = None
    for entry, similarity, threshold in near:
        decision = decide(
            candidate,
            entry,
            similarity,
            now,
            threshold=threshold,
            vocabulary=vocabulary,
            max_extended_chars=max_extended_chars,
            count=entry.id not in touched,
        )
        if decision.outcome is DedupOutcome.REINFORCED:
            return entry, decision
        if decision.outcome is DedupOutcome.EXTENDED and extension is None:
            extension = (entry, decision)
    if extension is not None:
        return extension
    return None, DedupDecision(DedupOutcome.CREATED, similarity=near[0][1] if near else 0.0)


def _unit(vector: np.ndarray) -> np.ndarray:
    norm = float(np.linalg.norm(vector))
    return vector / norm if norm > 0 else vector


def decide(
    candidate: Candidate,
    match: MemoryEntry | None,
    similarity: float,
    now: datetime,
    *,
    threshold: float = JACCARD_THRESHOLD,
    vocabulary: Vocabulary = DEFAULT_VOCABULARY,
    max_extended_chars: int = MAX_EXTENDED_CHARS,
    count: bool = True,
) -> DedupDecision:
    """`count=False`: the match was already reinforced by the same save (one save
    counts once), so the sighting is not counted again; an extension still applies."""
    if match is None or similarity < threshold or bypasses_dedup(candidate.category):
        return DedupDecision(DedupOutcome.CREATED, similarity=similarity)
    # Combined within the store's limits (32 tags, 32 metadata keys; the match's own
    # first): a union past them would make the write below fail half-way through a save.
    tags = cap_tags([*match.tags, *candidate.tags])
    metadata = dict(match.metadata)
    for key, value in candidate.metadata:
        metadata.setdefault(key, value)
    common = {
        "tags": tags,
        "importance_score": max(match.importance_score, candidate.importance),
        "last_seen_at": max(match.last_seen_at, now),
        "reinforcement_count": match.reinforcement_count + (1 if count else 0),
    }
    if covers(match.content, candidate.content, candidate.category, vocabulary):
        # Same fact seen again: trust may rise; the text and updatedAt stay (they anchor
        # decay and the consolidation review stamp).
        source = reinforced_source(match.source, candidate.source)
        updated = match.model_copy(update={**common, "metadata": _with_source(metadata, source)})
        return DedupDecision(DedupOutcome.REINFORCED, updated, similarity)
    # Not a repeat. An extension only when the candidate restates all of the existing
    # entry and adds to it: then it replaces nothing, and the existing fact was seen
    # again. One that drops a value (a new phone number, "3 people" now "20") or only
    # overlaps is its own entry, whatever its similarity.
    content = f"{match.content}\n\n{candidate.content}"
    if len(content) > max_extended_chars or not covers(
        candidate.content, match.content, match.category, vocabulary
    ):
        return DedupDecision(DedupOutcome.CREATED, similarity=similarity)
    source = combined_source([match.source, candidate.source])
    updated = match.model_copy(
        update={
            **common,
            "content": content,
            "updated_at": now,
            "metadata": _with_source(metadata, source),
        }
    )
    return DedupDecision(DedupOutcome.EXTENDED, updated, similarity)


def _with_source(metadata: dict[str, str], source: str | None) -> dict[str, str]:
    out = {k: v for k, v in metadata.items() if k != SOURCE_KEY}
    if source is not None:
        out[SOURCE_KEY] = source
    return cap_metadata(out, first=(SOURCE_KEY, *metadata))
