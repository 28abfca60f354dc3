"""The change feed, on both backends: whatever two writers do to one agent, in any order,
a reader opened before (catching up from its offset) and one opened after see exactly
what the writers left, and a stale writer's compare-and-set is refused."""

from __future__ import annotations

import itertools
from datetime import timedelta

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dreamkeeper.core.errors import Conflict
from dreamkeeper.stores.contract.feed import JournalAction
from dreamkeeper.stores.search.query import search

WORDS = ["orion", "zebra", "tea", "lemon", "chicago", "python", "blazor", "friday"]
_agents = itertools.count()

step = st.one_of(
    st.tuples(
        st.just("create"),
        st.integers(0, 1),
        st.lists(st.sampled_from(WORDS), min_size=1, max_size=4),
    ),
    st.tuples(st.just("update"), st.integers(0, 1), st.integers(0, 20), st.sampled_from(WORDS)),
    st.tuples(st.just("archive"), st.integers(0, 1), st.integers(0, 20)),
    st.tuples(st.just("restore"), st.integers(0, 1), st.integers(0, 20)),
    st.tuples(st.just("importance"), st.integers(0, 1), st.integers(0, 20), st.integers(0, 10)),
    st.tuples(st.just("purge"), st.integers(0, 1)),
)


@settings(
    max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(steps=st.lists(step, min_size=1, max_size=12))
def test_readers_catch_up_with_any_sequence_of_two_writers(long_term, clock, steps):
    agent = f"feed-{next(_agents)}"
    writers = [long_term.open(agent), long_term.open(agent)]
    early = long_term.open(agent)
    early.entries()
    ids: list[str] = []
    for kind, who, *args in steps:
        store = writers[who]
        if kind == "create":
            ids.append(store.create(" ".join(args[0]), category="notes").id)
            continue
        if kind == "purge":
            clock.advance(days=100)
            store.purge(timedelta(days=90))
            ids = [i for i in ids if store.get(i) is not None]
            continue
        if not ids:
            continue
        target = ids[args[0] % len(ids)]
        if kind == "update":
            store.update(target, content=f"{store.require(target).content} {args[1]}")
        elif kind == "archive":
            store.archive(target, "deleted by agent tool")
        elif kind == "restore":
            store.restore(target, force=True)
        else:
            store.update_importance(target, args[1] / 10)
    fresh = long_term.open(agent)
    truth = {e.id: e for e in fresh.entries(include_archived=True)}
    for reader in (early, *writers):
        assert {e.id: e for e in reader.entries(include_archived=True)} == truth
    for word in WORDS:  # the long-lived index ranks as a fresh one does
        assert [h.entry.id for h in search(early, word, limit=50)] == [
            h.entry.id for h in search(fresh, word, limit=50)
        ]


def test_a_writer_that_read_before_another_wrote_is_refused(long_term):
    first, second = long_term.open(), long_term.open()
    entry = first.create("Trish takes her tea with lemon.", category="people")
    seen = second.require(entry.id)
    first.update(entry.id, content="Trish takes her tea with honey.")
    with pytest.raises(Conflict):
        second.put(seen.model_copy(update={"importance_score": 0.9}), action=JournalAction.UPDATED)
    assert long_term.open().require(entry.id).content == "Trish takes her tea with honey."
