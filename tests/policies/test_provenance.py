from __future__ import annotations

import pytest

from dreamkeeper.core.models import MemoryEntry
from dreamkeeper.core.settings import DEFAULT_FLOOR
from dreamkeeper.policies.provenance import (
    combined_source,
    parse_source,
    reinforced_source,
    trust,
)


@pytest.mark.parametrize(
    ("raw", "value"),
    [
        ("user", "user"),
        ("USER", "user"),
        ("tool:web_browse", "tool:web_browse"),
        ("inferred", "inferred"),
        ("inference", "inferred"),
        (None, None),
        ("", None),
    ],
)
def test_known_sources_parse(raw, value):
    parsed = parse_source(raw)
    assert parsed.value == value and parsed.dropped is None and parsed.note is None


@pytest.mark.parametrize("raw", ["rumour", "tool:", "tool:has space", "users"])
def test_unknown_sources_are_dropped_and_reported(raw):
    parsed = parse_source(raw)
    assert parsed.value is None and parsed.dropped == raw
    assert raw in parsed.note and "dropped" in parsed.note


def test_trust_order():
    assert trust("user") > trust("tool:x") > trust("inferred") > trust(None)


@pytest.mark.parametrize(
    ("existing", "incoming", "kept"),
    [
        ("inferred", "user", "user"),
        ("user", "inferred", "user"),
        (None, "tool:a", "tool:a"),
        ("tool:a", "tool:b", "tool:a"),
        ("inferred", None, "inferred"),
    ],
)
def test_reinforcement_keeps_the_most_trusted(existing, incoming, kept):
    assert reinforced_source(existing, incoming) == kept


@pytest.mark.parametrize(
    ("sources", "result"),
    [
        (["user", "user"], "user"),
        (["user", "inferred"], "inferred"),
        (["user", "tool:a"], "tool:a"),
        (["user", None], None),
        (["tool:a", "inferred", "user"], "inferred"),
    ],
)
def test_combining_takes_the_least_trusted(sources, result):
    assert combined_source(sources) == result


def test_high_value_floor():
    from datetime import UTC, datetime

    t = datetime(2026, 1, 1, tzinfo=UTC)

    def make(**kw):
        return MemoryEntry(
            id="0123456789ab",
            content="x",
            created_at=t,
            last_seen_at=t,
            **kw,
        )

    assert DEFAULT_FLOOR.protects(make(importance_score=0.80))
    assert DEFAULT_FLOOR.protects(make(importance_score=0.1, reinforcement_count=5))
    assert not DEFAULT_FLOOR.protects(make(importance_score=0.79, reinforcement_count=4))
