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


def _adjacent_ids(tokens: array | np.ndarray | memoryview, pattern: bytes) -> bool:
    """Whether two packed token ids stand next to each other: a C-speed byte search,
    accepting only matches aligned to a whole id. `pattern` is the two ids packed as
    uint32; tokens packed in two bytes each are searched for them in two bytes."""
    if tokens.itemsize * 2 != len(pattern):
        narrow = _narrow_pattern(pattern)
        if narrow is None:
            return False  # an id too large for two bytes is in no such document
        pattern = narrow
    data = tokens.tobytes()
    at = data.find(pattern)
    while at != -1:
        if at % tokens.itemsize == 0:
            return True
        at = data.find(pattern, at + 1)
    return False


_narrowed: dict[bytes, bytes | None] = {}


def _narrow_pattern(pattern: bytes) -> bytes | None:
    narrow = _narrowed.get(pattern, b"")
    if narrow == b"":
        ids = array("I")
        ids.frombytes(pattern)
        narrow = array("H", ids).tobytes() if max(ids) <= 0xFFFF else None
        if len(_narrowed) >= 4096:
            _narrowed.clear()
        _narrowed[pattern] = narrow
    return narrow


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
        live = not archived
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
        self._len_all += len(tokens)
        if live:
            self._n_live += 1
            self._len_live += len(tokens)
        return slot

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
        memoryview of unsigned ints, two bytes each while the vocabulary fits, else four
        (`_adjacent_ids` searches either for a uint32 pair). Its items are the ids.
        A view of storage the index replaces rather than resizes, so holding it blocks
        nothing (it shows the tokens as they were). A memoryview, not an ndarray: this
        is called once per candidate of a phrase, and numpy's per-call cost was 10x the
        search itself."""
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
        adjacent tokens. Postings narrow it to documents containing both words; only
        those are scanned."""
        found: set[int] = set()
        size = len(self._key_of)
        allowed = None
        if among is not None:
            # Boolean masks, not intersect1d: that sorts both arrays on every call, and
            # `among` can be most of the index.
            allowed = np.zeros(size, dtype=np.bool_)
            allowed[among] = True
        for first, second in phrases:
            a, b = self._token_id.get(first), self._token_id.get(second)
            if a is None or b is None:
                continue
            slots_a = self._posting(a)[0]
            slots_b = self._posting(b)[0]
            in_a = np.zeros(size, dtype=np.bool_)
            in_a[slots_a] = True
            both = slots_b[in_a[slots_b]]
            del slots_a, slots_b  # release the buffer exports so the arrays can grow again
            if allowed is not None:
                both = both[allowed[both]]
            pattern = array("I", (a, b)).tobytes()
            for slot in both.tolist():
                tokens = self._doc_tokens(slot)
                if tokens is not None and slot not in found and _adjacent_ids(tokens, pattern):
                    found.add(slot)
        return np.fromiter(found, dtype=np.int64, count=len(found))

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
