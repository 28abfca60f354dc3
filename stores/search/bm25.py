"""An incremental BM25 index: k1 = 1.5, b = 0.75 and Lucene's idf, as the reference —
and the tokenizer that feeds it (`tokenize`).

    idf(t) = ln(1 + (N − n + 0.5) / (n + 0.5))    N documents in scope, n containing t
    score(d) = Σ over distinct query terms t of
               idf(t) · tf · (k1 + 1) / (tf + k1 · (1 − b + b · |d| / avgdl))

This idf is always positive, so a document containing a query term always scores above
zero and more occurrences always score higher — also in a store of one or two entries,
or for a term in most of them, where BM25Okapi's ln((N − n + 0.5) / (n + 0.5)) goes
negative and ranks them backwards. Apart from the idf the formula is
`rank_bm25.BM25Okapi`'s; tests check the scores against a BM25Okapi with this idf.

rank_bm25 rebuilds everything and scores every document in Python on each query; this
keeps postings per token (packed arrays) and document statistics (numpy), updates them
in place on add/remove, and scores only documents that share a query token.

Removal marks a slot dead instead of editing postings; dead slots are compacted away
once they are a third of the index.
"""

from __future__ import annotations

import math
import re
import sys
import unicodedata
from array import array
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np
import snowballstemmer

from dreamkeeper.policies.stopwords import STOPWORDS
from dreamkeeper.stores.search import packing

K1 = 1.5
B = 0.75
_NARROW_TOKENS = 1 << 16  # documents' token ids are kept in two bytes below this many terms
# What a term's frequencies are kept in: the smallest type that holds every one exactly.
_TF_TYPES = (np.dtype(np.uint8), np.dtype(np.uint16), np.dtype(np.uint32))

T = TypeVar("T")

# -- tokenizer -------------------------------------------------------------------------


def _mark_class() -> str:
    """Every combining mark (Mn, Mc, Me) as a regex class body: a vowel sign in हिन्दी or
    a tone mark in ภาษาไทย is part of its word, though Python's \\w leaves it out."""
    ranges: list[tuple[int, int]] = []
    for code in [*range(0x300, 0x20000), *range(0xE0100, 0xE01F0)]:
        if unicodedata.category(chr(code))[0] == "M":
            if ranges and ranges[-1][1] == code - 1:
                ranges[-1] = (ranges[-1][0], code)
            else:
                ranges.append((code, code))
    return "".join(f"{chr(a)}-{chr(b)}" if a != b else chr(a) for a, b in ranges)


# Letters, digits and marks of any script (one character class: an alternation per
# character was most of the indexing time); `_` is turned into a space first. An
# apostrophe inside a word and a dot between two digits do not split it (don't,
# Chicago's, 3.14, v2.0, 192.168.1.1).
_WORD = f"[\\w{_mark_class()}]+"
_TOKEN = re.compile(f"{_WORD}(?:(?:'|(?<=\\d)\\.(?=\\d)){_WORD})*")
# The same rule for ASCII text (most of it), which needs no normalization: a small class
# is several times faster than the one holding every mark.
_ASCII_TOKEN = re.compile(r"[a-z0-9]+(?:(?:'|(?<=\d)\.(?=\d))[a-z0-9]+)*")
_THOUSANDS = re.compile(r"(?<=\d),(?=\d{3}(?!\d))")  # 1,000 → 1000
_APOSTROPHES = str.maketrans({"\u2019": "'", "\u02bc": "'", "\u2018": "'", "_": " "})
# Scripts written without spaces between words: Han, Hiragana, Katakana (with the
# prolonged-sound mark), Thai, Lao, Myanmar, Khmer. Hangul is written with spaces.
_SPACELESS = re.compile(
    "[\u0e00-\u0eff\u1000-\u109f\u1780-\u17ff\u3005\u3040-\u30ff\u31f0-\u31ff"
    "\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\U00020000-\U0003134f]+"
)
_STEMMERS = {
    "latin": snowballstemmer.stemmer("english"),
    "cyrillic": snowballstemmer.stemmer("russian"),
}
_CACHE_LIMIT = 500_000
_doc_cache: dict[str, tuple[str, ...]] = {}
_query_cache: dict[str, tuple[str, ...]] = {}


def _script(word: str) -> str | None:
    first = word[0]
    if first < "\u0250" or "\u1e00" <= first <= "\u1eff":
        return "latin"
    if "\u0400" <= first <= "\u052f":
        return "cyrillic"
    return None


def _spaceless_terms(run: str, query: bool) -> list[str]:
    """Overlapping character bigrams of a run of a spaceless script (東京タワー → 東京 京タ
    タワ ワー); a one-character run is itself. Documents also index each character, so a
    one-character query (猫) finds a longer run containing it; queries use bigrams only,
    which is what makes a match precise."""
    if len(run) == 1:
        return [run]
    bigrams = [run[i : i + 2] for i in range(len(run) - 1)]
    return bigrams if query else bigrams + list(run)


def _word_terms(word: str) -> list[str]:
    if not word or word in STOPWORDS:
        return []
    if any(c.isdigit() for c in word):
        return [word]  # numbers and letter-digit identifiers stay whole, unstemmed
    if len(word) == 1:
        return []
    script = _script(word)
    return [_STEMMERS[script].stemWord(word) if script else word]


def _analyze(raw: str, query: bool) -> tuple[str, ...]:
    if raw in STOPWORDS:  # don't, it's, i'm: contractions on the list go whole
        return ()
    if raw.endswith("'s"):
        raw = raw[:-2]
    out: list[str] = []
    for part in raw.split("'"):
        at = 0
        for run in _SPACELESS.finditer(part):
            out += _word_terms(part[at : run.start()])
            out += _spaceless_terms(run.group(), query)
            at = run.end()
        out += _word_terms(part[at:])
    return tuple(sys.intern(t) for t in out)


def tokenize(text: str, *, query: bool = False) -> list[str]:
    """The terms BM25 indexes (and, with `query=True`, searches for).

    - NFKC, then casefold: ｆｕｌｌｗｉｄｔｈ, ligatures and case variants are one term;
      accents stay (café is not cafe).
    - Words are runs of letters, digits and combining marks of any script (борщ,
      Ünïcødé, हिन्दी); an apostrophe or a dot between digits does not split one.
    - `policies.stopwords` (English function words, contractions included) is dropped,
      so "what did" is no phrase and "the" no match; so are one-letter words.
    - Numbers and letter-digit identifiers (2024, 3.14, v2.0, rfc7231) stay whole.
    - Other words are stemmed with Snowball — English for Latin script, Russian for
      Cyrillic (researching → research, борща → борщ). Snowball is a maintained,
      published algorithm with a fixed output per release, already a dependency (the
      merge safety check stems with it); a light suffix stripper that conflates
      inflections is what recall needs, not a lemmatizer's vocabulary and model.
    - Scripts without spaces (Han, kana, Thai, Lao, Myanmar, Khmer): character bigrams;
      see `_spaceless_terms`.
    """
    if text.isascii():
        text, pattern = text.lower(), _ASCII_TOKEN  # NFKC and casefold change nothing here
    else:
        text = unicodedata.normalize("NFKC", text.casefold()).translate(_APOSTROPHES)
        pattern = _TOKEN
    text = _THOUSANDS.sub("", text)
    cache = _query_cache if query else _doc_cache
    out: list[str] = []
    for raw in pattern.findall(text):
        terms = cache.get(raw)
        if terms is None:
            if len(cache) >= _CACHE_LIMIT:
                cache.clear()
            terms = cache[raw] = _analyze(raw, query)
        out.extend(terms)
    return out


def query_terms(text: str) -> list[str]:
    """A query's terms: `tokenize(text, query=True)`."""
    return tokenize(text, query=True)


def lucene_idf(n_docs: int, n_containing: int) -> float:
    """ln(1 + (N − n + 0.5) / (n + 0.5)): positive for every 0 < n ≤ N."""
    return math.log1p((n_docs - n_containing + 0.5) / (n_containing + 0.5))


def query_phrases(tokens: list[str]) -> list[tuple[str, str]]:
    """Consecutive two-word phrases of a tokenized query."""
    return list(dict.fromkeys(zip(tokens, tokens[1:], strict=False)))


def has_phrase(tokens: Sequence[T], phrase: tuple[T, T]) -> bool:
    """Whether the phrase's two tokens (strings or ids) stand next to each other."""
    first, second = phrase
    return any(tok == first and tokens[i + 1] == second for i, tok in enumerate(tokens[:-1]))


def _ascending(slots: np.ndarray) -> np.ndarray:
    """The distinct slots, ascending (without a sort when they already are)."""
    if slots.size > 1 and not bool((slots[1:] >= slots[:-1]).all()):
        slots = np.sort(slots)
    if slots.size > 1:
        slots = slots[np.concatenate(([True], slots[1:] != slots[:-1]))]
    return slots


# Below this many postings in all, scoring every one costs less than deciding which
# need not be (measured with bench/search.py: the bounds, a floor and a second pass).
_PRUNE_FROM = 20_000


def _union(postings: list[np.ndarray], allowed: np.ndarray) -> np.ndarray:
    """The allowed slots in any of the postings, ascending."""
    if sum(p.size for p in postings) * 8 < allowed.size:  # a small sort beats a full pass
        slots = np.concatenate(postings).astype(np.int64)
        if len(postings) > 1:
            slots.sort()
            slots = slots[np.concatenate(([True], slots[1:] != slots[:-1]))]
        return slots[allowed[slots]]
    mark = np.zeros(allowed.size, dtype=np.bool_)
    for posting in postings:
        mark[posting] = True
    mark &= allowed
    return np.flatnonzero(mark)


class _Grow:
    """A numpy array with amortised appends. Growing replaces the buffer, never resizes
    it in place: a view taken before stays valid and blocks nothing. `raw` is the
    storage as a memoryview (items are Python ints, and cheap to slice)."""

    def __init__(self, dtype: type) -> None:
        self._replace(np.zeros(64, dtype=dtype))
        self.size = 0

    def _replace(self, data: np.ndarray) -> None:
        self._data = data
        self.raw: memoryview = data.data

    def _grown(self, size: int) -> None:
        grown = np.zeros(size, dtype=self._data.dtype)
        grown[: self.size] = self._data[: self.size]
        self._replace(grown)

    def append(self, value: float) -> int:
        if self.size == len(self._data):
            self._grown(len(self._data) * 2)
        self._data[self.size] = value
        self.size += 1
        return self.size - 1

    def ensure(self, size: int) -> None:
        if len(self._data) < size:
            self._grown(max(size, len(self._data) * 2))
        self.size = max(self.size, size)

    def extend(self, values: np.ndarray) -> None:
        end = self.size + len(values)
        if end > len(self._data):
            self._grown(max(end, len(self._data) * 2))
        self._data[self.size : end] = values
        self.size = end

    def adopt(self, values: np.ndarray) -> None:
        """Take `values` as the contents, with room to grow."""
        self._replace(np.concatenate([values, np.zeros(64, dtype=values.dtype)]))
        self.size = len(values)

    def widen(self, dtype: type) -> None:
        self._replace(self._data.astype(dtype))

    @property
    def view(self) -> np.ndarray:
        return self._data[: self.size]

    def __setitem__(self, index: int, value: float) -> None:
        self._data[index] = value

    def __getitem__(self, index: int) -> float:
        return self._data[index]


@dataclass(frozen=True)
class _Scope:
    """One query's terms over the index: their postings and idf, the average document
    length, and the mask of slots in scope."""

    terms: list[int]
    postings: dict[int, tuple[np.ndarray, np.ndarray]]
    idf: dict[int, float]
    avgdl: float
    in_groups: np.ndarray


class BM25Index:
    """Documents are keys (entry ids) with token lists; each belongs to one "group".

    Statistics are kept for two scopes: `live` documents only, and all documents
    (live + archived), so a search with or without archived entries scores exactly like
    an index built over that scope alone.
    """

    PACK_MIN = 4096  # postings added before the first packing (tests lower it)

    def __init__(self) -> None:
        self._reset()

    def _reset(self) -> None:
        self._slot_of: dict[str, int] = {}
        self._key_of: list[str | None] = []
        # Every document's token ids end to end (`_tok_at[slot]` to `_tok_at[slot + 1]`),
        # not an array object per document: at 100k documents the objects alone were
        # more than the ids. A removed document's ids stay until the next compaction.
        # Two bytes each while the vocabulary fits (widened when it outgrows them).
        self._tok = _Grow(np.uint16)
        self._tok_at = _Grow(np.int64)
        self._tok_at.append(0)
        self._token_str: list[str] = []
        self._doc_len = _Grow(np.float64)
        self._alive = _Grow(np.bool_)
        self._live = _Grow(np.bool_)  # alive and not archived
        self._weight = _Grow(np.float64)  # caller's per-document multiplier (importance)
        self._group = _Grow(np.int64)  # caller's per-document group (category) for filters
        # Caller's per-document values to rank ties and boosts by without the document
        # itself (the store's importance and last-seen time).
        self._importance = _Grow(np.float64)
        self._stamp = _Grow(np.float64)
        self._token_id: dict[str, int] = {}
        # Postings in two parts. The base: every term's postings end to end (term t's at
        # `_base_off[t]` to `_base_off[t + 1]`), slots ascending, frequencies in the
        # smallest unsigned type that holds them exactly. On top, `_more`: per term, the
        # postings added since the base was packed (packed arrays), folded into a new
        # base once they are an eighth of it — amortized, like a growing array. New
        # documents take the highest slot, so base then more stays ascending.
        self._base_off = np.zeros(1, dtype=np.int64)
        self._base_slots = np.zeros(0, dtype=np.uint32)
        self._base_tf: np.ndarray = np.zeros(0, dtype=np.uint8)
        self._more: dict[int, tuple[array, array]] = {}
        self._more_count = 0
        # Python lists: per-token increments on numpy arrays cost ~10x more.
        self._df_all: list[int] = []
        self._df_live: list[int] = []
        self._n_all = 0
        self._n_live = 0
        self._len_all = 0
        self._len_live = 0
        self._dead = 0
        # Per term, its highest frequency and shortest document, keyed by its postings'
        # size (`_bound`).
        self._bounds: dict[tuple[int, int], tuple[float, float]] = {}
        # The largest weight any slot has had: never lowered, so it stays a bound.
        self._weight_top = 0.0
        # Bumped whenever a key may have moved to another slot: callers caching a mapping
        # onto slots compare it.
        self.generation = getattr(self, "generation", 0) + 1

    # -- the index snapshot's part (`stores.longterm.snapshot`) -----------------------------------

    _COLUMNS = (
        ("doc_len", np.float64),
        ("alive", np.bool_),
        ("live", np.bool_),
        ("weight", np.float64),
        ("group", np.int64),
        ("importance", np.float64),
        ("stamp", np.float64),
    )

    def to_sections(self) -> tuple[dict[str, bytes], dict[str, Any]]:
        """The whole index as named binary sections, and its shape (slot and term counts,
        the scalar statistics, the frequencies' type) for `from_sections`. A removed
        document's token ids are left out."""
        size = len(self._key_of)
        bounds = self._tok_at.view
        lengths = np.diff(bounds)
        kept = np.fromiter((k is not None for k in self._key_of), np.bool_, size)
        tokens = self._tok.view[np.repeat(kept, lengths)]
        token_off = np.zeros(size + 1, dtype=np.int64)
        np.cumsum(np.where(kept, lengths, 0), out=token_off[1:])
        post_off, post_slots, post_tf = self._packed()
        sections = {
            "slot_keys": packing.strings([k or "" for k in self._key_of]),
            "tokens": tokens.tobytes(),
            "token_off": token_off.tobytes(),
            **{name: getattr(self, f"_{name}").view.tobytes() for name, _ in self._COLUMNS},
            "token_str": packing.strings(self._token_str),
            "post_slots": post_slots.tobytes(),
            "post_tf": post_tf.tobytes(),
            "post_off": post_off.tobytes(),
            "df_all": np.asarray(self._df_all, dtype=np.int64).tobytes(),
            "df_live": np.asarray(self._df_live, dtype=np.int64).tobytes(),
        }
        shape = {
            "slots": size,
            "terms": len(self._token_str),
            "tokens": tokens.dtype.str,
            "tf": post_tf.dtype.str,
            "scalars": [self._n_all, self._n_live, self._len_all, self._len_live, self._dead],
        }
        return sections, shape

    @classmethod
    def from_sections(
        cls, section: Callable[[str], memoryview], shape: dict[str, Any]
    ) -> BM25Index:
        """The index `to_sections` wrote; `ValueError` when the sections disagree."""
        slots, terms = shape["slots"], shape["terms"]
        tf_type = np.dtype(shape["tf"])
        if tf_type not in _TF_TYPES:
            raise ValueError("frequencies of an unknown type")

        def values(name: str, dtype: Any) -> np.ndarray:
            return np.frombuffer(section(name), dtype=dtype).copy()

        index = cls()
        keys = packing.split(section("slot_keys"), slots)
        index._key_of = [k or None for k in keys]
        index._slot_of = {k: i for i, k in enumerate(keys) if k}
        token_type = np.dtype(shape["tokens"])
        if token_type not in (np.dtype(np.uint16), np.dtype(np.uint32)):
            raise ValueError("token ids of an unknown type")
        tokens, token_off = values("tokens", token_type), values("token_off", np.int64)
        packing.check_offsets(token_off, slots, len(tokens))
        if len(tokens) and int(tokens.max()) >= terms:
            raise ValueError("a token id out of range")
        if terms > _NARROW_TOKENS:
            tokens = tokens.astype(np.uint32)
        index._tok.adopt(tokens)
        index._tok_at.adopt(token_off)
        index._token_str = packing.split(section("token_str"), terms)
        index._token_id = {t: i for i, t in enumerate(index._token_str)}
        if len(index._token_id) != terms:
            raise ValueError("duplicate terms")
        post_off, post_slots = values("post_off", np.int64), values("post_slots", np.uint32)
        post_tf = values("post_tf", tf_type)
        packing.check_offsets(post_off, terms, len(post_slots))
        if len(post_tf) != len(post_slots) or (len(post_slots) and int(post_slots.max()) >= slots):
            raise ValueError("postings out of range")
        index._base_off, index._base_slots, index._base_tf = post_off, post_slots, post_tf
        for name, dtype in cls._COLUMNS:
            column = values(name, dtype)
            if len(column) != slots:
                raise ValueError(f"{name} has the wrong length")
            getattr(index, f"_{name}").adopt(column)
        index._weight_top = float(index._weight.view.max()) if slots else 0.0
        index._df_all = values("df_all", np.int64).tolist()
        index._df_live = values("df_live", np.int64).tolist()
        if len(index._df_all) != terms or len(index._df_live) != terms:
            raise ValueError("document frequencies have the wrong length")
        index._n_all, index._n_live, index._len_all, index._len_live, index._dead = shape["scalars"]
        index.generation += 1
        return index

    # -- maintenance -------------------------------------------------------------------

    def __contains__(self, key: str) -> bool:
        return key in self._slot_of

    def __len__(self) -> int:
        return len(self._slot_of)

    def slot(self, key: str) -> int | None:
        return self._slot_of.get(key)

    def key_at(self, slot: int) -> str | None:
        return self._key_of[slot]

    @property
    def slot_count(self) -> int:
        """Slots in use, removed documents' included (until the next compaction)."""
        return len(self._key_of)

    def put(
        self,
        key: str,
        tokens: list[str],
        *,
        archived: bool,
        weight: float = 1.0,
        group: int = 0,
        importance: float = 0.0,
        stamp: float = 0.0,
    ) -> int:
        """Add or replace a document; returns its slot."""
        tids = self._ids(tokens)
        self._weight_top = max(self._weight_top, weight)
        old = self._slot_of.get(key)
        if old is not None:
            held = self._doc_tokens(old)
            if held is not None and np.array_equal(held, np.frombuffer(tids, dtype=np.uint32)):
                self.set_archived(key, archived)
                self._weight[old] = weight
                self._group[old] = group
                self._importance[old] = importance
                self._stamp[old] = stamp
                return old
            self.remove(key)
            # Removal may have compacted the index, renumbering every token.
            tids = self._ids(tokens)
        slot = len(self._key_of)
        self.generation += 1
        self._key_of.append(key)
        self._tok.extend(np.frombuffer(tids, dtype=np.uint32))
        self._tok_at.append(self._tok.size)
        self._slot_of[key] = slot
        self._doc_len.append(len(tokens))
        self._alive.append(True)
        self._live.append(not archived)
        self._weight.append(weight)
        self._group.append(group)
        self._importance.append(importance)
        self._stamp.append(stamp)
        self._post(slot, tids, len(tokens), live=not archived)
        return slot

    def _post(self, slot: int, tids: array, length: int, *, live: bool) -> None:
        """The new document's postings (in the unpacked part, packed once it grows) and
        the collection statistics it adds to."""
        more = self._more
        df_all, df_live = self._df_all, self._df_live
        counts = Counter(tids)
        for tid, tf in counts.items():
            added = more.get(tid)
            if added is None:
                added = more[tid] = (array("I"), array("I"))
            added[0].append(slot)
            added[1].append(tf)
            df_all[tid] += 1
            if live:
                df_live[tid] += 1
        self._more_count += len(counts)
        if self._more_count > max(self.PACK_MIN, len(self._base_slots) // 8):
            self._pack()
        self._n_all += 1
        self._len_all += length
        if live:
            self._n_live += 1
            self._len_live += length

    def _ids(self, tokens: list[str]) -> array:
        token_id = self._token_id
        out = array("I")
        for tok in tokens:
            tid = token_id.get(tok)
            if tid is None:
                tid = len(self._token_str)
                if tid == _NARROW_TOKENS:
                    self._tok.widen(np.uint32)
                token_id[tok] = tid
                self._token_str.append(tok)
                self._df_all.append(0)
                self._df_live.append(0)
            out.append(tid)
        return out

    def _posting(self, tid: int) -> tuple[np.ndarray, np.ndarray]:
        """A term's postings: the slots holding it (ascending, uint32) and its frequency in
        each (float32). The slots are a view of the packed base when nothing was added
        to the term since it was packed, a copy otherwise; neither holds a buffer the
        index grows, so they may be kept across changes (they show the postings as they
        were)."""
        if tid + 1 < len(self._base_off):
            start, end = int(self._base_off[tid]), int(self._base_off[tid + 1])
        else:
            start = end = 0
        slots = self._base_slots[start:end]
        tf = self._base_tf[start:end].astype(np.float32)
        added = self._more.get(tid)
        if added is not None:
            slots = np.concatenate([slots, np.frombuffer(added[0], dtype=np.uint32)])
            tf = np.concatenate([tf, np.frombuffer(added[1], dtype=np.uint32)]).astype(np.float32)
        return slots, tf

    def _doc_tokens(self, slot: int) -> memoryview | None:
        """The slot's token ids in document order (None: a removed document): a
        memoryview of unsigned ints, two bytes each while the vocabulary fits, else four;
        its items are the ids. A view of storage the index replaces rather than resizes,
        so holding it blocks nothing (it shows the tokens as they were). Many documents
        at once: `_docs_tokens`."""
        if self._key_of[slot] is None:
            return None
        at = self._tok_at.raw
        return self._tok.raw[at[slot] : at[slot + 1]]

    def _distinct(self, slot: int) -> set[int]:
        tokens = self._doc_tokens(slot)
        return set() if tokens is None else set(tokens.tolist())

    def _packed(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Base and more as one base: offsets per term, slots, frequencies (smallest
        exact type)."""
        terms = len(self._token_str)
        base_terms = len(self._base_off) - 1
        counts = np.zeros(terms, dtype=np.int64)
        counts[:base_terms] = np.diff(self._base_off)
        more = sorted(self._more.items())
        for tid, (added, _) in more:
            counts[tid] += len(added)
        off = np.zeros(terms + 1, dtype=np.int64)
        np.cumsum(counts, out=off[1:])
        high = max([int(self._base_tf.max(initial=0))] + [max(tf) for _, (_, tf) in more])
        tf_type = next(t for t in _TF_TYPES if high <= np.iinfo(t).max)
        slots = np.zeros(int(off[-1]), dtype=np.uint32)
        tf = np.zeros(int(off[-1]), dtype=tf_type)
        # Each base term moves by how much the terms before it grew.
        base_len = np.diff(self._base_off)
        shift = np.repeat(off[:base_terms] - self._base_off[:-1], base_len)
        at = np.arange(len(self._base_slots), dtype=np.int64) + shift
        slots[at] = self._base_slots
        tf[at] = self._base_tf
        for tid, (added_slots, added_tf) in more:
            end = int(off[tid + 1])
            start = end - len(added_slots)
            slots[start:end] = np.frombuffer(added_slots, dtype=np.uint32)
            tf[start:end] = np.frombuffer(added_tf, dtype=np.uint32)
        return off, slots, tf

    def _pack(self) -> None:
        self._base_off, self._base_slots, self._base_tf = self._packed()
        self._more = {}
        self._more_count = 0

    def set_archived(self, key: str, archived: bool) -> None:
        slot = self._slot_of[key]
        if bool(self._live[slot]) == (not archived):
            return
        tokens = self._distinct(slot)
        if archived:
            self._live[slot] = False
            self._adjust_live(slot, tokens, -1)
        else:
            self._live[slot] = True
            self._adjust_live(slot, tokens, +1)

    def remove(self, key: str) -> None:
        slot = self._slot_of.pop(key, None)
        if slot is None:
            return
        tokens = self._distinct(slot)
        self._count(slot, tokens, -1, live=bool(self._live[slot]))
        self._alive[slot] = False
        self._live[slot] = False
        self._key_of[slot] = None
        self.generation += 1
        self._dead += 1
        if self._dead > 64 and self._dead * 3 > len(self._key_of):
            self._compact()

    def _count(self, slot: int, tokens: Iterable[int], sign: int, *, live: bool) -> None:
        length = int(self._doc_len[slot])
        self._n_all += sign
        self._len_all += sign * length
        for tok in tokens:
            self._df_all[tok] += sign
        if live:
            self._adjust_live(slot, tokens, sign)

    def _adjust_live(self, slot: int, tokens: Iterable[int], sign: int) -> None:
        self._n_live += sign
        self._len_live += sign * int(self._doc_len[slot])
        for tok in tokens:
            self._df_live[tok] += sign

    def _compact(self) -> None:
        token_str = self._token_str
        survivors = [
            (
                key,
                [token_str[t] for t in self._doc_tokens(slot).tolist()],  # type: ignore[union-attr]
                bool(self._live[slot]),
                self._weight[slot],
                self._group[slot],
                self._importance[slot],
                self._stamp[slot],
            )
            for slot, key in enumerate(self._key_of)
            if key is not None
        ]
        self._reset()  # renumbers every slot: the generation moves on, caches refresh
        for key, toks, live, weight, group, importance, stamp in survivors:
            self.put(
                key,
                toks,
                archived=not live,
                weight=float(weight),
                group=int(group),
                importance=float(importance),
                stamp=float(stamp),
            )
        self._pack()

    def phrase_slots(
        self, phrases: list[tuple[str, str]], among: np.ndarray | None = None
    ) -> np.ndarray:
        """Slots (of `among`, if given) whose token stream holds any of the phrases as
        adjacent tokens, ascending. Postings narrow it to documents containing both
        words; only those are scanned, all in one vectorised pass."""
        if among is None:
            among = np.flatnonzero(self._alive.view)
        among = _ascending(np.asarray(among, dtype=np.int64))
        pairs = []
        maybe = np.zeros(among.size, dtype=np.bool_)
        for first, second in phrases:
            a, b = self._token_id.get(first), self._token_id.get(second)
            if a is None or b is None:
                continue
            held = self._holding(a, among) & self._holding(b, among)
            if held.any():
                pairs.append((a, b))
                maybe |= held
        scan = among[maybe]
        if not pairs or scan.size == 0:
            return np.zeros(0, dtype=np.int64)
        tokens, lengths = self._docs_tokens(scan)
        # Position i and i + 1 belong to one document unless i is a document's last.
        last = np.cumsum(lengths)[lengths > 0] - 1
        inside = np.ones(max(tokens.size - 1, 0), dtype=np.bool_)
        inside[last[last < inside.size]] = False
        found = np.zeros(tokens.size, dtype=np.bool_)
        for a, b in pairs:
            found[:-1] |= inside & (tokens[:-1] == a) & (tokens[1:] == b)
        owner = np.repeat(np.arange(scan.size), lengths)
        return _ascending(scan[owner[found]])

    def _docs_tokens(self, slots: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The slots' token streams end to end, and each one's length (0: removed): one
        gather from the flat storage (ids as stored: two bytes each while the vocabulary
        fits, else four; compare them by value)."""
        at = self._tok_at.view
        starts = at[slots]
        lengths = np.where(self._alive.view[slots], at[slots + 1] - starts, 0)
        # Position k of the result comes from starts[d] + (k - where document d begins).
        begins = np.cumsum(lengths) - lengths
        where = np.repeat(starts - begins, lengths) + np.arange(int(lengths.sum()))
        return self._tok.view[where], lengths

    def _holding(self, tid: int, slots: np.ndarray) -> np.ndarray:
        """Which of `slots` (ascending) hold the term."""
        posting = self._posting(tid)[0]
        if posting.size == 0 or slots.size == 0:
            return np.zeros(slots.size, dtype=np.bool_)
        at = np.searchsorted(posting, slots)
        at[at == posting.size] = 0
        held = posting[at] == slots
        del posting  # release the buffer export so the array can grow again
        return held

    @property
    def weights(self) -> np.ndarray:
        return self._weight.view

    @property
    def groups(self) -> np.ndarray:
        return self._group.view

    @property
    def importances(self) -> np.ndarray:
        return self._importance.view

    @property
    def stamps(self) -> np.ndarray:
        return self._stamp.view

    # -- scoring -----------------------------------------------------------------------

    def _scope(self, include_archived: bool) -> tuple[int, int, list[int], np.ndarray]:
        if include_archived:
            return self._n_all, self._len_all, self._df_all, self._alive.view
        return self._n_live, self._len_live, self._df_live, self._live.view

    def idf(self, token: str, *, include_archived: bool = False) -> float:
        tid = self._token_id.get(token)
        n, _, df, _ = self._scope(include_archived)
        if tid is None or df[tid] <= 0:
            return 0.0
        return lucene_idf(n, df[tid])

    def scores(self, query_tokens: list[str], *, include_archived: bool = False) -> np.ndarray:
        """Dense BM25 scores per slot. Each distinct query token counts once; the idf is
        positive, so a slot scores above zero exactly when it is in scope and holds a
        query token."""
        n, total_len, df, in_scope = self._scope(include_archived)
        scores = np.zeros(len(self._key_of), dtype=np.float64)
        if n == 0:
            return scores
        avgdl = total_len / n
        doc_len = self._doc_len.view
        for tok in dict.fromkeys(query_tokens):
            tid = self._token_id.get(tok)
            if tid is None or df[tid] <= 0:
                continue
            idf = lucene_idf(n, df[tid])
            slots, tf32 = self._posting(tid)
            tf = tf32.astype(np.float64)
            denom = tf + K1 * (1 - B + B * doc_len[slots] / avgdl)
            scores[slots] += idf * (tf * (K1 + 1) / denom)
            del slots, tf32  # release the buffer exports so the arrays can grow again
        scores[~in_scope] = 0.0
        return scores

    def candidates(
        self,
        query_tokens: list[str],
        *,
        include_archived: bool = False,
        groups: np.ndarray | None = None,
        top: int | None = None,
        phrases: Sequence[tuple[str, str]] = (),
        bonus: float = 1.0,
    ) -> tuple[np.ndarray, np.ndarray]:
        """The slots in scope holding a query token (ascending) — only those of `groups`
        (a mask over group ids) when given — and their scores: at each slot the same
        float `scores` gives, added term by term in the query's order.

        With `top`, a subset that still holds every slot that can reach the best `top`
        by score × weight (× the caller's `bonus` for a document holding one of the
        `phrases`), or tie with them: MaxScore. Each term is bounded by its score at its
        highest frequency in its shortest document; the terms with the highest bounds
        are *essential*, and only documents holding one are scored. The rest are left
        out exactly when the bounds of the other terms add up (× the largest weight, ×
        the bonus if a phrase lies wholly among those terms) below the `top`-th best
        weighted score among the scored ones: such a document is strictly below `top`
        others, so it can be neither in the result nor tied with it."""
        n, total_len, df, in_scope = self._scope(include_archived)
        terms = list(
            dict.fromkeys(
                tid
                for tok in query_tokens
                if (tid := self._token_id.get(tok)) is not None and df[tid] > 0
            )
        )
        empty = np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float64)
        if n == 0 or not terms:
            return empty
        avgdl = total_len / n
        idf = {t: lucene_idf(n, df[t]) for t in terms}
        in_groups = in_scope
        if groups is not None:
            if not groups.any():
                return empty
            group = self._group.view
            known = (group >= 0) & (group < groups.size)
            in_groups = in_scope & known & groups[np.where(known, group, 0)]
        # Views of the index's storage, fetched once: dropped when this returns.
        postings = {t: self._posting(t) for t in terms}
        essential = terms
        if (
            top is not None
            and len(terms) > 1
            and sum(p[0].size for p in postings.values()) > _PRUNE_FROM
        ):
            scope = _Scope(terms, postings, idf, avgdl, in_groups)
            pruned = self._essential(scope, top, phrases, bonus)
            if isinstance(pruned, tuple):
                return pruned  # the first essential terms' documents were enough
            essential = pruned
        slots = _union([postings[t][0] for t in essential], in_groups)
        return slots, self._exact(terms, postings, slots, idf, avgdl)

    def _essential(
        self, scope: _Scope, top: int, phrases: Sequence[tuple[str, str]], bonus: float
    ) -> list[int] | tuple[np.ndarray, np.ndarray]:
        """MaxScore (see `candidates`): the essential terms, or, when the fewest that can
        fill `top` already are, their documents and scores."""
        terms, postings, idf, avgdl = scope.terms, scope.postings, scope.idf, scope.avgdl
        bound = {t: self._bound(t, postings[t], idf[t], avgdl) for t in terms}
        ranked = sorted(terms, key=lambda t: -bound[t])
        pairs = [(self._token_id.get(a), self._token_id.get(b)) for a, b in phrases if bonus > 1]

        def rest(count: int) -> float:
            others = set(ranked[count:])
            factor = bonus if any(a in others and b in others for a, b in pairs) else 1.0
            return sum(bound[t] for t in others) * self._weight_top * factor

        # The floor from the fewest essential terms whose documents can fill `top`; more
        # essential terms only raise it, so the first count whose rest falls below it is
        # enough (the floor is not computed again).
        sizes = [postings[t][0].size for t in ranked]
        first = next((c for c in range(1, len(ranked)) if sum(sizes[:c]) >= top), len(ranked))
        if first == len(ranked):
            return terms
        slots = _union([postings[t][0] for t in ranked[:first]], scope.in_groups)
        if slots.size < top:
            return terms
        scored = self._exact(terms, postings, slots, idf, avgdl)
        weighted = scored * self._weight.view[slots]
        floor = np.partition(weighted, slots.size - top)[slots.size - top]
        count = next((c for c in range(first, len(ranked)) if rest(c) < floor), len(ranked))
        if count == first:
            return slots, scored
        return ranked[:count]

    def _bound(
        self, tid: int, posting: tuple[np.ndarray, np.ndarray], idf: float, avgdl: float
    ) -> float:
        """The term's highest possible score: at its highest frequency in the shortest
        document holding it, from its postings (cached until they change; a removal
        leaves them, and the bound, as they were). Raised a hair so float rounding of
        the real scores cannot overtake it."""
        slots, tf = posting
        key = (tid, slots.size)
        cached = self._bounds.get(key)
        if cached is None:
            cached = (float(tf.max()), float(self._doc_len.view[slots].min()))
            if len(self._bounds) > 100_000:
                self._bounds.clear()
            self._bounds[key] = cached
        most, shortest = cached
        score = idf * (most * (K1 + 1) / (most + K1 * (1 - B + B * shortest / avgdl)))
        return score * (1 + 1e-9)

    def _exact(
        self,
        tids: list[int],
        postings: dict[int, tuple[np.ndarray, np.ndarray]],
        slots: np.ndarray,
        idf: dict[int, float],
        avgdl: float,
    ) -> np.ndarray:
        """`scores` at `slots` (ascending): the same operations, term by term in the
        query's order, so the same floats."""
        size = len(self._key_of)
        if slots.size * 8 > size:  # most of the index: the dense scatter is cheaper
            return self._dense(tids, postings, idf, avgdl, size)[slots]
        out = np.zeros(slots.size, dtype=np.float64)
        doc_len = self._doc_len.view
        for t in tids:
            posting, tf32 = postings[t]
            if posting.size <= slots.size:
                at = np.searchsorted(slots, posting)
                at[at == slots.size] = 0
                held = slots[at] == posting
                where, tf, lengths = at[held], tf32[held], doc_len[posting[held]]
            else:
                at = np.searchsorted(posting, slots)
                at[at == posting.size] = 0
                held = posting[at] == slots
                where, tf, lengths = np.flatnonzero(held), tf32[at[held]], doc_len[slots[held]]
            tf = tf.astype(np.float64)
            denom = tf + K1 * (1 - B + B * lengths / avgdl)
            out[where] += idf[t] * (tf * (K1 + 1) / denom)
        return out

    def _dense(
        self,
        tids: list[int],
        postings: dict[int, tuple[np.ndarray, np.ndarray]],
        idf: dict[int, float],
        avgdl: float,
        size: int,
    ) -> np.ndarray:
        scores = np.zeros(size, dtype=np.float64)
        doc_len = self._doc_len.view
        for t in tids:
            slots, tf32 = postings[t]
            tf = tf32.astype(np.float64)
            denom = tf + K1 * (1 - B + B * doc_len[slots] / avgdl)
            scores[slots] += idf[t] * (tf * (K1 + 1) / denom)
        return scores
