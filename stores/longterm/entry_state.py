"""`EntryState`: what a long-term store holds in memory and keeps current from its feed.

Every backend holds the same things, the same way: the entries by id, the
applied-operation map (built on first ask), the BM25 index with the category groups it
uses, the entries it could not read (`problems`), and how far it has read its change
feed (`offset`: journal bytes, or a feed seq). This is one object, which is also exactly
what an index snapshot saves and what loading one gives back (`stores.longterm.snapshot`):
a store adopts a loaded state into the one it keeps (`adopt`) and hands that one to the
snapshot writer as it is.

`track`/`untrack` keep the entries, the op map and the index in step; `install`/`forget`
do that for an entry read from, or gone from, the store and also mark its vector
(`vectors`, the one thing held here that no snapshot carries: vectors are cached apart,
`stores.vectors.vectors`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from dreamkeeper.core.models import MemoryEntry
from dreamkeeper.stores.contract.records import AppliedOp
from dreamkeeper.stores.longterm.entry_table import EntryTable
from dreamkeeper.stores.longterm.records import document_text
from dreamkeeper.stores.search.bm25 import BM25Index, tokenize
from dreamkeeper.stores.vectors.vectors import EntryVectors


@dataclass(eq=False)
class EntryState:
    """The entries, the op map (None: not built yet), the index and its category
    groups, the skipped entries and the feed offset they reflect; `vectors`, when an
    embedding model is configured, learns which entries' vectors to read again."""

    entries: EntryTable = field(default_factory=EntryTable)
    problems: dict[Path, str] = field(default_factory=dict)
    ops: dict[str, AppliedOp] | None = None
    index: BM25Index = field(default_factory=BM25Index)
    category_ids: dict[str | None, int] = field(default_factory=dict)
    offset: int = 0
    vectors: EntryVectors | None = None

    def adopt(self, other: EntryState) -> None:
        """Hold what `other` holds (a loaded snapshot's state, or an empty one): the
        store keeps this one object for its life, so whoever was handed it sees the
        change. The vectors stay this state's (a snapshot carries none)."""
        self.entries, self.problems, self.ops = other.entries, other.problems, other.ops
        self.index, self.category_ids = other.index, other.category_ids
        self.offset = other.offset

    def clear(self) -> None:
        """Hold nothing, as before the first load (the vectors too)."""
        self.adopt(EntryState())
        if self.vectors is not None:
            self.vectors.reset()

    def category_id(self, category: str | None) -> int:
        cid = self.category_ids.get(category)
        if cid is None:
            cid = len(self.category_ids)
            self.category_ids[category] = cid
        return cid

    def categories_by_group(self) -> dict[int, str | None]:
        return {cid: cat for cat, cid in self.category_ids.items()}

    def applied_ops(self) -> dict[str, AppliedOp]:
        """The op map, built from the entries when first asked for."""
        if self.ops is None:
            self.ops = {
                o: AppliedOp.parse(e.id, v)
                for e in self.entries.values()
                for o, v in e.applied_ops.items()
            }
        return self.ops

    def track(self, entry: MemoryEntry, previous: MemoryEntry | None) -> None:
        """Hold `entry` (replacing `previous`) in the entries, the op map and the index."""
        self.entries[entry.id] = entry
        if self.ops is not None:
            if previous is not None:
                for op in previous.applied_ops:
                    self.ops.pop(op, None)
            for op, value in entry.applied_ops.items():
                self.ops[op] = AppliedOp.parse(entry.id, value)
        self.index.put(
            entry.id,
            tokenize(document_text(entry)),
            # The index's default scope is what default recall returns: current facts.
            archived=not entry.is_current,
            weight=0.5 + 0.5 * entry.importance_score,
            group=self.category_id(entry.category),
            importance=entry.importance_score,
            stamp=entry.last_seen_at.timestamp(),
        )

    def untrack(self, entry_id: str) -> MemoryEntry | None:
        previous = self.entries.pop(entry_id, None)
        if self.ops is not None and previous is not None:
            for op in previous.applied_ops:
                self.ops.pop(op, None)
        self.index.remove(entry_id)
        return previous

    def install(self, entry: MemoryEntry) -> None:
        """Hold `entry` as read from the store, and mark its vector to be checked."""
        previous = self.entries.get(entry.id)
        if previous == entry:  # the same id and category: the same file or row too
            return
        self.track(entry, previous)
        if self.vectors is not None:
            self.vectors.mark(entry.id)

    def forget(self, entry_id: str) -> None:
        """Let go of an entry that is gone from the store, and of its vector."""
        self.untrack(entry_id)
        if self.vectors is not None:
            self.vectors.forget(entry_id)

    def reindex(self) -> None:
        """The index built again from the entries held now, none read again. Why after
        an erase: the index keeps every term it has seen, postings or not, so it would
        still hold the erased text's terms (and a snapshot written from it would too)."""
        held = list(self.entries.values())
        self.entries, self.ops = EntryTable(), None
        self.index = BM25Index()
        self.category_ids = {}
        for entry in held:
            self.install(entry)
