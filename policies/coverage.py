"""Merge coverage: every specific of every source must survive into the merged text.

A specific is covered when the merged text contains it case-insensitively as a whole
word (not inside a longer word or number), or, for a date, in an equivalent form.

Specifics are capitalized words (possessive stripped), acronyms, numbers of two or more
digits, dates, and — beyond the reference, whose rules let a merge drop them silently —
email addresses, URLs, @handles and phone numbers. The check is deliberately biased
toward rejection: a false rejection keeps a duplicate one more cycle, a false acceptance
destroys the only record of a detail.

Save-time dedup asks a different question ("is this the same fact?") and reads with
`every_number=True`: one-digit numbers and ordinals are specifics too, whatever the
category's numeric exemption.

A capitalized word is not a specific when the same word also appears all-lowercase in
the sources or the merged text, or when it is a common word in sentence-initial position
— unless the vocabulary lists it in `always_specific`, which wins over everything (a
story with characters called May, Will or Rose).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from dreamkeeper.core.dream_payloads import VocabularyPayload
from dreamkeeper.policies.common_words import COMMON_WORDS

_MONTHS = [
    "january",
    "february",
    "march",
    "april",
    "may",
    "june",
    "july",
    "august",
    "september",
    "october",
    "november",
    "december",
]
_MONTH_RE = "|".join(_MONTHS)
_ISO_DATE = re.compile(r"(?<!\d)(\d{4})-(\d{2})-(\d{2})(?!\d)")
_LONG_DATE = re.compile(rf"\b({_MONTH_RE})\s+(\d{{1,2}}),?\s+(\d{{4}})\b", re.IGNORECASE)
_DAY_FIRST_DATE = re.compile(rf"\b(\d{{1,2}})\s+({_MONTH_RE}),?\s+(\d{{4}})\b", re.IGNORECASE)
_EMAIL = re.compile(r"[\w.+\-]+@[\w\-]+(?:\.[\w\-]+)+")
_URL = re.compile(r"\bhttps?://[^\s<>\"']+", re.IGNORECASE)
_HANDLE = re.compile(r"(?<![\w.@])@\w{2,}")
_PHONE = re.compile(
    r"(?<![\w+])(?:\+\d{1,3}[ .\-]?)?(?:\(\d{2,4}\)[ .\-]?|\d{2,4}[ .\-])\d{2,4}[ .\-]\d{3,4}(?!\w)"
)
_NUMBER = re.compile(r"\d(?:[.,:/\-]?\d)+")
_ANY_NUMBER = re.compile(r"\d(?:[.,:/\-]?\d)*")
# A run of letters and digits mixing both ("Meridian27", "2FA", "B2B", "gpt4o") is one
# specific, matched whole. Its parts are not specifics of their own: "27" alone can never
# be found whole inside "Meridian27", so an identical copy would fail its own check.
_ALNUM_RUN = re.compile(r"(?<![^\W_])[^\W_]+(?![^\W_])")
_SINGLE_DIGIT_ORDINAL = re.compile(r"^\d(?:st|nd|rd|th)$", re.IGNORECASE)
_WORD = re.compile(r"[^\W\d_][\w'’]*")
_OPENERS = "\"'“‘([{«"
_TERMINATORS = ".!?:;"
_BULLET_LINE = re.compile(r"^\s*(?:[-*•+]|\d+[.)])$")
ABBREVIATIONS = frozenset(
    {
        "st.",
        "dr.",
        "mr.",
        "mrs.",
        "ms.",
        "prof.",
        "jr.",
        "sr.",
        "etc.",
        "e.g.",
        "i.e.",
        "vs.",
        "no.",
        "mt.",
        "ft.",
        "inc.",
        "ltd.",
        "co.",
    }
)


@dataclass(frozen=True)
class Vocabulary:
    """What counts as ordinary English here; see `stores.search.vocabulary` for the file."""

    extra_common: frozenset[str] = frozenset()
    always_specific: frozenset[str] = frozenset()
    numeric_exempt_categories: tuple[str, ...] = ()
    common: frozenset[str] = field(default=COMMON_WORDS, repr=False)

    def is_common(self, word: str) -> bool:
        lowered = word.lower()
        return lowered in self.common or lowered in self.extra_common

    def is_always_specific(self, word: str) -> bool:
        return word.lower() in self.always_specific

    def numbers_exempt(self, category: str | None) -> bool:
        if category is None:
            return False
        cat = category.lower()
        return any(cat == c or cat.startswith(c + "/") for c in self.numeric_exempt_categories)

    @classmethod
    def build(
        cls,
        extra_common: Iterable[str] = (),
        always_specific: Iterable[str] = (),
        numeric_exempt_categories: Iterable[str] = (),
    ) -> Vocabulary:
        return cls(
            extra_common=frozenset(w.lower() for w in extra_common),
            always_specific=frozenset(w.lower() for w in always_specific),
            numeric_exempt_categories=tuple(
                c.lower().rstrip("/") for c in numeric_exempt_categories
            ),
        )


DEFAULT_VOCABULARY = Vocabulary()


@dataclass(frozen=True)
class Source:
    content: str
    category: str | None = None


@dataclass(frozen=True)
class _Date:
    year: int
    month: int
    day: int

    def __str__(self) -> str:
        return f"{self.year:04d}-{self.month:02d}-{self.day:02d}"


def _dates(text: str) -> tuple[list[_Date], str]:
    """Dates in the text, and the text with them blanked out (their parts are not
    specifics of their own)."""
    found: list[_Date] = []
    chars = list(text)

    def blank(m: re.Match[str]) -> None:
        for i in range(m.start(), m.end()):
            chars[i] = " "

    for m in _ISO_DATE.finditer(text):
        found.append(_Date(int(m[1]), int(m[2]), int(m[3])))
        blank(m)
    for m in _LONG_DATE.finditer(text):
        found.append(_Date(int(m[3]), _MONTHS.index(m[1].lower()) + 1, int(m[2])))
        blank(m)
    for m in _DAY_FIRST_DATE.finditer(text):
        found.append(_Date(int(m[3]), _MONTHS.index(m[2].lower()) + 1, int(m[1])))
        blank(m)
    return found, "".join(chars)


def _identifiers(text: str, every_number: bool = False) -> tuple[list[str], str]:
    """Letter-digit runs ("Falcon64", "2FA"), and the text with them blanked out. A
    single-digit ordinal ("3rd") is not one, as "top 3" is not a number specific —
    unless `every_number`."""
    found: list[str] = []

    def take(m: re.Match[str]) -> str:
        run = m.group(0)
        mixed = any(c.isdigit() for c in run) and any(c.isalpha() for c in run)
        if not mixed:
            return run
        if every_number or not _SINGLE_DIGIT_ORDINAL.match(run):
            found.append(run)
        return " " * len(run)

    return found, _ALNUM_RUN.sub(take, text)


def _take(pattern: re.Pattern[str], text: str) -> tuple[list[str], str]:
    found = [m.group(0).rstrip(".,;:)]!?") for m in pattern.finditer(text)]
    return found, pattern.sub(lambda m: " " * len(m.group(0)), text)


def _is_sentence_initial(text: str, start: int) -> bool:
    before = text[:start]
    stripped = before.rstrip(" \t" + _OPENERS)
    if not stripped or stripped.endswith("\n") or "\n" in before[len(stripped) :]:
        return True
    line = stripped.rsplit("\n", 1)[-1]
    if _BULLET_LINE.match(line):
        return True
    if stripped[-1] in _TERMINATORS:
        last_word = stripped.split()[-1].lower().lstrip(_OPENERS)
        return not (stripped[-1] == "." and last_word in ABBREVIATIONS)
    return False


def _strip_possessive(word: str) -> str:
    for suffix in ("'s", "’s"):
        if word.endswith(suffix):
            return word[: -len(suffix)]
    return word.rstrip("'’")


def _lowercase_words(texts: Iterable[str]) -> set[str]:
    return {
        _strip_possessive(m.group(0))
        for text in texts
        for m in _WORD.finditer(text)
        if m.group(0).islower()
    }


@dataclass(frozen=True)
class Specifics:
    words: frozenset[str]  # capitalized words and acronyms, as written
    numbers: frozenset[str]
    dates: frozenset[_Date]
    exact: frozenset[str]  # emails, URLs, handles, letter-digit identifiers
    phones: frozenset[str]  # digits only


def extract_specifics(
    source: Source,
    vocabulary: Vocabulary,
    lowercase_twins: set[str] | None = None,
    *,
    every_number: bool = False,
) -> Specifics:
    """`every_number`: one-digit numbers and ordinals count too, in any category (see
    `find_missing_specifics`)."""
    text = source.content
    dates, text = _dates(text)
    emails, text = _take(_EMAIL, text)
    urls, text = _take(_URL, text)
    handles, text = _take(_HANDLE, text)
    phones, text = _take(_PHONE, text)
    phone_digits = {re.sub(r"\D", "", p) for p in phones}
    identifiers, text = _identifiers(text, every_number)
    numbers = set((_ANY_NUMBER if every_number else _NUMBER).findall(text))
    if vocabulary.numbers_exempt(source.category) and not every_number:
        numbers.clear()
    twins = lowercase_twins if lowercase_twins is not None else _lowercase_words([text])
    words: set[str] = set()
    for m in _WORD.finditer(text):
        word = _strip_possessive(m.group(0))
        if len(word) < 2 or not word[0].isupper():
            continue
        letters = word.replace("'", "").replace("’", "")
        if not letters.isalpha():
            continue
        if len(word) == 2 and not word.isupper():
            continue  # two letters only count as an acronym ("AI"), not a word ("An")
        if vocabulary.is_always_specific(word):
            words.add(word)
            continue
        if word.isupper():  # acronym: specific in any position
            words.add(word)
            continue
        if word.lower() in twins:
            continue
        if vocabulary.is_common(word) and _is_sentence_initial(text, m.start()):
            continue
        words.add(word)
    return Specifics(
        words=frozenset(words),
        numbers=frozenset(numbers),
        dates=frozenset(dates),
        exact=frozenset(emails + urls + handles + identifiers),
        phones=frozenset(phone_digits),
    )


def _contains(haystack_lower: str, needle: str) -> bool:
    """Case-insensitive, and whole: "Rockford" is not kept by "rockfordlhotka", "250" not by
    "2500". Stricter than the reference's plain substring, on purpose (bias to reject)."""
    pattern = rf"(?<![^\W_]){re.escape(needle.lower())}(?![^\W_])"
    return re.search(pattern, haystack_lower) is not None


def _date_covered(date: _Date, merged: str, merged_dates: set[_Date]) -> bool:
    return date in merged_dates or str(date) in merged


def find_missing_specifics(
    sources: Sequence[Source | str],
    merged: str,
    vocabulary: Vocabulary = DEFAULT_VOCABULARY,
    *,
    every_number: bool = False,
) -> list[str]:
    """Specifics of any source absent from `merged`, sorted; empty means covered.

    `every_number=True` is save-time dedup's stricter reading: there the question is not
    "did a merge keep the detail" but "is this the same fact", and "a team of 3" is not
    "a team of 20" — so one-digit numbers and ordinals are specifics too, and a
    category's numeric exemption does not apply."""
    items = [s if isinstance(s, Source) else Source(s) for s in sources]
    twins = _lowercase_words([s.content for s in items] + [merged])
    merged_lower = merged.lower()
    merged_dates, _ = _dates(merged)
    merged_date_set = set(merged_dates)
    merged_phones = {re.sub(r"\D", "", p) for p in _PHONE.findall(merged)}
    missing: set[str] = set()
    for source in items:
        found = extract_specifics(source, vocabulary, twins, every_number=every_number)
        for value in found.words | found.numbers | found.exact:
            if not _contains(merged_lower, value):
                missing.add(value)
        for digits in found.phones:
            if digits not in merged_phones:
                missing.add(_format_phone(source.content, digits))
        for date in found.dates:
            if not _date_covered(date, merged, merged_date_set):
                missing.add(str(date))
    return sorted(missing)


def _format_phone(text: str, digits: str) -> str:
    for m in _PHONE.finditer(text):
        if re.sub(r"\D", "", m.group(0)) == digits:
            return m.group(0)
    return digits


def vocabulary_payload(vocabulary: Vocabulary) -> VocabularyPayload:
    """The vocabulary as the cycle's workflow carries it."""
    return VocabularyPayload(
        extra_common=sorted(vocabulary.extra_common),
        always_specific=sorted(vocabulary.always_specific),
        numeric_exempt_categories=list(vocabulary.numeric_exempt_categories),
    )


def vocabulary_from(payload: VocabularyPayload) -> Vocabulary:
    return Vocabulary.build(
        payload.extra_common, payload.always_specific, payload.numeric_exempt_categories
    )
