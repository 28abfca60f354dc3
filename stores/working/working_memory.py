"""Working memory: global, path-namespaced scratch space with a TTL, per agent.

Keys are full paths (`session/abc123/emails_inbox`); the first two segments are the
namespace. Callers write only to their own namespace (the tools are bound to one), read
any namespace by full key, and never write under `stash/` — that prefix is the agent
loop's tool-result stash (`put_stash`), so every key there was written by the loop.
Prefixes (listing, search, `clear`) and the category filter match whole segments.

These rules are written once here (`WorkingMemory`) for every backend, over an
in-memory copy of the entries grouped by top-level segment. A backend is a
`WorkingStorage` object handed in, not a subclass: it keeps the segments (files of
`stores.files.working_memory`, rows of `stores.postgres.working_memory`) and its own
state, and tells which segments changed, so the copy is refreshed on every read and a
write by another process is seen on the next one. Expired entries are invisible at once
and swept from the storage hourly (by the next write after the hour).

With an embedding model, a saved value is embedded on a background thread (a save never
waits), keyed to the value's fingerprint (`stores.vectors.working_vectors`), and search
ranks with long-term memory's hybrid rule (`stores.search.fusion.fuse`, with the recency boost
on the stored time; there is no importance).
"""

from __future__ import annotations

import builtins
import contextlib
import logging
import re
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Protocol, Unpack

import numpy as np

from dreamkeeper.core.errors import InvalidInput
from dreamkeeper.core.models import as_utc, utc_now
from dreamkeeper.core.validation import (
    STASH_ROOT,
    category_matches,
    require_unicode,
    validate_agent_id,
    validate_tags,
)
from dreamkeeper.stores.contract.backend import TierOptions
from dreamkeeper.stores.contract.working import Listing, WorkingEntry, namespace_of
from dreamkeeper.stores.search.bm25 import BM25Index, query_terms, tokenize
from dreamkeeper.stores.search.fusion import fuse
from dreamkeeper.stores.vectors.working_vectors import VectorStorage, WorkingVectors

log = logging.getLogger(__name__)

DEFAULT_TTL = timedelta(minutes=5)
BACKGROUND_MIN_TTL = timedelta(hours=4)  # subagents and patrols: outlive batch work
MAX_TTL = timedelta(days=7)
MAX_PER_NAMESPACE = 50
LIST_CAP = 500
SEARCH_LIMIT = 20
MAX_KEY_CHARS = 256
MAX_VALUE_CHARS = 262_144
MAX_CATEGORY_CHARS = 200
SWEEP_EVERY = timedelta(hours=1)
RESERVED_ROOTS = ("session", "patrol", "subagent", STASH_ROOT)

_SEGMENT = re.compile(r"[A-Za-z0-9_\-.:@]+")


class WorkingMemoryFull(InvalidInput):
    """The namespace already holds its limit of live entries."""


def validate_key(key: str) -> str:
    """A path of segments of letters, digits and `_ - . : @`; no empty, `.` or `..`."""
    if not isinstance(key, str) or not key.strip():
        raise InvalidInput("working-memory key is empty")
    key = key.strip()
    if len(key) > MAX_KEY_CHARS:
        raise InvalidInput(f"working-memory key is longer than {MAX_KEY_CHARS} characters")
    segments = key.split("/")
    for segment in segments:
        if segment in ("", ".", "..") or not _SEGMENT.fullmatch(segment):
            raise InvalidInput(
                f"invalid working-memory key {key!r}: use '/'-separated segments of letters, "
                "digits, '_', '-', '.', ':' or '@' (no empty, '.' or '..' segment)"
            )
    return key


def validate_namespace(namespace: str) -> str:
    namespace = validate_key(namespace)
    if namespace.count("/") != 1:
        raise InvalidInput(
            f"invalid namespace {namespace!r}: expected two segments, like session/abc"
        )
    return namespace


def is_under(key: str, prefix: str) -> bool:
    """Whole-segment prefix: `patrol` covers `patrol/x/y`, `patrol/x` covers `patrol/x/y`."""
    return key == prefix or key.startswith(prefix.rstrip("/") + "/")


def resolve_ttl(ttl: timedelta | None, *, background: bool) -> timedelta:
    ttl = DEFAULT_TTL if ttl is None else ttl
    if ttl <= timedelta(0) or ttl > MAX_TTL:
        raise InvalidInput(f"invalid TTL {ttl}: expected more than 0 and at most {MAX_TTL}")
    return max(ttl, BACKGROUND_MIN_TTL) if background else ttl


def _document(entry: WorkingEntry) -> list[str]:
    return tokenize(
        " ".join(
            [entry.key.replace("/", " "), entry.category or "", " ".join(entry.tags), entry.value]
        )
    )


@dataclass
class StoredSegment:
    """One top-level segment's entries as a backend stores them, and its signature:
    what the backend compares to see a change (a file's stat, the agent's version)."""

    signature: object
    entries: dict[str, WorkingEntry] = field(default_factory=dict)


Segments = dict[str, dict[str, WorkingEntry]]  # top-level segment -> key -> entry


class WorkingStorage(Protocol):
    """A backend's steps under the shared working-memory rules (`WorkingMemory`): where
    the entries of an agent lie, grouped by top-level segment, and its writer exclusion.
    Every write step runs inside `writing()`."""

    def changed(
        self, known: Mapping[str, object], now: datetime
    ) -> dict[str, StoredSegment | None]:
        """The segments stored now whose signature is not the one in `known` (segment ->
        signature of the copy in memory), with their entries live at `now`; None for a
        segment of `known` that is gone."""
        ...

    def writing(self) -> AbstractContextManager[object]:
        """Hold the agent's writer exclusion (across processes) for a refresh and the
        writes that depend on it."""
        ...

    def write(
        self, segment: str, entries: dict[str, WorkingEntry], old: Mapping[str, WorkingEntry]
    ) -> object:
        """Replace a segment's stored entries (`old` as last read) with `entries`;
        returns the signature of what is stored now."""
        ...

    def sweep(self, now: datetime, live: Segments) -> tuple[int, dict[str, object]]:
        """Delete what is stored beyond the `live` entries of each segment (the expired
        ones); how many went, and the new signature of each segment rewritten."""
        ...

    def erase_matching(
        self, mentions: Callable[[str], bool], live: Segments
    ) -> tuple[builtins.list[str], dict[str, StoredSegment]]:
        """Delete every stored entry, live or expired but not yet swept, whose key or
        value `mentions` the forgotten text, with its stored vector (whichever process
        made it); the keys removed and the segments as now stored."""
        ...


class WorkingMemory:
    """The working-memory store: validation, the namespace rules and cap, the stash
    rule, expiry, listing and ranking, over an in-memory copy of the entries grouped by
    top-level segment (with its search index), refreshed from `storage` on every read."""

    def __init__(
        self,
        agent_id: str,
        storage: WorkingStorage,
        vectors: VectorStorage,
        **options: Unpack[TierOptions],
    ) -> None:
        self.agent_id = validate_agent_id(agent_id)
        self.storage = storage
        self.embeddings = embeddings = options.get("embeddings")
        # Vectors are made, kept (in `vectors`) and ranked only with an embedding model.
        self._vectors = WorkingVectors(embeddings, vectors) if embeddings else None
        self._clock = options.get("clock", utc_now)
        # One thread at a time reads the storage and installs what it read into the copy
        # (taken before the storage's own exclusion, never after it).
        self._copy_lock = threading.RLock()
        self._segments: dict[str, StoredSegment] = {}
        self._index = BM25Index()
        self._namespace_ids: dict[str, int] = {}
        self._last_sweep: datetime | None = None

    def now(self) -> datetime:
        return as_utc(self._clock())

    # -- the copy in memory ------------------------------------------------------------

    def _refresh(self) -> None:
        """Bring the copy up to date with the storage (a write of another process is
        seen on the next read)."""
        with self._copy_lock:
            known = {name: seg.signature for name, seg in self._segments.items()}
            for segment, stored in self.storage.changed(known, self.now()).items():
                if stored is None:
                    self._install(segment, {}, None)
                else:
                    self._install(segment, stored.entries, stored.signature)

    @contextlib.contextmanager
    def _writing(self) -> Iterator[None]:
        with self._copy_lock, self.storage.writing():
            self._refresh()
            yield

    def _install(
        self, segment: str, entries: dict[str, WorkingEntry], signature: object | None
    ) -> None:
        old = self._segments.get(segment)
        old_entries = old.entries if old else {}
        for key, entry in old_entries.items():
            if entries.get(key) != entry:
                self._index.remove(key)
        for key, entry in entries.items():
            if old_entries.get(key) != entry:
                self._index.put(
                    key, _document(entry), archived=False, group=self._namespace_id(entry.namespace)
                )
        if signature is None:
            self._segments.pop(segment, None)
        else:
            self._segments[segment] = StoredSegment(signature, entries)

    def _write(self, segment: str, entries: dict[str, WorkingEntry]) -> None:
        """Replace a segment (inside `_writing`), install what was written, and delete
        the vectors of entries that left it."""
        old = self._segments.get(segment)
        old_entries = old.entries if old else {}
        signature = self.storage.write(segment, entries, old_entries)
        if self._vectors is not None:
            for gone in old_entries.keys() - entries.keys():
                self._vectors.forget(gone)
        self._install(segment, entries, signature)

    def _namespace_id(self, namespace: str) -> int:
        return self._namespace_ids.setdefault(namespace, len(self._namespace_ids))

    def _live(self, prefix: str | None = None) -> Iterable[WorkingEntry]:
        now = self.now()
        for seg in [self._segments[name] for name in self._segments_under(prefix or None)]:
            for entry in seg.entries.values():
                if not entry.expired(now) and (prefix is None or is_under(entry.key, prefix)):
                    yield entry

    def _live_by_segment(self, now: datetime) -> Segments:
        return {
            name: {k: e for k, e in seg.entries.items() if not e.expired(now)}
            for name, seg in self._segments.items()
        }

    def _prune_vectors(self) -> None:
        """Delete the vectors whose entry is gone (one that left while its vector was
        still being made leaves one behind)."""
        if self._vectors is not None:
            self._vectors.prune(
                e.key for seg in self._segments.values() for e in seg.entries.values()
            )

    # -- reads -------------------------------------------------------------------------

    def get(self, key: str) -> WorkingEntry | None:
        """A live entry by full key, from any namespace."""
        key = validate_key(key)
        self._refresh()
        seg = self._segments.get(key.split("/", 1)[0])
        entry = seg.entries.get(key) if seg else None
        return None if entry is None or entry.expired(self.now()) else entry

    def list(
        self,
        prefix: str | None = None,
        *,
        category: str | None = None,
        tags: builtins.list[str] | None = None,
        cap: int = LIST_CAP,
    ) -> Listing:
        """Live entries under `prefix`, most recently stored first, at most `cap`."""
        if prefix is not None:
            prefix = validate_key(prefix)
        self._refresh()
        found = [e for e in self._live(prefix) if _matches(e, category, tags)]
        found.sort(key=lambda e: (e.stored_at, e.key), reverse=True)
        return Listing(found[:cap], len(found))

    def search(
        self,
        query: str,
        prefix: str | None = None,
        *,
        category: str | None = None,
        tags: builtins.list[str] | None = None,
        limit: int = SEARCH_LIMIT,
    ) -> builtins.list[tuple[WorkingEntry, float]]:
        """BM25 over key, category, tags and value of live entries under `prefix`."""
        if prefix is not None:
            prefix = validate_key(prefix)
        self._refresh()
        tokens = query_terms(query)
        query_vector = self._vectors.query(query) if self._vectors else None
        keyword: dict[str, float] = {}
        if tokens:
            scores = self._index.scores(tokens)
            for slot in np.nonzero(scores > 0)[0].tolist():
                key = self._index.key_at(slot)
                if key is not None:
                    keyword[key] = float(scores[slot])
        now = self.now()
        cosines = (
            self._vectors.cosines(query_vector, self._live(prefix))
            if self._vectors is not None and query_vector is not None
            else {}
        )
        threshold = self._vectors.client.settings.min_similarity if self._vectors else 1.0
        found = []
        for key in keyword.keys() | {k for k, c in cosines.items() if c >= threshold}:
            seg = self._segments.get(key.split("/", 1)[0])
            entry = seg.entries.get(key) if seg else None
            if entry is None or entry.expired(now):
                continue
            if (prefix is None or is_under(key, prefix)) and _matches(entry, category, tags):
                found.append(entry)
        if not found:
            return []
        raw = np.array([keyword.get(e.key, 0.0) for e in found])
        if query_vector is not None:
            final = fuse(
                raw,
                np.array([cosines.get(e.key, np.nan) for e in found]),
                np.array(list(cosines.values())),
                query_vector.size,
                last_seen=np.array([e.stored_at.timestamp() for e in found]),
                now=now,
            )
        else:
            final = raw
        hits = sorted(
            zip(found, final.tolist(), strict=True),
            key=lambda h: (-h[1], -h[0].stored_at.timestamp(), h[0].value, h[0].key),
        )
        return hits[:limit]

    def wait_for_embeddings(self, timeout: float | None = None) -> None:
        """Block until vectors queued by this process's saves are written (tests, exit)."""
        if self._vectors is not None:
            self._vectors.wait(timeout)

    # -- writes ------------------------------------------------------------------------

    def save(
        self,
        namespace: str,
        key: str,
        value: str,
        *,
        ttl: timedelta | None = None,
        background: bool = False,
        category: str | None = None,
        tags: builtins.list[str] | None = None,
    ) -> WorkingEntry:
        """Store `value` under `key` in the caller's `namespace`: a plain key is placed
        in it, a full key must already be in it. The namespace's 51st live entry is
        refused; overwriting an existing key is not a new entry."""
        namespace = validate_namespace(namespace)
        full = self.resolve(namespace, key)
        if full.split("/", 1)[0] == STASH_ROOT:
            raise InvalidInput(
                "keys under stash/ are written only by the agent loop's tool-result stash"
            )
        if not is_under(full, namespace):
            raise InvalidInput(
                f"{full!r} is outside your namespace {namespace!r}: writes go only to your own "
                "namespace (use a plain key, or a full key starting with it)"
            )
        return self._put(full, value, resolve_ttl(ttl, background=background), category, tags)

    def put_stash(
        self, key: str, value: str, *, ttl: timedelta, tags: builtins.list[str]
    ) -> WorkingEntry:
        """The tool-result stash's own write (see `agent.stash`): when its namespace is
        full, the oldest stashed result makes room — a stash never refuses the loop."""
        key = validate_key(key)
        if key.split("/", 1)[0] != STASH_ROOT or key.count("/") < 2:
            raise InvalidInput(f"{key!r} is not a stash key (stash/{{run}}/{{call}})")
        return self._put(key, value, ttl, None, tags, evict_oldest=True)

    def resolve(self, namespace: str, key: str) -> str:
        """A plain key inside `namespace`; a key starting with a reserved root (session/,
        patrol/, subagent/, stash/) is already a full path."""
        key = validate_key(key)
        if key.split("/", 1)[0] in RESERVED_ROOTS and "/" in key:
            return key
        return validate_key(f"{namespace}/{key}")

    def delete(self, key: str) -> bool:
        key = validate_key(key)
        with self._writing():
            segment = key.split("/", 1)[0]
            seg = self._segments.get(segment)
            if seg is None or key not in seg.entries:
                return False
            entries = dict(seg.entries)
            del entries[key]
            self._write(segment, entries)
            return True

    def clear(self, prefix: str | None = None) -> int:
        """Delete every entry under `prefix` — a namespace (`session/abc`), a sub-path
        (`session/abc/drafts`) or a root (`patrol`), by whole segments — or every entry
        when it is None. Returns how many live entries went."""
        if prefix is not None:
            prefix = validate_key(prefix)
        removed = 0
        with self._writing():
            now = self.now()
            for segment in self._segments_under(prefix):
                entries = self._segments[segment].entries
                kept = {k: e for k, e in entries.items() if prefix and not is_under(k, prefix)}
                if len(kept) < len(entries):
                    removed += sum(not e.expired(now) for k, e in entries.items() if k not in kept)
                    self._write(segment, kept)
        return removed

    def sweep(self) -> int:
        """Drop expired entries from the storage; returns how many went."""
        with self._writing():
            return self._sweep_held()

    def _sweep_held(self) -> int:
        """The sweep, inside `_writing` (a save's hourly one runs in the save's)."""
        now = self.now()
        live = self._live_by_segment(now)
        removed, rewritten = self.storage.sweep(now, live)
        for segment, entries in live.items():
            self._install(
                segment, entries, rewritten.get(segment, self._segments[segment].signature)
            )
        self._prune_vectors()
        self._last_sweep = now
        return removed

    def erase_matching(self, mentions: Callable[[str], bool]) -> builtins.list[str]:
        """Delete every entry, live or expired but not yet swept, whose key or value
        `mentions` the forgotten text (`stores.forget`), with its vector; returns the
        keys removed. Expired entries still lie in the storage until a sweep, so the
        storage is searched, not the live view."""
        with self._writing():
            removed, rewritten = self.storage.erase_matching(
                mentions, self._live_by_segment(self.now())
            )
            for segment, stored in rewritten.items():
                self._install(segment, stored.entries, stored.signature)
            if self._vectors is not None:
                self._vectors.forget_cached(removed)
        return removed

    def _segments_under(self, prefix: str | None) -> builtins.list[str]:
        if prefix is None:
            return list(self._segments)
        root = prefix.split("/", 1)[0]
        return [root] if root in self._segments else []

    def _put(
        self,
        key: str,
        value: str,
        ttl: timedelta,
        category: str | None,
        tags: builtins.list[str] | None,
        *,
        evict_oldest: bool = False,
    ) -> WorkingEntry:
        if not isinstance(value, str) or not value:
            raise InvalidInput("working-memory data is empty")
        if len(value) > MAX_VALUE_CHARS:
            raise InvalidInput(
                f"working-memory data is {len(value)} characters: the limit is {MAX_VALUE_CHARS}"
            )
        require_unicode(value, "working-memory data")
        _check_category(category)
        tag_list = validate_tags(tags)
        with self._writing():
            now = self.now()
            if self._last_sweep is None or now - self._last_sweep >= SWEEP_EVERY:
                self._sweep_held()
            namespace = namespace_of(key)
            others = sorted(
                (e for e in self._live(namespace) if e.key != key), key=lambda e: e.stored_at
            )
            while len(others) >= MAX_PER_NAMESPACE:
                if not evict_oldest:
                    raise WorkingMemoryFull(
                        f"namespace {namespace!r} already holds {MAX_PER_NAMESPACE} live entries "
                        "(the limit): overwrite one of its keys or let some expire"
                    )
                self._drop(others.pop(0).key)
            entry = WorkingEntry(
                key=key,
                value=value,
                stored_at=now,
                expires_at=now + ttl,
                category=category,
                tags=tag_list,
            )
            segment = key.split("/", 1)[0]
            seg = self._segments.get(segment)
            entries = {k: e for k, e in (seg.entries if seg else {}).items() if not e.expired(now)}
            entries[key] = entry
            self._write(segment, entries)
        if self._vectors is not None:
            self._vectors.embed_later(entry.key, entry.value)
        return entry

    def _drop(self, key: str) -> None:
        segment = key.split("/", 1)[0]
        entries = dict(self._segments[segment].entries)
        entries.pop(key, None)
        self._write(segment, entries)


def _check_category(category: str | None) -> None:
    if category is None:
        return
    if not isinstance(category, str) or not category.strip() or len(category) > MAX_CATEGORY_CHARS:
        raise InvalidInput(f"invalid working-memory category: 1 to {MAX_CATEGORY_CHARS} characters")
    require_unicode(category, "working-memory category")


def check_stored_entry(entry: WorkingEntry, segment: str) -> None:
    """An entry from a segment file is used only if a save could have written it there:
    a valid key under this file's segment, data, category and tags within the limits."""
    validate_key(entry.key)
    if entry.key != entry.key.strip() or entry.key.split("/", 1)[0] != segment:
        raise InvalidInput(f"key {entry.key[:80]!r} does not belong in {segment}.json")
    if not entry.value or len(entry.value) > MAX_VALUE_CHARS:
        raise InvalidInput("working-memory data is empty or too long")
    _check_category(entry.category)
    validate_tags(entry.tags)


def _matches(entry: WorkingEntry, category: str | None, tags: builtins.list[str] | None) -> bool:
    """Category: a whole-segment prefix, as in long-term search. Tags: every one."""
    if category and not category_matches(entry.category, category):
        return False
    if tags:
        have = {t.lower() for t in entry.tags}
        return all(t.lower() in have for t in tags)
    return True
