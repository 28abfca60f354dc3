"""The recall gate's pure decisions (#17): which terms make a source's canary query and
whether a hit carries them.

Coverage (`policies.coverage`) checks that a merge keeps every *specific* of its sources
(names, numbers, addresses); it cannot see an ordinary word, so "Trish prefers the window
seat" merged into "Trish prefers a seat" passes it. The canary asks the question recall
asks instead: the source's most distinctive index terms (highest idf in the live corpus,
specifics or not), as a query — before the merge some live entry in the top k carries all
of them (the source itself), after the merge one still must.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

CANARY_TERMS = 3


def canary_terms(
    tokens: Iterable[str], idf: Callable[[str], float], n: int = CANARY_TERMS
) -> list[str]:
    """The `n` rarest distinct terms (idf descending, then alphabetical: deterministic)."""
    distinct = sorted(set(tokens))
    return sorted(distinct, key=lambda t: (-idf(t), t))[:n]


def carries(hit_tokens: Iterable[str], terms: Sequence[str]) -> bool:
    return set(terms).issubset(hit_tokens)


def first_carrier(ranked: Sequence[tuple[str, frozenset[str]]], terms: Sequence[str]) -> int:
    """1-based rank of the first hit carrying every term, or 0 when none does."""
    for rank, (_, tokens) in enumerate(ranked, start=1):
        if carries(tokens, terms):
            return rank
    return 0
