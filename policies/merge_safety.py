"""The stricter check a merge must pass before it may archive a high-value source.

Token coverage (`policies.coverage`) asks only whether each specific appears somewhere
in the merged text, so a text that is junk followed by a list of the missing specifics
passes it — an obeying LLM produced exactly that, and the merge archived five
high-value entries. For a source above the high-value floor this check asks more:

1. its wording survives: when it has at least `MIN_WORDS_TO_JUDGE` ordinary words
   (stemmed; stopwords and specifics left out), at least `MIN_WORDING_SHARE` of them
   appear in the merged text;
2. each of its specifics stands in prose: somewhere it occurs in the merged text, an
   ordinary word of one of the merge's sources is within `MERGED_WINDOW` words of it.
   "Allen Conway is a consultant; his work email is ..." keeps "Conway" in context;
   "..., Trish, Roberts, 386-299-4605, trish@pwop.com" (a bare list of specifics after
   unrelated text) keeps none.

Biased, like coverage, toward refusing: a refused merge keeps its sources one more
cycle (an operator can approve it); an accepted lossy one destroys a valued memory.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from functools import lru_cache

import snowballstemmer

from dreamkeeper.policies.coverage import DEFAULT_VOCABULARY, Source, Vocabulary, extract_specifics
from dreamkeeper.policies.stopwords import STOPWORDS

MIN_WORDING_SHARE = 0.5
MIN_WORDS_TO_JUDGE = 3
MERGED_WINDOW = 6
_TOKEN = re.compile(r"[^\W_][\w'’@.+\-]*[^\W_]|[^\W_]", re.UNICODE)
_STEMMER = snowballstemmer.stemmer("english")
_PARTS = re.compile(r"[.@\-+:/]")


@lru_cache(maxsize=65_536)
def _stem(word: str) -> str:
    return _STEMMER.stemWord(word)


def _tokens(text: str) -> list[str]:
    return [t.lower().rstrip(".") for t in _TOKEN.findall(text)]


def _ordinary(token: str, specifics: frozenset[str]) -> str | None:
    """The token's stem if it is an ordinary content word, else None."""
    if len(token) < 3 or token in specifics or token in STOPWORDS or not token.isalpha():
        return None
    return _stem(token)


def _specific_tokens(source: Source, vocabulary: Vocabulary) -> frozenset[str]:
    found = extract_specifics(source, vocabulary)
    return frozenset(s.lower() for s in found.words | found.numbers | found.exact)


def context_problems(
    source: Source,
    merged: str,
    vocabulary: Vocabulary = DEFAULT_VOCABULARY,
    *,
    others: Sequence[Source] = (),
) -> list[str]:
    """Why `merged` does not keep `source` in context (empty: it does). `others`: the
    merge's other sources, whose words count as context too."""
    everyone = [source, *others]
    specifics = frozenset().union(*(_specific_tokens(s, vocabulary) for s in everyone))
    own = _specific_tokens(source, vocabulary)
    out = _tokens(merged)
    out_words = {w for t in out if (w := _ordinary(t, specifics))}
    src_words = {w for t in _tokens(source.content) if (w := _ordinary(t, specifics))}
    vocabulary_words = {
        w for s in everyone for t in _tokens(s.content) if (w := _ordinary(t, specifics))
    }
    problems = []
    if len(src_words) >= MIN_WORDS_TO_JUDGE:
        share = len(src_words & out_words) / len(src_words)
        if share < MIN_WORDING_SHARE:
            problems.append(f"only {share:.0%} of its wording survives")
    lost = [s for s in sorted(own) if not _in_prose(s, out, specifics, vocabulary_words)]
    if lost:
        problems.append(f"{len(lost)} specific(s) stand outside any sentence of its own")
    return problems


def _in_prose(specific: str, out: Sequence[str], specifics, words: set[str]) -> bool:
    for i, token in enumerate(out):
        if token == specific or token.startswith(specific + "'") or specific in _PARTS.split(token):
            window = out[max(0, i - MERGED_WINDOW) : i + MERGED_WINDOW + 1]
            if any((w := _ordinary(n, specifics)) is not None and w in words for n in window):
                return True
    return False
