"""The recall gate's pure decisions: which terms make a source's canary query and
whether a hit carries them.

Coverage (`policies.coverage`) checks that a merge keeps every *specific* of its sources
(names, numbers, dates, addresses); it cannot see an ordinary word, so "Trish prefers the
window seat" merged into "Trish prefers a seat" passes it. The canary asks what recall
asks instead, for exactly the words coverage leaves out: the source's most distinctive
ordinary index terms of its text (not its category or tags, which a merge may
rename; highest idf in the live corpus; specifics and digits excluded —
they are coverage's job, which knows that 2026-08-19 and "August 19, 2026" are one
date). Before the merge the source is in the query's top k (else it has no canary);
after it, the merged entry — which carries the source's specifics, coverage saw to
that — must be in the top k and carry every term. The query also names the source's
two rarest specifics (anchors: the person, the project), as a user's query would; they are
not required of the hit — coverage already made sure the merge keeps them — they keep the
query about this memory, so five other people with the same habit do not push a longer,
honest merge out of the top k.

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


def matching_token(term: str, tokens: frozenset[str] | set[str]) -> str | None:
    """The token that carries `term`: itself, or an inflection of it; None if none does."""
    if term in tokens:
        return term
    if len(term) < 5:  # short words: one edit is another word
        return None
    return min((t for t in tokens if t[:2] == term[:2] and _within_one_edit(term, t)), default=None)


def carries_term(term: str, tokens: frozenset[str] | set[str]) -> bool:
    return matching_token(term, tokens) is not None


def carries(hit_tokens: frozenset[str] | set[str], terms: Sequence[str]) -> bool:
    return all(carries_term(t, hit_tokens) for t in terms)


def carrier_rank(
    ranked: Sequence[tuple[str, frozenset[str]]], entry_id: str, terms: Sequence[str]
) -> int:
    """1-based rank of `entry_id` among the hits if it carries every term, else 0."""
    for rank, (hit, tokens) in enumerate(ranked, start=1):
        if hit == entry_id:
            return rank if carries(tokens, terms) else 0
    return 0
