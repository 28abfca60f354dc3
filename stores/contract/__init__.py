"""The store contract: what every backend of the three memory tiers provides, and what it
guarantees. The activities, the agent side and the service speak to a store through these
Protocols, and every value they take or hand out is defined here too, so the contract
stands on no backend: `stores.files` (one data directory) and `stores.postgres` (one
database) each implement all of it, and nothing under `stores/contract/` imports either
(tests/stores/test_wings.py, and an import-linter contract in pyproject.toml). The
indexes a store hands out (`BM25Index`, `VectorIndex`) and the embedding model
(`Embedder`) are the shared modules of `stores.search` and `stores.vectors`.

Long-term memory (`MemoryStore`), per agent:

- **Identity.** A store belongs to one agent (`agent_id`) inside one store identity (the
  data directory's or database's id, `stores.contract.identity`): the worker refuses a caller that
  names another store id, so two backends never silently serve one agent's memory.
- **Compare-and-set on revision.** Every entry carries a `revision`, raised by one on each
  write. `put` writes an entry computed from the revision it carries and refuses
  (`Conflict`) when the stored entry moved past it: a stale writer never overwrites newer
  state. `mutate` is the read-modify-write form (the change sees the entry as stored now).
- **Exactly once by op id.** A write made on behalf of an operation (`put(op=...)`, a
  fold) records the op id in the entry it changes, atomically with the change;
  `applied(op)` answers whether (and how) it was applied. A retry asks that, under
  `writing()`, and never infers "done" from what an entry looks like.
- **Retire into live replacements.** `retire_into` archives an entry into others only if,
  inside the same atomic step, every replacement is live and together they carry the
  entry's specifics; otherwise nothing changes and the reason is returned. Restoring an
  entry whose replacements are still live is refused unless forced.
- **Nothing lost by mistake.** Archive keeps the entry (searchable with
  `include_archived`); only `purge` deletes, and only archives older than the retention
  that its `keep` rule does not protect — and `erase`, a person's `forget`
  (`stores.forget`), which deletes the entries it names now, caches included.
- **The change feed.** Every write is recorded in a per-agent feed, in order, at an
  increasing offset. Every read first catches up with the feed from the offset this
  instance last read, so a long-lived reader and its in-memory indexes (`index()`,
  `vectors()`) see every write of every process, and a write never waits for readers.
  A write that died half way is repaired by the next writer, and readers converge on it.
- **Writer exclusion.** `writing()` holds the agent's writer lock (re-entrant) across a
  lookup and the writes that depend on it: no other writer, in any process, comes in
  between.

- **Documents.** `documents` is the agent's `AgentDocuments` (`stores.contract.documents`): the
  medium, on the same backend, of what dream cycles keep between runs — the undo ledgers,
  settled clusters, the approval setting, the coverage vocabulary — and of the
  conversation log. Nothing a cycle needs lives outside it, so any worker can run it.

Working memory (`WorkingMemoryStore`) is a scratchpad of keys with a TTL, per namespace;
conversation memory (`ConversationStore`) holds each session's recent turns, its
out-of-window archive and the conversation log. Both refresh from the shared storage on
every read, so every process sees the others' writes.
"""

from __future__ import annotations

from dreamkeeper.stores.contract.conversation import Conversation, ConversationStore, Turn
from dreamkeeper.stores.contract.documents import AgentDocuments
from dreamkeeper.stores.contract.feed import JournalAction, JournalRecord
from dreamkeeper.stores.contract.memory import IntentLog, MemoryStore
from dreamkeeper.stores.contract.records import (
    AppliedOp,
    BulkReport,
    NewEntry,
    PurgeReport,
    Retirement,
    StoredVector,
)
from dreamkeeper.stores.contract.working import Listing, WorkingEntry, WorkingMemoryStore

__all__ = [
    "AgentDocuments",
    "AppliedOp",
    "BulkReport",
    "Conversation",
    "ConversationStore",
    "IntentLog",
    "JournalAction",
    "JournalRecord",
    "Listing",
    "MemoryStore",
    "NewEntry",
    "PurgeReport",
    "Retirement",
    "StoredVector",
    "Turn",
    "WorkingEntry",
    "WorkingMemoryStore",
]
