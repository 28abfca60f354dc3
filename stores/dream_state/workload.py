"""Whether a dream cycle has anything to do for an agent, pass by pass.

Counted from state the store already keeps, in one read, so an idle agent costs a
dream sweep one check instead of a cycle of child workflows. Each count is what the pass
itself would find as of the same `as_of`; where a count cannot be exact cheaply it errs
towards work (a pass run for nothing costs time, a pass skipped wrongly only delays it to
the next cycle: no pass loses a memory by being skipped).
"""

from __future__ import annotations

import os
from collections import Counter
from datetime import datetime, timedelta

from dreamkeeper.core.dream_payloads import DreamWork
from dreamkeeper.core.settings import DecayParams, HighValueFloor
from dreamkeeper.policies.decay import decay_due
from dreamkeeper.policies.gating import reopen_delay
from dreamkeeper.policies.in_flight import consolidatable
from dreamkeeper.policies.merge import fold_key
from dreamkeeper.stores.conversation.conversation_log import ConversationLog
from dreamkeeper.stores.dream_state.consolidation_state import ClusterState
from dreamkeeper.stores.dream_state.dream_ledger import ledgers_before
from dreamkeeper.stores.longterm.memory_store import FileMemoryStore


def dream_work(
    store: FileMemoryStore,
    as_of: datetime,
    *,
    retention: timedelta,
    decay: DecayParams,
    floor: HighValueFloor,
    llm_configured: bool,
) -> DreamWork:
    work = DreamWork(agent_id=store.agent_id)
    everything = store.entries(include_archived=True)
    live = [e for e in everything if not e.is_archived]
    work.live = len(live)
    if retention > timedelta(0):
        cutoff = as_of - retention
        work.purge = sum(
            1
            for e in everything
            if e.archived_at is not None and e.archived_at < cutoff and not floor.protects(e)
        ) + ledgers_before(store.files, cutoff)
    embedder = store.embeddings
    if embedder is not None:
        work.embeddings_configured = True
        # Missing or made from other content or by another model; a change of the
        # model's dimension alone is found by the backfill's probe, which runs whenever
        # consolidation has work (it needs the dimension) or any vector is missing.
        work.vectors = sum(1 for e in live if store.stored_vector(e, embedder.model_key) is None)
    candidates = [e for e in live if consolidatable(e, as_of)]
    copies = Counter(fold_key(e) for e in candidates)
    work.consolidation = sum(n - 1 for n in copies.values())
    if llm_configured:
        work.consolidation += sum(
            1 for e in candidates if e.consolidation_reviewed_hash != e.fingerprint
        )
        # A settled cluster whose backoff ran out reopens (merge-only). A cluster the
        # gate has no record of can also appear without any entry changing (a member
        # archived by hand changes its key); it waits for the next change or reopening.
        work.consolidation += sum(
            1
            for r in ClusterState(store.root).load().values()
            if as_of - r.settled_at >= reopen_delay(r.declines)
        )
    try:
        work.preferences = os.lstat(ConversationLog(store.root).path).st_size
    except FileNotFoundError:
        work.preferences = 0
    work.decay = sum(1 for e in live if decay_due(e, as_of, decay))
    return work
