"""Hypothesis strategies for hostile values: any text (surrogates, controls, path
tricks, sizes just past the store's limits), numbers as text, ids, categories, tags,
timestamps, JSON values and garbage bytes, and `maybe` to mix them with sane values."""

from __future__ import annotations

import json
from datetime import UTC, datetime

from hypothesis import strategies as st

from dreamkeeper.core.validation import (
    MAX_CATEGORY_CHARS,
    MAX_CONTENT_CHARS,
    MAX_TAG_CHARS,
    MAX_TAGS,
)
from dreamkeeper.stores.safe_json import DEFAULT_MAX_DEPTH
from tests.harness.hostile.sandbox import SEEDED

# -- text ---------------------------------------------------------------------------------

ANY_CHAR = st.characters(codec=None, exclude_categories=())  # surrogates and controls too
hostile_text = st.one_of(
    st.text(ANY_CHAR, max_size=40),
    st.sampled_from(
        [
            "",
            " ",
            "\t\n",
            "\x00",
            "a\x00b",
            "\ud800",
            "x\udcff",
            "../../outside",
            "/etc/passwd",
            "a/../b",
            ".",
            "..",
            "a//b",
            "a/",
            "-",
            "C:\\x",
            "%2e%2e/",
            "\u202e",
            "😀" * 3,
            "nan",
            "inf",
            "-0",
            "1e309",
            "²",
            "٣",
            "9" * 5_000,
            "Ⅻ",
            "0x10",
            " 12 ",
        ]
    ),
    st.integers(1, 5).map(lambda n: "x" * (MAX_CONTENT_CHARS + n)),
    st.integers(1, 300).map(lambda n: " " * (n * 1_000) + "x"),
)
number_text = st.one_of(
    st.sampled_from(
        [
            "nan",
            "inf",
            "-inf",
            "1e309",
            "-1",
            "2",
            "0.5",
            "1",
            "0",
            "abc",
            "",
            "99999999999",
            "-99999999999",
            "0x1",
            "1_0",
            "²",
            "9" * 5_000,
        ]
    ),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.integers(-(10**15), 10**15).map(str),
)
entry_ids = st.one_of(
    st.sampled_from(
        [*SEEDED, "aaaaaaaaaaa7", "AAAAAAAAAAA1", "zzz", "../aaaaaaaaa1", "aaaaaaaaaaa1/", ""]
    ),
    hostile_text,
)
categories = st.one_of(
    st.sampled_from(
        [
            "people/colleagues",
            "notes",
            "linked",
            "a/b/c",
            "user-preferences",
            "../../outside",
            "/abs",
            "a/../b",
            "a//b",
            "x" * (MAX_CATEGORY_CHARS + 1),
            "a" * MAX_CATEGORY_CHARS,
        ]
    ),
    hostile_text,
)
tags_lists = st.one_of(
    st.lists(
        st.one_of(st.sampled_from(["t", "seed", "tag1", " spaced "]), hostile_text), max_size=5
    ),
    st.integers(MAX_TAGS - 2, MAX_TAGS + 8).map(lambda n: [f"x{i}" for i in range(n)]),
    st.just(["y" * (MAX_TAG_CHARS + 1)]),
)
times = st.one_of(
    st.sampled_from(
        [
            "2026-01-01T00:00:00Z",
            "2026-01-01",
            "0001-01-01T00:00:00+05:00",
            "9999-12-31T23:59:59-05:00",
            "0001-01-01T00:00:00",
            "9999-12-31",
            "2026-13-40",
            "yesterday",
            "",
            "2026-01-01T00:00:00+25:00",
        ]
    ),
    st.datetimes(timezones=st.sampled_from([UTC, None])).map(lambda d: d.isoformat()),
)


def deep(n: int, kind: str = "[") -> str:
    return ("[" * n + "]" * n) if kind == "[" else ('{"a":' * n + "1" + "}" * n)


garbage = st.one_of(
    st.binary(max_size=200),
    st.integers(DEFAULT_MAX_DEPTH + 1, 200_000).map(deep),
    st.integers(DEFAULT_MAX_DEPTH + 1, 50_000).map(lambda n: deep(n, "{")),
    st.sampled_from(
        [
            "",
            "null",
            "NaN",
            "[NaN]",
            '{"a": Infinity}',
            "[1e999]",
            "{",
            "[" * 10,
            '"\\ud800"',
            "\ufeff[]",
            "[" + "1," * 10 + "]",
            "9" * 5_000,
        ]
    ),
)


def jsonable(value: object) -> str:
    return json.dumps(value, allow_nan=True)


json_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(10**30), 10**30),
    st.floats(allow_nan=True, allow_infinity=True),
    hostile_text,
)
json_values = st.recursive(
    json_scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(hostile_text, inner, max_size=4)
    ),
    max_leaves=12,
)


def maybe(value_strategy: st.SearchStrategy, default: object) -> st.SearchStrategy:
    """A sensible value (`default`: a value or a strategy of them) or a hostile one.
    Hypothesis avoids repeating an example, so the sensible side varies too."""
    sane = default if isinstance(default, st.SearchStrategy) else st.just(default)
    # (one_of drops repeated branches: the weight comes from a draw instead)
    return st.integers(0, 7).flatmap(lambda n: value_strategy if n == 7 else sane)


sane_text = st.text(
    st.characters(categories=["L", "N", "Zs", "P"]), min_size=1, max_size=60
).filter(str.strip)
sane_category = st.sampled_from(
    ["people/colleagues", "notes", "user-preferences", "a/b/c", "projects/falcon", "linked"]
)
sane_tags = st.lists(st.from_regex(r"[a-z][a-z0-9-]{0,15}", fullmatch=True), max_size=4)
sane_importance = st.floats(0, 1)
sane_time = st.datetimes(
    min_value=datetime(2020, 1, 1), max_value=datetime(2030, 1, 1), timezones=st.just(UTC)
).map(datetime.isoformat)
