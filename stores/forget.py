"""`forget`: erasure on a person's request, now and provably (docs/design.md, invariant 22).

`delete_memory` archives and purge deletes after the retention: right for the model's
own judgement, wrong for "forget this about me". A forget request names entries, a
phrase (every entry, live or archived, whose content contains it, case-insensitively)
or a whole agent, and removes the content now from every place this data directory
keeps it:

- the entry files and their vectors, the index snapshot and the vector packs
  (`MemoryStore.erase`);
- the dream ledgers' lines about those entries or quoting them (undo has nothing of
  them left to put back);
- working memory entries, conversation turns (sessions, archives, the conversation
  log, live and rotated) that mention the text: they contain it verbatim, or contain
  every specific (name, number, identifier) of a text that has at least two;
- with a history key store, the agent's payload data key, so its Temporal histories
  can no longer be decoded by anyone (crypto-shredding: `client.agent_keys`);
- on a database that seals content at rest (`stores.postgres.forget`), what the
  database keeps after a DELETE: the agent is re-keyed (or its keys go with its rows)
  and the key chain rotated, so those copies can be read with no key that remains.

Entries derived from a forgotten one (its `mergedFrom` chain, or what it was retired
into: a merge, an enrichment, a dedup) carry its text. They are reported; with
`derived="forget"` they are erased too, and a source that had been archived only into
an erased derived entry is restored, since it was the only live carrier of its own
content and forgetting someone else's fact must not lose it.

Crash safety: the request is journaled first in `{data}/forget-journal.jsonl` with ids
only, never content; the steps run in an order where every one can run again
(the other tiers first, while the entries still exist to say what to look for; the
entries last), and the journal's `done` line comes at the end. A request begun and not
done is finished by the next forget on this data directory, before its own.

The receipt (`core.forgetting.ForgetReceipt`) lists what was removed where, and the
verification run afterwards with the text held in memory only: a search of every tier
for each forgotten text, and a raw byte scan of every file under the agent's directory
(every row, on a database); what else was checked; and what is left to the operator
(backups, and on a database what it keeps until aged out).
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import uuid
from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Literal

from dreamkeeper.core.errors import InvalidInput
from dreamkeeper.core.forgetting import (
    Derived,
    ForgetReceipt,
    Removal,
    Scope,
    Verification,
)
from dreamkeeper.core.models import MemoryEntry, utc_now
from dreamkeeper.core.validation import validate_agent_id, validate_entry_id
from dreamkeeper.policies.coverage import Source, find_missing_specifics
from dreamkeeper.policies.merge import MERGED_FROM
from dreamkeeper.stores import faults, safe_json
from dreamkeeper.stores.contract import MemoryStore
from dreamkeeper.stores.contract.documents import AgentDocuments
from dreamkeeper.stores.contract.forgetting import AgentStores, HistoryKeys
from dreamkeeper.stores.dream_state.dream_ledger import scrub_ledgers
from dreamkeeper.stores.files.agent_files import AgentFiles, append_line, path_lock
from dreamkeeper.stores.files.documents import FileDocuments
from dreamkeeper.stores.files.entry_files import EMBEDDINGS_DIR, MEMORY
from dreamkeeper.stores.longterm.records import retired_into
from dreamkeeper.stores.longterm.snapshot import SNAPSHOT
from dreamkeeper.stores.search.query import search

log = logging.getLogger(__name__)

JOURNAL = "forget-journal.jsonl"
EXPORTS = "exports.jsonl"  # per agent: the export files Dreamkeeper wrote (paths only)
MAX_EXPORT_BYTES = 4 * 1_024 * 1_048_576
LOCK = ".forget.lock"
MAX_JOURNAL_BYTES = 64 * 1_048_576
MAX_PHRASE_CHARS = 1_000
MIN_PHRASE_CHARS = 3
VERIFY_LIMIT = 50  # hits looked at per verification search
MAX_SCAN_FILE_BYTES = 1_024 * 1_048_576


class Mentions:
    """Whether a text mentions one of the forgotten texts: contains it (case and
    whitespace aside), or contains every specific of a text that has at least two."""

    def __init__(self, texts: Iterable[str]) -> None:
        self.texts = [t for t in dict.fromkeys(texts) if t.strip()]
        self._needles = [_norm(t) for t in self.texts]
        self._specific = [t for t in self.texts if len(find_missing_specifics([t], "")) >= 2]

    def __bool__(self) -> bool:
        return bool(self.texts)

    def verbatim(self, text: str) -> bool:
        """Contains one of the texts itself (case and whitespace aside): what the
        verification looks for, so another fact about the same names is not a match."""
        norm = _norm(text)
        return bool(text) and any(n in norm for n in self._needles)

    def __call__(self, text: str) -> bool:
        if not text or not self.texts:
            return False
        norm = _norm(text)
        if any(n in norm for n in self._needles):
            return True
        return any(not find_missing_specifics([t], text) for t in self._specific)


def _norm(text: str) -> str:
    return " ".join(text.casefold().split())


def merged_from(entry: MemoryEntry) -> list[str]:
    raw = entry.metadata.get(MERGED_FROM)
    if not raw:
        return []
    try:
        ids = json.loads(raw)
    except ValueError:
        return []
    return [i for i in ids if isinstance(i, str)] if isinstance(ids, list) else []


def derived_from(memory: MemoryStore, ids: Iterable[str]) -> list[str]:
    """Entries carrying a forgotten entry's text: whose `mergedFrom` chain includes it,
    or that it was retired into (a merge, enrichment or dedup), transitively."""
    everything = {e.id: e for e in memory.entries(include_archived=True)}
    reached = set(ids)
    found: list[str] = []
    grew = True
    while grew:
        grew = False
        for entry in everything.values():
            if entry.id in reached:
                continue
            if reached & set(merged_from(entry)):
                reached.add(entry.id)
                found.append(entry.id)
                grew = True
        for source in list(reached):
            carrier = everything.get(source)
            for target in retired_into(carrier) if carrier is not None else []:
                if target not in reached and target in everything:
                    reached.add(target)
                    found.append(target)
                    grew = True
    return found


class Forgetting:
    """Forget requests on one data directory (the file backend)."""

    # How the receipt names what it removed and what its scan read, on this backend.
    ENTRIES = "entry files"
    CACHE = "cache file"
    SCANNED: Literal["files", "rows"] = "files"

    def __init__(
        self,
        data_dir: Path | str,
        open_stores: Callable[[str], AgentStores],
        *,
        history_keys: HistoryKeys | None = None,
    ) -> None:
        self.data_dir = Path(data_dir)
        self._open = open_stores
        self.history_keys = history_keys
        self._journal = self.data_dir / JOURNAL
        self._path_lock = path_lock(self.data_dir / LOCK, within=self.data_dir)

    # -- what differs per backend (the file backend here; `PostgresForgetting`) -------

    def _hold(self) -> AbstractContextManager[object]:
        """One forget at a time on this store (requests and the journal)."""
        return self._path_lock.hold()

    def _files(self, agent_id: str) -> AgentFiles:
        return AgentFiles(self.data_dir, agent_id)

    def _place(self, agent_id: str, name: str) -> str:
        return _under(self._files(agent_id), name)

    def _vector_count(self, agent_id: str, ids: list[str]) -> int:
        files = self._files(agent_id)
        return sum(files.path(MEMORY, EMBEDDINGS_DIR, f"{i}.bin").exists() for i in ids)

    def _drop_vector(self, agent_id: str, entry_id: str) -> bool:
        return self._files(agent_id).unlink((MEMORY, EMBEDDINGS_DIR, f"{entry_id}.bin"))

    def _caches(self, agent_id: str) -> list[str]:
        """The caches quoting entries that exist now (erase removes them)."""
        return [_rel(self.data_dir, p) for p in _cache_files(self._files(agent_id)) if p.exists()]

    def _inventory(self, agent_id: str) -> list[Removal]:
        return _inventory(self._files(agent_id).root)

    def _agent_documents(self, agent_id: str) -> AgentDocuments:
        return FileDocuments(self._files(agent_id))

    def _delete_agent(self, agent_id: str) -> None:
        """Everything the store keeps for the agent (its exports are gone already)."""
        root = self._files(agent_id).root
        if root.is_symlink():
            root.unlink()
        elif root.exists():
            shutil.rmtree(root)

    def _agent_left(self, agent_id: str) -> list[str]:
        """Where anything of a deleted agent is still kept: the whole-agent verification."""
        root = self._files(agent_id).root
        return [_rel(self.data_dir, root)] if os.path.lexists(root) else []

    def _journal_lines(self) -> list[bytes]:
        try:
            return safe_json.read_regular(self._journal, MAX_JOURNAL_BYTES).splitlines()
        except OSError:
            return []

    def _retire_keys(self, agent_id: str, receipt: ForgetReceipt) -> int:
        """Destroy the agent's history data keys after a forget of entries (its next
        payload gets a new key); how many were destroyed."""
        return 0 if self.history_keys is None else self.history_keys.destroy(agent_id)

    def _destroy_keys_first(self, agent_id: str) -> int:
        """A whole-agent forget's first step: the agent's data keys, so its histories are
        undecodable even if the rest is cut short (a crash: the retry deletes the rest).
        How many were destroyed."""
        return 0 if self.history_keys is None else self.history_keys.destroy(agent_id)

    def _erase_agent(self, agent_id: str, receipt: ForgetReceipt) -> int:
        """Everything of the agent (its exports are gone already); how many more data
        keys were destroyed with it."""
        self._delete_agent(agent_id)
        return 0

    def _left_to_operator(self, agent_id: str) -> list[str]:
        """What an operator must still do after a forget of this agent (read before it)."""
        return [
            "backups and filesystem snapshots of the data directory taken before this "
            "forget still hold what it removed: age them out on their retention schedule"
        ]

    def _seal_state(self) -> bool | None:
        """Whether content was sealed at rest (None: not applicable, files)."""
        return None

    def _raw_scan(self, stores: AgentStores, needles: list[bytes], result: Verification) -> None:
        """Every byte this store keeps for the agent, searched for the forgotten text."""
        files = self._files(stores.memory.agent_id)
        exports = [p for p in exported_files(stores.memory.documents) if p.is_file()]
        for path in [*_walk(files.root), *[p for p in exports if not p.is_symlink()]]:
            result.files_scanned += 1
            try:
                data = safe_json.read_regular(path, MAX_SCAN_FILE_BYTES).lower()
            except OSError:
                continue
            if any(n in data for n in needles):
                result.files_containing.append(_rel(self.data_dir, path))

    # -- requests ----------------------------------------------------------------------

    def forget_entries(
        self,
        agent_id: str,
        entry_ids: Iterable[str],
        *,
        derived: Derived = "report",
        dry_run: bool = False,
    ) -> ForgetReceipt:
        agent_id = validate_agent_id(agent_id)
        ids = list(dict.fromkeys(validate_entry_id(i) for i in entry_ids))
        if not ids:
            raise InvalidInput("forget needs at least one entry id")
        return self._entries(agent_id, "entries", lambda _: ids, [], derived, dry_run)

    def forget_match(
        self, agent_id: str, phrase: str, *, derived: Derived = "report", dry_run: bool = False
    ) -> ForgetReceipt:
        """Every entry, live or archived, whose content contains `phrase`
        (case-insensitively); the phrase itself is scrubbed from the other tiers too."""
        agent_id = validate_agent_id(agent_id)
        if not isinstance(phrase, str) or not MIN_PHRASE_CHARS <= len(phrase.strip()):
            raise InvalidInput(f"a forget phrase needs at least {MIN_PHRASE_CHARS} characters")
        if len(phrase) > MAX_PHRASE_CHARS:
            raise InvalidInput(f"a forget phrase is at most {MAX_PHRASE_CHARS} characters")
        wanted = _norm(phrase)

        def matching(memory: MemoryStore) -> list[str]:
            return [
                e.id for e in memory.entries(include_archived=True) if wanted in _norm(e.content)
            ]

        return self._entries(agent_id, "match", matching, [phrase], derived, dry_run)

    def forget_agent(self, agent_id: str, *, dry_run: bool = False) -> ForgetReceipt:
        """Everything of the agent: its directory, every tier in it, and its data keys."""
        agent_id = validate_agent_id(agent_id)
        receipt = ForgetReceipt(request_id=_request_id(), agent_id=agent_id, scope="agent")
        with self._hold():
            receipt.resumed = self._finish_pending()
            if dry_run:
                receipt.dry_run = True
                receipt.removed = self._inventory(agent_id)
                return receipt
            self._note({"request": receipt.request_id, "agent": agent_id, "scope": "agent"})
            faults.crash_point(faults.FORGET_BEGUN)
            self._run_agent(receipt)
            self._note({"request": receipt.request_id, "done": True})
        return receipt

    def finish_pending(self) -> list[str]:
        """Finish every request begun and not done (a crash mid-way); their ids."""
        with self._hold():
            return self._finish_pending()

    # -- the steps ---------------------------------------------------------------------

    def _entries(
        self,
        agent_id: str,
        scope: Scope,
        pick: Callable[[MemoryStore], list[str]],
        phrases: list[str],
        derived: Derived,
        dry_run: bool,
    ) -> ForgetReceipt:
        receipt = ForgetReceipt(request_id=_request_id(), agent_id=agent_id, scope=scope)
        with self._hold():
            receipt.resumed = self._finish_pending()
            stores = self._open(agent_id)
            memory = stores.memory
            present = [e for i in pick(memory) if (e := memory.get(i)) is not None]
            seeds = Mentions([e.content for e in present] + phrases)
            doomed = [e.id for e in present]
            copies: list[str] = []
            found: list[str] = []
            while True:
                new_copies = _copies(memory, doomed, seeds)
                copies += new_copies
                doomed += new_copies
                new_derived = [i for i in derived_from(memory, doomed) if i not in found]
                found += new_derived
                if derived == "forget" and new_derived:
                    doomed += new_derived
                elif not new_copies:
                    break
            receipt.derived, receipt.copies = found, copies
            if derived == "rewrite":
                gone = set(doomed)
                receipt.rewritten = [
                    i
                    for i in found
                    if (e := memory.get(i)) is not None and _rewritten(memory, e, seeds, gone)
                ]
            restore = _sources_to_restore(memory, doomed)
            receipt.entries, receipt.restored = doomed, restore
            if dry_run:
                receipt.dry_run = True
                return receipt
            self._note(
                {
                    "request": receipt.request_id,
                    "agent": agent_id,
                    "scope": scope,
                    "ids": doomed,
                    "restore": restore,
                    "rewrite": receipt.rewritten,
                }
            )
            faults.crash_point(faults.FORGET_BEGUN)
            self._run_entries(receipt, doomed, restore, phrases, stores, receipt.rewritten)
            self._note({"request": receipt.request_id, "done": True})
        return receipt

    def _run_entries(
        self,
        receipt: ForgetReceipt,
        ids: list[str],
        restore: list[str],
        phrases: list[str],
        stores: AgentStores | None = None,
        rewrite: list[str] | None = None,
    ) -> None:
        agent_id = receipt.agent_id
        stores = stores or self._open(agent_id)
        memory = stores.memory
        notes = self._left_to_operator(agent_id)
        present = [e for i in ids if (e := memory.get(i)) is not None]
        mentions = Mentions([e.content for e in present] + phrases)
        removed: list[Removal] = []
        for place, count in scrub_ledgers(memory.documents, set(ids), mentions).items():
            removed.append(
                Removal(place=self._place(agent_id, place), what="ledger lines", count=count)
            )
        if mentions:
            keys = stores.working.erase_matching(mentions)
            if keys:
                removed.append(
                    Removal(
                        place=self._place(agent_id, "working-memory"),
                        what="entries",
                        count=len(keys),
                    )
                )
            for place, count in stores.conversation.erase_matching(mentions).items():
                removed.append(
                    Removal(place=self._place(agent_id, place), what="turns", count=count)
                )
        for path, count in _scrub_exports(memory.documents, set(ids), mentions).items():
            removed.append(Removal(place=path, what="export lines", count=count))
        faults.crash_point(faults.FORGET_TIERS_SCRUBBED)
        gone = set(ids)
        vector_place = self._place(agent_id, f"{MEMORY}/{EMBEDDINGS_DIR}")
        for entry_id in rewrite or []:
            entry = memory.get(entry_id)
            text = _rewritten(memory, entry, mentions, gone) if entry is not None else None
            if text is None:
                continue  # done before a crash, or changed since: reported as derived
            kept = [i for i in merged_from(entry) if i not in gone] if entry else []
            memory.mutate(
                entry_id,
                _rewrite_to(text, kept),
                reason="rewritten without a forgotten entry",
            )
            # Its vector was made from the old text (a vector can be inverted into text).
            if self._drop_vector(agent_id, entry_id):
                removed.append(Removal(place=vector_place, what="vectors", count=1))
            removed.append(
                Removal(place=self._place(agent_id, MEMORY), what="rewritten entries", count=1)
            )
        for source in restore:
            entry = memory.get(source)
            if entry is not None and entry.is_archived:
                memory.restore(source, force=True)
        vectors = self._vector_count(agent_id, [e.id for e in present])
        caches = self._caches(agent_id)
        erased = memory.erase(ids)
        if erased:
            removed.append(
                Removal(place=self._place(agent_id, MEMORY), what=self.ENTRIES, count=len(erased))
            )
        if vectors:
            removed.append(Removal(place=vector_place, what="vectors", count=vectors))
        still = set(self._caches(agent_id))
        for cache in caches:
            if cache not in still:
                removed.append(Removal(place=cache, what=self.CACHE, count=1))
        receipt.history_keys_destroyed = self._retire_keys(agent_id, receipt)
        receipt.removed = removed + receipt.removed + _history_keys_removed(receipt)
        verification = self._verify(stores, mentions)
        verification.checked += receipt.verification.checked
        verification.failed += receipt.verification.failed
        receipt.verification = verification
        receipt.sealed_at_rest = self._seal_state()
        receipt.left_to_operator = notes + receipt.left_to_operator

    def _run_agent(self, receipt: ForgetReceipt) -> None:
        """The whole agent, on either backend (its steps per backend above)."""
        agent_id = receipt.agent_id
        notes = self._left_to_operator(agent_id)
        destroyed = self._destroy_keys_first(agent_id)
        removed = self._inventory(agent_id)
        for export in exported_files(self._agent_documents(agent_id)):
            if export.is_file() and not export.is_symlink():
                export.unlink()
                removed.append(Removal(place=str(export), what="export file", count=1))
        receipt.history_keys_destroyed = destroyed + self._erase_agent(agent_id, receipt)
        receipt.removed = removed + receipt.removed + _history_keys_removed(receipt)
        verification = Verification(
            files_containing=self._agent_left(agent_id), scanned=self.SCANNED
        )
        verification.checked += receipt.verification.checked
        verification.failed += receipt.verification.failed
        receipt.verification = verification
        receipt.sealed_at_rest = self._seal_state()
        receipt.left_to_operator = notes + receipt.left_to_operator

    def _verify(self, stores: AgentStores, mentions: Mentions) -> Verification:
        """Search every tier for each forgotten text, then read every byte the store
        keeps for the agent for it (plain and JSON-escaped)."""
        result = Verification(scanned=self.SCANNED)
        for text in mentions.texts:
            result.searches += 1
            for hit in search(stores.memory, text, include_archived=True, limit=VERIFY_LIMIT):
                if mentions.verbatim(hit.entry.content):
                    result.search_matches += 1
            for entry, _ in stores.working.search(text, limit=VERIFY_LIMIT):
                if mentions.verbatim(entry.value):
                    result.search_matches += 1
            for session in stores.conversation.sessions(include_expired=True):
                turns = stores.conversation.conversation(session).turns
                result.search_matches += sum(1 for t in turns if mentions.verbatim(t.content))
        self._raw_scan(stores, _byte_needles(mentions.texts), result)
        return result

    # -- the journal -------------------------------------------------------------------

    def _note(self, record: dict[str, object]) -> None:
        line = json.dumps({**record, "at": utc_now().isoformat()}, separators=(",", ":"))
        append_line(self._journal, line, within=self.data_dir)

    def _pending(self) -> list[dict[str, object]]:
        begun: dict[str, dict[str, object]] = {}
        for line in self._journal_lines():
            try:
                record = safe_json.loads(line, max_bytes=MAX_JOURNAL_BYTES, max_depth=2)
            except ValueError:
                continue  # a torn line from a crash mid-append
            if not isinstance(record, dict) or not isinstance(record.get("request"), str):
                continue
            if record.get("done"):
                begun.pop(record["request"], None)
            else:
                begun[record["request"]] = record
        return list(begun.values())

    def _finish_pending(self) -> list[str]:
        finished = []
        for record in self._pending():
            request = str(record["request"])
            try:
                agent_id = validate_agent_id(str(record.get("agent")))
                receipt = ForgetReceipt(
                    request_id=request,
                    agent_id=agent_id,
                    scope="agent" if record.get("scope") == "agent" else "entries",
                )
                if record.get("scope") == "agent":
                    self._run_agent(receipt)
                else:
                    ids = [validate_entry_id(str(i)) for i in _list(record.get("ids"))]
                    restore = [validate_entry_id(str(i)) for i in _list(record.get("restore"))]
                    rewrite = [validate_entry_id(str(i)) for i in _list(record.get("rewrite"))]
                    self._run_entries(receipt, ids, restore, [], None, rewrite)
            except InvalidInput as exc:
                log.warning("forget journal: request %s is malformed (%s); skipped", request, exc)
            log.warning("forget: finished request %s, interrupted earlier", request)
            self._note({"request": request, "done": True})
            finished.append(request)
        return finished


def _history_keys_removed(receipt: ForgetReceipt) -> list[Removal]:
    """The receipt's line for the payload data keys `forget` destroyed (none: no line)."""
    if not receipt.history_keys_destroyed:
        return []
    return [
        Removal(
            place="payload data keys",
            what="Temporal history keys",
            count=receipt.history_keys_destroyed,
        )
    ]


def _list(value: object) -> list[object]:
    return value if isinstance(value, list) else []


def _request_id() -> str:
    return uuid.uuid4().hex[:16]


def _rewrite_to(text: str, kept: list[str]) -> Callable[[MemoryEntry], MemoryEntry]:
    def change(current: MemoryEntry) -> MemoryEntry:
        metadata = {**current.metadata, MERGED_FROM: json.dumps(kept)}
        return current.model_copy(
            update={"content": text, "metadata": metadata, "updated_at": utc_now()}
        )

    return change


_CLAUSE_END = re.compile(r"(?<=[.;!?])\s+")


def _rewritten(
    memory: MemoryStore, entry: MemoryEntry, seeds: Mentions, gone: set[str]
) -> str | None:
    """The derived entry's text without its clauses that carry the forgotten text, if
    that is a rewrite the merge's own coverage check accepts: every specific of each
    remaining source survives, and nothing of the forgotten text does. Else None."""
    clauses = _CLAUSE_END.split(entry.content.strip())
    kept = [c for c in clauses if not seeds(c)]
    if not kept or len(kept) == len(clauses):
        return None
    text = " ".join(kept)
    if seeds(text):
        return None
    sources = [
        Source(s.content, s.category)
        for i in merged_from(entry)
        if i not in gone and (s := memory.get(i)) is not None
    ]
    if find_missing_specifics(sources, text):
        return None
    return text


def _copies(memory: MemoryStore, doomed: list[str], seeds: Mentions) -> list[str]:
    """Archived entries that were retired into one being erased (the original an
    enrichment or dedup made it from, a source of a merge) and that carry the forgotten
    text themselves: the same fact, so they go with it."""
    gone = set(doomed)
    return [
        e.id
        for e in memory.archived()
        if e.id not in gone and gone & set(retired_into(e)) and seeds(e.content)
    ]


def _sources_to_restore(memory: MemoryStore, doomed: list[str]) -> list[str]:
    """Archived entries retired only into entries being erased (and not erased
    themselves): their own content would otherwise be lost with the derived entry."""
    gone = set(doomed)
    restore = []
    for entry in memory.archived():
        into = retired_into(entry)
        if entry.id not in gone and into and set(into) <= gone:
            restore.append(entry.id)
    return restore


def _cache_files(files: AgentFiles) -> list[Path]:
    caches = [files.path(*SNAPSHOT)]
    folder = files.path(MEMORY, EMBEDDINGS_DIR)
    try:
        caches += [folder / n for n in os.listdir(folder) if n.startswith("pack-")]
    except OSError:
        pass
    return caches


def _byte_needles(texts: Iterable[str]) -> list[bytes]:
    needles: set[bytes] = set()
    for text in texts:
        lowered = text.casefold()
        needles.add(lowered.encode("utf-8"))
        needles.add(json.dumps(lowered)[1:-1].encode("utf-8"))  # ASCII-escaped JSON
        needles.add(json.dumps(lowered, ensure_ascii=False)[1:-1].encode("utf-8"))
    return [n for n in needles if n]


def _walk(root: Path) -> Iterable[Path]:
    for directory, _, names in os.walk(root):
        for name in names:
            path = Path(directory) / name
            if not path.is_symlink():
                yield path


def _inventory(root: Path) -> list[Removal]:
    """What a whole-agent erasure removes: files per top-level part of the directory."""
    counts: dict[str, int] = {}
    for path in _walk(root) if root.is_dir() and not root.is_symlink() else []:
        top = path.relative_to(root).parts[0]
        counts[top] = counts.get(top, 0) + 1
    base = root.parent.parent
    return [
        Removal(place=_rel(base, root / top), what="files", count=n)
        for top, n in sorted(counts.items())
    ]


def _rel(base: Path, path: Path) -> str:
    try:
        return str(path.relative_to(base))
    except ValueError:
        return str(path)


def _under(files: AgentFiles, place: str) -> str:
    return _rel(files.data_dir, files.path(place))


def file_backend(data_dir: Path | str) -> Callable[[str], AgentStores]:
    """Open an agent's three file stores (no embedding model: erasure and its
    verification need none, and an unreachable endpoint must not stop a forget)."""
    from dreamkeeper.stores.files.conversation_memory import FileConversationStore
    from dreamkeeper.stores.files.memory_store import FileMemoryStore
    from dreamkeeper.stores.files.working_memory import FileWorkingMemoryStore

    def open_stores(agent_id: str) -> AgentStores:
        return AgentStores(
            memory=FileMemoryStore(data_dir, agent_id),
            working=FileWorkingMemoryStore(data_dir, agent_id),
            conversation=FileConversationStore(data_dir, agent_id),
        )

    return open_stores


def note_export(documents: AgentDocuments, path: Path) -> None:
    """Remember that an export of this agent was written to `path` (its absolute path,
    nothing else), so a later forget can take the forgotten entries out of it."""
    line = json.dumps({"path": str(path.resolve()), "at": utc_now().isoformat()})
    documents.append(EXPORTS, (line + "\n").encode("utf-8"))


def exported_files(documents: AgentDocuments) -> list[Path]:
    try:
        data = documents.read(EXPORTS, max_bytes=MAX_JOURNAL_BYTES) or b""
    except OSError:
        return []
    paths: dict[str, None] = {}
    for line in data.splitlines():
        try:
            record = safe_json.loads(line, max_bytes=65_536, max_depth=1)
        except ValueError:
            continue
        if isinstance(record, dict) and isinstance(record.get("path"), str):
            paths[record["path"]] = None
    return [Path(p) for p in paths]


def _scrub_exports(documents: AgentDocuments, ids: set[str], mentions: Mentions) -> dict[str, int]:
    """Rewrite each export this agent's store wrote without the lines of erased entries
    or quoting the text (the header line stays; its count is then an upper bound)."""
    removed: dict[str, int] = {}
    for path in exported_files(documents):
        try:
            data = safe_json.read_regular(path, MAX_EXPORT_BYTES)
        except OSError:
            continue  # moved or deleted since: nothing of ours is there
        lines = data.splitlines(keepends=True)
        kept = [lines[0]] if lines else []
        for line in lines[1:]:
            if mentions(line.decode("utf-8", "replace")) or _export_id(line) in ids:
                continue
            kept.append(line)
        if len(kept) < len(lines):
            temp = path.with_name(f".{path.name}.forget-{uuid.uuid4().hex[:8]}")
            with open(temp, "xb") as out:
                out.write(b"".join(kept))
                out.flush()
                os.fsync(out.fileno())
            os.replace(temp, path)
            removed[str(path)] = len(lines) - len(kept)
    return removed


def _export_id(line: bytes) -> object:
    try:
        record = safe_json.loads(line, max_bytes=MAX_EXPORT_BYTES, max_depth=8)
    except ValueError:
        return None
    entry = record.get("entry") if isinstance(record, dict) else None
    return entry.get("id") if isinstance(entry, dict) else None
