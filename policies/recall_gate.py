"""The recall gate's pure decisions (#17): which terms make a source's canary query and
whether a hit carries them.

Coverage (`policies.coverage`) checks that a merge keeps every *specific* of its sources
(names, numbers, dates, addresses); it cannot see an ordinary word, so "Trish prefers the
window seat" merged into "Trish prefers a seat" passes it. The canary asks what recall
asks instead, for exactly the words coverage leaves out: the source's most distinctive
ordinary index terms (highest idf in the live corpus; specifics and digits excluded —
they are coverage's job, which knows that 2026-08-19 and "August 19, 2026" are one
date). Before the merge some live entry in the top k carries all of them (the source
itself); after it, one still must.

A term is carried by an inflection of it too ("wrote" by "writes", one edit apart), so
an honest rewording is not a regression; a word dropped is.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

CANARY_TERMS = 2
MIN_TERM_CHARS = 3


def ordinary_terms(tokens: Iterable[str], specific_tokens: Iterable[str]) -> set[str]:
    specifics = set(specific_tokens)
    return {t for t in tokens if t not in specifics and t.isalpha() and len(t) >= MIN_TERM_CHARS}


def canary_terms(
    tokens: Iterable[str], idf: Callable[[str], float], n: int = CANARY_TERMS
) -> list[str]:
    """The `n` rarest distinct terms (idf descending, then alphabetical: deterministic)."""
    return sorted(set(tokens), key=lambda t: (-idf(t), t))[:n]


def _within_one_edit(a: str, b: str) -> bool:
    if abs(len(a) - len(b)) > 1:
        return False
    if len(a) > len(b):
        a, b = b, a
    i = 0
    while i < len(a) and a[i] == b[i]:
        i += 1
    if len(a) == len(b):
        return a[i + 1 :] == b[i + 1 :]
    return a[i:] == b[i + 1 :]


def carries_term(term: str, tokens: frozenset[str] | set[str]) -> bool:
    if term in tokens:
        return True
    if len(term) < 5:  # short words: one edit is another word
        return False
    return any(t[:2] == term[:2] and _within_one_edit(term, t) for t in tokens)


def carries(hit_tokens: frozenset[str] | set[str], terms: Sequence[str]) -> bool:
    return all(carries_term(t, hit_tokens) for t in terms)


def first_carrier(ranked: Sequence[tuple[str, frozenset[str]]], terms: Sequence[str]) -> int:
    """1-based rank of the first hit carrying every term, or 0 when none does."""
    for rank, (_, tokens) in enumerate(ranked, start=1):
        if carries(tokens, terms):
            return rank
    return 0
