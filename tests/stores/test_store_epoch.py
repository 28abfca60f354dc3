"""Invariant 24 on both backends: an agent store has an identity (its epoch) that no
forget reuses. A long-lived store (serve, a worker) that read an agent before another
process forgot the whole agent and wrote it again, up to the very same feed offset,
returns none of the forgotten entries; and a snapshot written from its stale state is
never used by anyone."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from dreamkeeper.core.errors import Conflict
from dreamkeeper.stores.contract import MemoryStore
from dreamkeeper.stores.search.query import search
from tests.stores.conftest import Backend

AGENT = "agent-1"
COUNT = 12


@pytest.fixture
def forget_whole_agent(
    long_term: Backend, tier_db: Any, sealing: Any, tmp_path: Path
) -> Callable[[], None]:
    """Another process's whole-agent forget, on this test's backend."""

    def forget() -> None:
        if tier_db is None:
            from dreamkeeper.stores.files.forgetting import file_forgetting

            root = tmp_path / "data"
            receipt = file_forgetting(root).forget_agent(AGENT)
        else:
            from dreamkeeper.stores.postgres.forget import postgres_forgetting

            receipt = postgres_forgetting(tier_db, sealing=sealing).forget_agent(AGENT)
        assert receipt.verified

    return forget


def _old(store: MemoryStore) -> list[str]:
    return [store.create(f"Old fact {i:02d} about Zyxwquat").id for i in range(COUNT)]


def _new(store: MemoryStore) -> list[str]:
    # The same lengths as the old ones: the rewritten feed reaches the very same offset.
    return [store.create(f"New fact {i:02d} about Brimbelt").id for i in range(COUNT)]


def test_a_forgotten_agent_written_again_to_the_same_offset_never_comes_back(
    long_term: Backend, forget_whole_agent: Callable[[], None]
):
    stale = long_term.open(AGENT)
    old = _old(stale)
    assert len(search(stale, "Zyxwquat", limit=50)) == COUNT
    forget_whole_agent()
    writer = long_term.open(AGENT)
    new = _new(writer)
    # By offsets alone, nothing happened: the blind spot this guards.
    assert writer.feed_offset == stale.feed_offset

    assert search(stale, "Zyxwquat", limit=50) == []
    assert all(stale.get(i) is None for i in old)
    assert {e.id for e in stale.entries(include_archived=True)} == set(new)
    assert len(search(stale, "Brimbelt", limit=50)) == COUNT
    # It writes into the store as it is now, never its view of the erased one.
    later = stale.create("A later fact about Brimbelt")
    fresh = long_term.open(AGENT)
    assert {e.id for e in fresh.entries(include_archived=True)} == {*new, later.id}


def test_a_snapshot_written_from_a_stale_state_is_never_used(
    long_term: Backend, forget_whole_agent: Callable[[], None]
):
    stale = long_term.open(AGENT)
    old = _old(stale)
    assert stale.entries()
    forget_whole_agent()
    new = _new(long_term.open(AGENT))
    # The interleaving no catch-up can close: the forget and the rewrite land right
    # after the stale store's last catch-up, and it writes its snapshot from what it
    # holds (a dream's maintenance pass does this for a large store).
    stale.storage.catch_up = lambda: None  # type: ignore[method-assign]
    stale.save_snapshot()

    fresh = long_term.open(AGENT)
    assert {e.id for e in fresh.entries(include_archived=True)} == set(new)
    assert not fresh.opened_from_snapshot
    assert search(fresh, "Zyxwquat", limit=50) == [] and all(fresh.get(i) is None for i in old)
    # A snapshot written by the current store is used again.
    assert fresh.save_snapshot()
    again = long_term.open(AGENT)
    assert {e.id for e in again.entries(include_archived=True)} == set(new)
    assert again.opened_from_snapshot


def test_a_write_from_a_view_of_an_erased_store_is_refused_on_postgres(
    long_term: Backend, forget_whole_agent: Callable[[], None]
):
    """Inside a hold the store serves its own view; a commit from that view after the
    store was made again is refused with nothing written, and the retry writes into the
    store as it is now."""
    if long_term.kind != "postgres":
        pytest.skip("a file write re-reads its target under the lock; no view to refuse")
    stale = long_term.open(AGENT)
    _old(stale)
    forget_whole_agent()
    new = _new(long_term.open(AGENT))
    stale.storage.catch_up = lambda: None  # type: ignore[method-assign]
    with pytest.raises(Conflict, match="erased and made again"):
        stale.create("Written from the stale view")
    del stale.storage.catch_up
    retried = stale.create("Written from the stale view")
    assert {e.id for e in long_term.open(AGENT).entries()} == {*new, retried.id}
