"""The change feed read whole (`MemoryStore.changes()`): every write, in order, with the
entry's revision after it, its fingerprint and the op that made it, and no content —
what an audit reads, on every backend."""

from __future__ import annotations

from dreamkeeper.stores.contract.feed import JournalAction


def test_every_write_is_in_the_feed_in_order_with_its_revision_and_op(any_store):
    store = any_store
    entry = store.create("Kai Moreau moved to Lisbon in 2024.", category="people")
    other = store.create("The staging cluster is called Heron.", category="ops")
    again = store.put(
        entry.model_copy(update={"reinforcement_count": 2}),
        action=JournalAction.REINFORCED,
        reason="save op-1",
        op="op-1",
    )
    store.archive(entry.id, "outdated")
    store.restore(entry.id)
    mine = [(r.action, r.rev, r.op) for r in store.changes() if r.id == entry.id]
    assert mine == [
        (JournalAction.CREATED, 1, None),
        (JournalAction.REINFORCED, 2, "op-1"),
        (JournalAction.ARCHIVED, 3, None),
        (JournalAction.RESTORED, 4, None),
    ]
    feed = store.changes()
    assert [r.id for r in feed].index(other.id) == 1  # between the two writes of `entry`
    if getattr(store, "sealing", None) is None:
        assert feed[1].fingerprint == other.fingerprint
        assert feed[0].fingerprint == again.fingerprint
    else:  # sealed at rest: a fingerprint of a short text could be confirmed by guessing
        assert all(r.fingerprint is None and r.category is None for r in feed)
    assert all("Lisbon" not in (r.reason or "") for r in feed)
