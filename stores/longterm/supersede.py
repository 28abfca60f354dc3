"""Supersede: a newer fact replaces an older one, which becomes history.

One checked step over the store contract (`stores.contract.MemoryStore`), so every
backend gets it: under the writer lock, exactly once by operation id, it writes only the
old entry — its validity end (`invalidAt`) and the id of what replaced it
(`supersededBy`) — by compare-and-set on the revision it just read. Its content is never
changed and it is never archived: as-of and history reads still find it.

It applies only if, at that moment:
- the old entry exists, is live, and is still current (not superseded already);
- it has not changed since it was shown, when the caller gives the fingerprint it saw;
- the new entry exists, is live and current, and is not the old one.
Otherwise nothing changes and the result says why. `unsupersede` is its inverse (and what
`dream undo` restores through the ledger's before-image).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime

from dreamkeeper.core.errors import Conflict, InvalidInput, NotFound, ReplaceRefused
from dreamkeeper.core.models import MemoryEntry, as_utc
from dreamkeeper.core.validation import validate_entry_id
from dreamkeeper.policies.supersede import Sameness, judge
from dreamkeeper.stores.contract import IntentLog, MemoryStore
from dreamkeeper.stores.contract.feed import JournalAction
from dreamkeeper.stores.longterm.readings import NO_READINGS, Readings
from dreamkeeper.stores.longterm.records import (
    MAY_BE_REPLACED_BY,
    MAY_REPLACE,
    retired_into,
    with_link,
)


@dataclass(frozen=True)
class Supersession:
    """What `supersede` did: applied now (or by an earlier attempt of the same op), or
    nothing, and why."""

    applied: bool
    detail: str | None = None


def refusal(
    old: MemoryEntry | None, new: MemoryEntry | None, old_id: str, new_id: str
) -> str | None:
    """Why `new` may not replace `old` now (None: it may). Pure: the dream's check asks
    it too, and a dry run reports it without writing."""
    if old_id == new_id:
        return "an entry cannot replace itself"
    if old is None:
        return f"{old_id} does not exist"
    if old.is_archived:
        return f"{old_id} is archived"
    if old.is_superseded:
        return f"{old_id} was already replaced by {old.superseded_by}"
    if new is None:
        return f"the replacement {new_id} does not exist"
    if new.is_archived:
        return f"the replacement {new_id} is not live"
    if new.is_superseded:
        return f"the replacement {new_id} was itself replaced by {new.superseded_by}"
    return None


def supersede(
    store: MemoryStore,
    old_id: str,
    new_id: str,
    *,
    op: str | None = None,
    expected_fingerprint: str | None = None,
    reason: str | None = None,
    ledger: IntentLog | None = None,
    now: datetime | None = None,
) -> Supersession:
    """Mark `old_id` as replaced by `new_id` — one atomic, checked step (see the module).
    A retry of the same `op` finds it applied, even if it was undone in between; with no
    op (a one-off call) only the state is checked."""
    validate_entry_id(old_id)
    validate_entry_id(new_id)
    with store.writing():
        if op is not None and store.applied(op) is not None:
            return Supersession(True, "already applied")
        old = store.get(old_id)
        new = store.get(new_id)
        if old is not None and old.superseded_by == new_id:
            return Supersession(True, "already replaced by it")
        why = refusal(old, new, old_id, new_id)
        if why is not None:
            return Supersession(False, why)
        assert old is not None and new is not None
        if expected_fingerprint is not None and old.fingerprint != expected_fingerprint:
            return Supersession(False, f"{old_id} changed since it was shown")
        at = as_utc(now) if now is not None else store.now()
        # The old fact ended when the new one became true; a replacement dated no later
        # than the old fact's own start (a back-filled save) ends it now instead, so a
        # validity period is never empty or reversed.
        end = new.valid_since if new.valid_since > old.valid_since else at
        if ledger is not None:
            ledger.note("supersede", [(old_id, old)])
        # put() compares the revision just read: a file edited behind the journal since
        # is refused (Conflict), never overwritten.
        store.put(
            old.model_copy(update={"invalid_at": end, "superseded_by": new_id}),
            action=JournalAction.SUPERSEDED,
            reason=reason or f"replaced by {new_id}",
            op=op,
            op_detail=new_id,
        )
        return Supersession(True)


def unsupersede(store: MemoryStore, entry_id: str, *, reason: str | None = None) -> MemoryEntry:
    """Make a superseded entry current again (its content was never touched). The
    entry that replaced it stays as it is. Unsuperseding a current entry is a no-op."""
    validate_entry_id(entry_id)
    with store.writing():
        current = store.require(entry_id)
        if not current.is_superseded:
            return current
        return store.put(
            current.model_copy(update={"invalid_at": None, "superseded_by": None}),
            action=JournalAction.UNSUPERSEDED,
            reason=reason or f"no longer replaced by {current.superseded_by}",
        )


def restore_or_unsupersede(
    store: MemoryStore, entry_id: str, *, force: bool = False
) -> MemoryEntry:
    """What "restore" means for an entry: an archived one comes back (`restore`), a
    superseded live one becomes current again (`unsupersede`)."""
    entry = store.require(validate_entry_id(entry_id))
    if entry.is_superseded and not entry.is_archived:
        return unsupersede(store, entry_id, reason="restored: current again")
    return store.restore(entry_id, force=force)


def successor(store: MemoryStore, entry: MemoryEntry) -> str | None:
    """The entry that replaced this one, following a replacement that was itself
    retired into others (an enriched original): the first live one it went into."""
    seen: set[str] = set()
    target = entry.superseded_by
    while target is not None and target not in seen:
        seen.add(target)
        found = store.get(target)
        if found is None or not found.is_archived:
            return target
        into = retired_into(found)
        if not into:
            return target
        target = into[0]
    return target


def history(store: MemoryStore, entry_id: str) -> list[MemoryEntry]:
    """Every version of the fact `entry_id` belongs to, oldest first: what it replaced
    (transitively) and what replaced it, up to the current version."""
    start = store.require(entry_id)
    everything = store.entries(include_archived=True)
    replaced: dict[str, list[MemoryEntry]] = {}
    for entry in everything:
        if entry.superseded_by is not None:
            nxt = successor(store, entry)
            if nxt is not None:
                replaced.setdefault(nxt, []).append(entry)
    chain: dict[str, MemoryEntry] = {start.id: start}
    # Back: everything that was replaced by a member, transitively.
    todo = [start.id]
    while todo:
        for older in replaced.get(todo.pop(), []):
            if older.id not in chain:
                chain[older.id] = older
                todo.append(older.id)
    # Forward: what replaced the start, up to the current version.
    cursor: MemoryEntry | None = start
    while cursor is not None and cursor.is_superseded:
        nxt = successor(store, cursor)
        cursor = store.get(nxt) if nxt is not None else None
        if cursor is None or cursor.id in chain:
            break
        chain[cursor.id] = cursor
        for older in replaced.get(cursor.id, []):
            chain.setdefault(older.id, older)
    return sorted(chain.values(), key=lambda e: (e.valid_since, e.created_at, e.id))


@dataclass(frozen=True)
class ReplaceCheck:
    """What `check_replaceable` found for a save's `replaces`, besides refusals:
    `forced`, replaced over the subject check (`force`), each with the check's reason
    (to journal); `unconfirmed`, the check cannot tell whether each is an older version
    of this fact (`policies.supersede`: neither the same subject nor another), so it
    stays current, linked as a possible change — each with why."""

    forced: dict[str, str] = field(default_factory=dict)
    unconfirmed: dict[str, str] = field(default_factory=dict)


def check_replaceable(
    store: MemoryStore,
    replaces: Iterable[str],
    new_id: str,
    *,
    content: str | None = None,
    category: str | None = None,
    force: bool = False,
    readings: Readings = NO_READINGS,
) -> ReplaceCheck:
    """Refuse a save's `replaces` before anything is written: each must exist and be
    current (or already be replaced by `new_id`: a retried save) and, given the new
    fact's `content`, not be about another subject (`policies.supersede`: another entity
    or attribute) — unless `force`. One the check cannot tell apart is not refused: it
    is listed as unconfirmed (replaced anyway with `force`). `readings` (prepared
    outside the lock, `stores.longterm.readings`) settle what the vocabulary cannot."""
    checked = ReplaceCheck()
    for old_id in replaces:
        old = store.get(validate_entry_id(old_id))
        if old_id == new_id:
            raise InvalidInput("a memory cannot replace itself")
        if old is None:
            raise NotFound(f"cannot replace {old_id}: no such memory")
        if old.superseded_by == new_id:
            continue
        if old.is_archived:
            raise Conflict(f"cannot replace {old_id}: it is archived")
        if old.superseded_by is not None:
            raise Conflict(
                f"cannot replace {old_id}: it was already replaced by {old.superseded_by} "
                "(replace the current version instead)"
            )
        if content is None:
            continue
        verdict = judge(
            old,
            content,
            category,
            old_reading=readings.get(old.content),
            new_reading=readings.get(content),
        )
        if verdict.sameness is Sameness.SAME:
            continue
        if force:
            checked.forced[old_id] = verdict.reason
        elif verdict.sameness is Sameness.UNKNOWN:
            checked.unconfirmed[old_id] = verdict.reason
        else:
            raise ReplaceRefused(
                f"not saved: {old_id} is not an older version of this fact "
                f"({verdict.reason}); save without replaces to keep both, or with "
                "force_replace to replace it anyway"
            )
    return checked


def link_possible_change(store: MemoryStore, older_id: str, newer_id: str) -> None:
    """Link a save's `replaces` the subject check could not confirm (see the module).
    Idempotent; call under the writer lock."""
    store.mutate(
        older_id,
        lambda e: with_link(e, MAY_BE_REPLACED_BY, newer_id),
        action=JournalAction.UPDATED,
        reason=f"{newer_id} says it replaces it (cannot tell: both kept)",
    )
    store.mutate(
        newer_id,
        lambda e: with_link(e, MAY_REPLACE, older_id),
        action=JournalAction.UPDATED,
        reason=f"says it replaces {older_id} (cannot tell: both kept)",
    )


def replace_op(new_id: str, old_id: str) -> str:
    """The operation id of a save's own replacement of `old_id` (exactly once per save)."""
    return f"replace-{new_id}-{old_id}"


def apply_replaces(
    store: MemoryStore,
    new_id: str,
    replaces: Iterable[str],
    *,
    checked: ReplaceCheck | None = None,
) -> list[str]:
    """Supersede each of `replaces` by `new_id` (a save that names what it replaces);
    returns those now replaced by it. Call under the same writer-lock hold as
    `check_replaceable` and the save, so nothing comes in between. A replacement
    `checked` found unconfirmed is linked as a possible change instead; one it let
    through by force says so in its journal record."""
    checked = checked or ReplaceCheck()
    done = []
    for old_id in replaces:
        if old_id in checked.unconfirmed:
            link_possible_change(store, old_id, new_id)
            continue
        why = checked.forced.get(old_id)
        reason = f"replaced by {new_id}, forced over the subject check ({why})" if why else None
        applied = supersede(store, old_id, new_id, op=replace_op(new_id, old_id), reason=reason)
        if applied.applied:
            done.append(old_id)
    return done
