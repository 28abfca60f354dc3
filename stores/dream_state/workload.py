"""Whether a dream cycle has anything to do for an agent, pass by pass.

Counted from state the store already keeps, in one read, so an idle agent costs a
dream sweep one check instead of a cycle of child workflows. Each count is what the pass
itself would find as of the same `as_of`; where a count cannot be exact cheaply it errs
towards work (a pass run for nothing costs time, a pass skipped wrongly only delays it to
the next cycle: no pass loses a memory by being skipped).

An agent found idle gets an *idle mark* (`IdleMarks`: for a file store `idle.json` in
its directory, `stores.files.idle_marks`; for a database store a row,
`stores.postgres.idle_marks`; sizes and times, never content): the earliest time a pass
gets work without any write (a decay step, an archive or a ledger passing the retention,
a settled cluster's backoff, a save in flight running out), and the state it was decided
on (on files: the journal, which every write to the store appends to; the clusters file;
the ledger folder; and on both the settings). While all of that is unchanged and the
mark's time has not come, the agent is idle without opening its store. The conversation log is looked at every time (one stat, or one row probe).
The state is always taken before the store is read, so a write in between makes the
mark not hold.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from datetime import datetime, timedelta

from dreamkeeper.core.dream_payloads import DreamWork
from dreamkeeper.core.settings import DecayParams, HighValueFloor
from dreamkeeper.policies.decay import decay_due, decay_due_at
from dreamkeeper.policies.gating import reopen_delay
from dreamkeeper.policies.in_flight import IN_FLIGHT_LIMIT, consolidatable, save_in_flight
from dreamkeeper.policies.merge import fold_key
from dreamkeeper.stores.contract import MemoryStore
from dreamkeeper.stores.contract.documents import AgentDocuments
from dreamkeeper.stores.conversation.conversation_log import LOG
from dreamkeeper.stores.dream_state.consolidation_state import ClusterState
from dreamkeeper.stores.dream_state.dream_ledger import DIR as LEDGERS
from dreamkeeper.stores.dream_state.dream_ledger import ledgers_before
from dreamkeeper.stores.longterm.conflicts import open_conflicts


def dream_work(
    store: MemoryStore,
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
        ) + ledgers_before(store.documents, cutoff)
    embedder = store.embeddings
    if embedder is not None:
        work.embeddings_configured = True
        # Missing or made from other content or by another model; a change of the
        # model's dimension alone is found by the backfill's probe, which runs whenever
        # consolidation has work (it needs the dimension) or any vector is missing.
        work.vectors = sum(1 for e in live if store.stored_vector(e, embedder.model_key) is None)
    candidates = [e for e in live if consolidatable(e, as_of)]
    work.held_back = len(live) - len(candidates)
    copies = Counter(fold_key(e) for e in candidates)
    work.consolidation = sum(n - 1 for n in copies.values())
    # Conflicts saves found and nobody settled that the cycle settles, LLM or not: those
    # the vocabulary confirms (a pair only a reading linked waits for an agent or LLM).
    work.consolidation += len(open_conflicts(store))
    if llm_configured:
        work.consolidation += sum(
            1 for e in candidates if e.consolidation_reviewed_hash != e.fingerprint
        )
        # A settled cluster whose backoff ran out reopens (merge-only). A cluster the
        # gate has no record of can also appear without any entry changing (a member
        # archived by hand changes its key); it waits for the next change or reopening.
        work.consolidation += sum(
            1
            for r in ClusterState(store.documents).load().values()
            if as_of - r.settled_at >= reopen_delay(r.declines)
        )
    work.preferences = conversation_waiting(store.documents)
    work.decay = sum(1 for e in live if decay_due(e, as_of, decay))
    return work


def settings_key(
    *,
    retention: timedelta,
    decay: DecayParams,
    floor: HighValueFloor,
    llm_configured: bool,
    model_key: bytes | None,
) -> str:
    """What the counts depend on besides the store: a mark made under other settings
    does not hold."""
    text = repr((retention, decay, floor, llm_configured, model_key))
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def conversation_waiting(documents: AgentDocuments) -> int:
    """1 when the conversation log has turns the preference pass has not read, else 0."""
    try:
        return 1 if documents.read(LOG, max_bytes=0) else 0
    except OSError:  # not a log (a link, a FIFO): the pass moves it aside
        return 1


def next_work_at(
    store: MemoryStore,
    *,
    retention: timedelta,
    decay: DecayParams,
    floor: HighValueFloor,
    llm_configured: bool,
) -> datetime | None:
    """The earliest time a pass of an idle agent gets work with no write to the store
    (None: never)."""
    times: list[datetime] = []
    for entry in store.entries(include_archived=True):
        if entry.archived_at is not None:
            if retention > timedelta(0) and not floor.protects(entry):
                times.append(entry.archived_at + retention)
            continue
        if (at := decay_due_at(entry, decay)) is not None:
            times.append(at)
        if save_in_flight(entry, entry.created_at):
            times.append(entry.created_at + IN_FLIGHT_LIMIT)
    if retention > timedelta(0):
        for name in store.documents.names(f"{LEDGERS}/"):
            if name.endswith(".jsonl") and (written := store.documents.written(name)):
                times.append(written + retention)
    if llm_configured:
        for r in ClusterState(store.documents).load().values():
            times.append(r.settled_at + reopen_delay(r.declines))
    return min(times) if times else None
