"""Named crash points at the store's write boundaries, for deterministic fault tests.

Every place where a crash would leave two files disagreeing (an entry file and its
journal record, a replacement and its source's retirement, ...) calls `crash_point(name)`.
In production it does nothing but a dictionary lookup. A test arms a point:

- in process, `armed(name)` makes the point raise `SimulatedCrash` (a `BaseException`, so
  no `except Exception` on the way swallows it) the next time it is reached;
- in a child process, `DREAMKEEPER_CRASH_POINT=name` makes the point end the process at
  once with `os._exit(137)`, as a SIGKILL would, without unwinding or flushing anything.

Then the test does what a worker would: retry with the same store (an exception) or with
a fresh one (a dead process), and checks fresh and long-lived readers.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterator

ENV_VAR = "DREAMKEEPER_CRASH_POINT"
KILLED_EXIT_CODE = 137

# The boundaries, in write order. A test that arms a name not listed here is a typo.
JOURNAL_APPENDED = "journal-appended"  # record durable, entry file not yet replaced
FILE_REPLACED = "file-replaced"  # entry file replaced, old path of a move not yet removed
BATCH_JOURNALED = "batch-journaled"  # a bulk write's records durable, no file written yet
BATCH_HALF_WRITTEN = "batch-half-written"  # a bulk write crashed halfway through its files
# The PostgreSQL backend: one transaction per write.
TRANSACTION_OPEN = "transaction-open"  # every statement run, not committed
COMMITTED = "committed"  # committed, the caller not yet told
# A database write whose transaction has made some of its statements, not all: a crash
# here must leave nothing of it (the transaction rolls back).
ROWS_HALF_WRITTEN = "rows-half-written"
# Compacting the PostgreSQL change feed: the prefix deleted, not committed.
FEED_COMPACTING = "feed-compacting"
# Compacting the file journal: the new generation durable beside the journal, not in place;
# then in place, the index snapshot not yet written for it.
JOURNAL_COMPACTING = "journal-compacting"
JOURNAL_COMPACTED = "journal-compacted"
MIGRATE_AGENT_COPIED = "migrate-agent-copied"  # `migrate`: one agent copied, the next not
ERASE_JOURNALED = "erase-journaled"  # an erasure's records durable, no file removed yet
FORGET_BEGUN = "forget-begun"  # a forget request journaled (ids only), nothing erased yet
FORGET_TIERS_SCRUBBED = "forget-tiers-scrubbed"  # other tiers scrubbed, entries not yet erased
# Re-keying an agent on PostgreSQL (stores.postgres.sealing) after a forget of entries:
AGENT_KEY_ROTATED = "agent-key-rotated"  # a new data key is current, no row sealed with it yet
ROWS_HALF_RESEALED = "rows-half-resealed"  # long-term rows sealed anew, the other tiers not
# Rotating the key-encryption key (stores.postgres.keyring) after a forget destroyed a key:
KEK_WRITTEN = "kek-written"  # a new KEK in the keyring file, the database not told
KEK_LISTED = "kek-listed"  # the new KEK current in the database, no data key wrapped by it
KEYS_HALF_REWRAPPED = "keys-half-rewrapped"  # some data keys wrapped by the new KEK, not all
KEK_RETIRED = "kek-retired"  # old KEKs delisted in the database, still in the keyring file
POINTS = frozenset(
    {
        JOURNAL_APPENDED,
        FILE_REPLACED,
        BATCH_JOURNALED,
        BATCH_HALF_WRITTEN,
        TRANSACTION_OPEN,
        COMMITTED,
        ROWS_HALF_WRITTEN,
        FEED_COMPACTING,
        JOURNAL_COMPACTING,
        JOURNAL_COMPACTED,
        MIGRATE_AGENT_COPIED,
        ERASE_JOURNALED,
        FORGET_BEGUN,
        FORGET_TIERS_SCRUBBED,
        AGENT_KEY_ROTATED,
        ROWS_HALF_RESEALED,
        KEK_WRITTEN,
        KEK_LISTED,
        KEYS_HALF_REWRAPPED,
        KEK_RETIRED,
    }
)


class SimulatedCrash(BaseException):
    """Raised at an armed crash point: the process "died" here."""


_armed: dict[str, int] = {}  # point -> how many more passes before it fires
_guard = threading.Lock()


def crash_point(name: str) -> None:
    if not _armed and ENV_VAR not in os.environ:
        return  # the production path: nothing armed
    if os.environ.get(ENV_VAR) == name:
        os._exit(KILLED_EXIT_CODE)
    with _guard:
        left = _armed.get(name)
        if left is None:
            return
        if left > 0:
            _armed[name] = left - 1
            return
        del _armed[name]
    raise SimulatedCrash(name)


@contextlib.contextmanager
def armed(name: str, *, after: int = 0) -> Iterator[None]:
    """Crash at `name` once, after letting it pass `after` times; disarmed on exit."""
    if name not in POINTS:
        raise ValueError(f"unknown crash point {name!r}; known: {sorted(POINTS)}")
    with _guard:
        _armed[name] = after
    try:
        yield
    finally:
        with _guard:
            _armed.pop(name, None)
