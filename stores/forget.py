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
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

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
from dreamkeeper.stores.contract.backend import StoreBackend
from dreamkeeper.stores.contract.documents import AgentDocuments
from dreamkeeper.stores.contract.forgetting import AgentStores, ForgetSteps, HistoryKeys
from dreamkeeper.stores.dream_state.dream_ledger import scrub_ledgers
from dreamkeeper.stores.longterm.records import retired_into
from dreamkeeper.stores.search.query import search

log = logging.getLogger(__name__)

EXPORTS = "exports.jsonl"  # per agent: the export files Dreamkeeper wrote (paths only)
MAX_EXPORT_BYTES = 4 * 1_024 * 1_048_576
MAX_JOURNAL_BYTES = 64 * 1_048_576
# How a receipt names the entries and their vectors (`ForgetSteps.place`): the data
# directory's layout, which every backend's receipt speaks in.
ENTRIES_PLACE = "memory"
VECTORS_PLACE = "memory/.embeddings"
MAX_PHRASE_CHARS = 1_000
MIN_PHRASE_CHARS = 3
VERIFY_LIMIT = 50  # hits looked at per verification search


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
    """Forget requests on one store, the same algorithm on every backend: `steps` does
    what differs per backend (`stores.contract.forgetting.ForgetSteps`)."""

    def __init__(self, steps: ForgetSteps) -> None:
        self.steps = steps

    @property
    def history_keys(self) -> HistoryKeys | None:
        return self.steps.history_keys

    # -- requests ----------------------------------------------------------------------

    def forget_entries(
        self,
        agent_id: str,
        entry_ids: Iterable[str],
        *,
        derived: Derived = "report",
        dry_run: bool = False,
        caller: str | None = None,
    ) -> ForgetReceipt:
        agent_id = validate_agent_id(agent_id)
        ids = list(dict.fromkeys(validate_entry_id(i) for i in entry_ids))
        if not ids:
            raise InvalidInput("forget needs at least one entry id")
        request = _Request(agent_id, "entries", derived, dry_run, caller)
        return self._entries(request, lambda _: ids, [])

    def forget_match(
        self,
        agent_id: str,
        phrase: str,
        *,
        derived: Derived = "report",
        dry_run: bool = False,
        caller: str | None = None,
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

        request = _Request(agent_id, "match", derived, dry_run, caller)
        return self._entries(request, matching, [phrase])

    def forget_agent(
        self, agent_id: str, *, dry_run: bool = False, caller: str | None = None
    ) -> ForgetReceipt:
        """Everything of the agent: its directory, every tier in it, and its data keys."""
        agent_id = validate_agent_id(agent_id)
        receipt = ForgetReceipt(request_id=_request_id(), agent_id=agent_id, scope="agent")
        with self.steps.hold():
            earlier = self._resume(receipt, caller, dry_run)
            if dry_run:
                receipt.dry_run = True
                receipt.removed = self.steps.inventory(agent_id)
                return receipt
            self.steps.note(_begun(receipt, caller))
            faults.crash_point(faults.FORGET_BEGUN)
            self._run_agent(receipt)
            self.steps.note({"request": receipt.request_id, "done": True})
        return _merged(earlier, receipt)

    def finish_pending(self) -> list[str]:
        """Finish every request begun and not done (a crash mid-way); their ids."""
        with self.steps.hold():
            return [record.request_id for record, _ in self._finish_pending()]

    def _resume(
        self, receipt: ForgetReceipt, caller: str | None, dry_run: bool
    ) -> list[ForgetReceipt]:
        """Finish the requests a crash interrupted: the receipts of those that were this
        very request (same caller id and agent) begun before, to merge into its own; the
        others' ids go under `resumed`."""
        earlier = []
        for record, finished in self._finish_pending():
            if (
                not dry_run
                and caller is not None
                and record.caller == caller
                and finished.agent_id == receipt.agent_id
            ):
                earlier.append(finished)
            else:
                receipt.resumed.append(record.request_id)
        return earlier

    # -- the steps ---------------------------------------------------------------------

    def _entries(
        self, request: _Request, pick: Callable[[MemoryStore], list[str]], phrases: list[str]
    ) -> ForgetReceipt:
        agent_id, derived = request.agent_id, request.derived
        receipt = ForgetReceipt(request_id=_request_id(), agent_id=agent_id, scope=request.scope)
        with self.steps.hold():
            earlier = self._resume(receipt, request.caller, request.dry_run)
            stores = self.steps.open_stores(agent_id)
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
            if request.dry_run:
                receipt.dry_run = True
                return receipt
            self.steps.note(
                {
                    **_begun(receipt, request.caller),
                    "ids": doomed,
                    "restore": restore,
                    "rewrite": receipt.rewritten,
                }
            )
            faults.crash_point(faults.FORGET_BEGUN)
            self._run_entries(receipt, doomed, restore, phrases, stores, receipt.rewritten)
            self.steps.note({"request": receipt.request_id, "done": True})
        return _merged(earlier, receipt)

    def _run_entries(
        self,
        receipt: ForgetReceipt,
        ids: list[str],
        restore: list[str],
        phrases: list[str],
        stores: AgentStores | None = None,
        rewrite: list[str] | None = None,
    ) -> None:
        """Entries and what mentions them: the other tiers first, while the entries still
        exist to say what to look for; derived entries rewritten, sources restored; the
        entries last; then the receipt."""
        agent_id = receipt.agent_id
        stores = stores or self.steps.open_stores(agent_id)
        memory = stores.memory
        notes = self.steps.left_to_operator(agent_id)
        present = [e for i in ids if (e := memory.get(i)) is not None]
        mentions = Mentions([e.content for e in present] + phrases)
        removed = self._scrub_tiers(agent_id, stores, set(ids), mentions)
        faults.crash_point(faults.FORGET_TIERS_SCRUBBED)
        removed += self._rewrite_derived(agent_id, memory, rewrite or [], mentions, set(ids))
        for source in restore:
            entry = memory.get(source)
            if entry is not None and entry.is_archived:
                memory.restore(source, force=True)
        removed += self._erase_entries(agent_id, memory, ids, [e.id for e in present])
        receipt.history_keys_destroyed = self.steps.retire_keys(agent_id, receipt)
        self._settle(receipt, removed, self._verify(stores, mentions), notes)

    def _scrub_tiers(
        self, agent_id: str, stores: AgentStores, ids: set[str], mentions: Mentions
    ) -> list[Removal]:
        """The ledgers' lines, working-memory entries, conversation turns and export
        lines about the entries or quoting their text."""
        place = self.steps.place
        removed = [
            Removal(place=place(agent_id, name), what="ledger lines", count=count)
            for name, count in scrub_ledgers(stores.memory.documents, ids, mentions).items()
        ]
        if mentions:
            keys = stores.working.erase_matching(mentions)
            if keys:
                removed.append(
                    Removal(
                        place=place(agent_id, "working-memory"), what="entries", count=len(keys)
                    )
                )
            for name, count in stores.conversation.erase_matching(mentions).items():
                removed.append(Removal(place=place(agent_id, name), what="turns", count=count))
        for path, count in _scrub_exports(stores.memory.documents, ids, mentions).items():
            removed.append(Removal(place=path, what="export lines", count=count))
        return removed

    def _rewrite_derived(
        self,
        agent_id: str,
        memory: MemoryStore,
        rewrite: list[str],
        mentions: Mentions,
        gone: set[str],
    ) -> list[Removal]:
        """Each derived entry to keep, rewritten without the clauses that carry the
        forgotten text, and its vector dropped."""
        removed = []
        for entry_id in rewrite:
            entry = memory.get(entry_id)
            text = _rewritten(memory, entry, mentions, gone) if entry is not None else None
            if entry is None or text is None:
                continue  # done before a crash, or changed since: reported as derived
            kept = [i for i in merged_from(entry) if i not in gone]
            memory.mutate(
                entry_id, _rewrite_to(text, kept), reason="rewritten without a forgotten entry"
            )
            # Its vector was made from the old text (a vector can be inverted into text).
            if self.steps.drop_vector(agent_id, entry_id):
                removed.append(
                    Removal(
                        place=self.steps.place(agent_id, VECTORS_PLACE), what="vectors", count=1
                    )
                )
            removed.append(
                Removal(
                    place=self.steps.place(agent_id, ENTRIES_PLACE),
                    what="rewritten entries",
                    count=1,
                )
            )
        return removed

    def _erase_entries(
        self, agent_id: str, memory: MemoryStore, ids: list[str], present: list[str]
    ) -> list[Removal]:
        """The entries themselves, their vectors and the caches quoting them."""
        vectors = self.steps.vector_count(agent_id, present)
        caches = self.steps.caches(agent_id)
        erased = memory.erase(ids)
        removed = []
        if erased:
            removed.append(
                Removal(
                    place=self.steps.place(agent_id, ENTRIES_PLACE),
                    what=self.steps.entries_name,
                    count=len(erased),
                )
            )
        if vectors:
            place = self.steps.place(agent_id, VECTORS_PLACE)
            removed.append(Removal(place=place, what="vectors", count=vectors))
        still = set(self.steps.caches(agent_id))
        for cache in caches:
            if cache not in still:
                removed.append(Removal(place=cache, what=self.steps.cache_name, count=1))
        return removed

    def _settle(
        self,
        receipt: ForgetReceipt,
        removed: list[Removal],
        verification: Verification,
        notes: list[str],
    ) -> None:
        """The receipt of a request run: what went where (the keys' line last), the
        verification with the checks the key steps added, and what the operator has
        left to do."""
        receipt.removed = removed + receipt.removed + _history_keys_removed(receipt)
        verification.checked += receipt.verification.checked
        verification.failed += receipt.verification.failed
        receipt.verification = verification
        receipt.sealed_at_rest = self.steps.seal_state()
        receipt.left_to_operator = notes + receipt.left_to_operator

    def _run_agent(self, receipt: ForgetReceipt) -> None:
        """The whole agent, on either backend (its steps per backend above)."""
        agent_id = receipt.agent_id
        notes = self.steps.left_to_operator(agent_id)
        destroyed = self.steps.destroy_keys_first(agent_id)
        removed = self.steps.inventory(agent_id)
        for export in exported_files(self.steps.agent_documents(agent_id)):
            if export.is_file() and not export.is_symlink():
                export.unlink()
                removed.append(Removal(place=str(export), what="export file", count=1))
        receipt.history_keys_destroyed = destroyed + self.steps.erase_agent(agent_id, receipt)
        left = Verification(
            files_containing=self.steps.agent_left(agent_id), scanned=self.steps.scanned
        )
        self._settle(receipt, removed, left, notes)

    def _verify(self, stores: AgentStores, mentions: Mentions) -> Verification:
        """Search every tier for each forgotten text, then read every byte the store
        keeps for the agent for it (plain and JSON-escaped)."""
        result = Verification(scanned=self.steps.scanned)
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
        self.steps.raw_scan(stores, _byte_needles(mentions.texts), result)
        return result

    # -- the journal -------------------------------------------------------------------

    def _pending(self) -> list[dict[str, object]]:
        begun: dict[str, dict[str, object]] = {}
        for line in self.steps.journal_lines():
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

    def _finish_pending(self) -> list[tuple[_Begun, ForgetReceipt]]:
        """Finish every request begun and not done: each one's journal record and the
        receipt of what finishing it did."""
        finished = []
        for record in self._pending():
            request = str(record["request"])
            caller = record.get("for")
            begun = _Begun(request, caller if isinstance(caller, str) else None)
            receipt = ForgetReceipt(request_id=request, agent_id="unknown", scope="entries")
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
                    receipt.entries, receipt.restored, receipt.rewritten = ids, restore, rewrite
                    self._run_entries(receipt, ids, restore, [], None, rewrite)
            except InvalidInput as exc:
                log.warning("forget journal: request %s is malformed (%s); skipped", request, exc)
            log.warning("forget: finished request %s, interrupted earlier", request)
            self.steps.note({"request": request, "done": True})
            finished.append((begun, receipt))
        return finished


@dataclass(frozen=True)
class _Request:
    """One forget request of entries (by id or by phrase), as the caller asked it."""

    agent_id: str
    scope: Scope
    derived: Derived
    dry_run: bool
    caller: str | None  # the request id the caller chose, if any


@dataclass(frozen=True)
class _Begun:
    """A journaled request: the journal's id for it, and the caller's (if it had one)."""

    request_id: str
    caller: str | None


def _begun(receipt: ForgetReceipt, caller: str | None) -> dict[str, object]:
    """The journal record that a request began (ids only, never content)."""
    record: dict[str, object] = {
        "request": receipt.request_id,
        "agent": receipt.agent_id,
        "scope": receipt.scope,
    }
    if caller is not None:
        record["for"] = caller
    return record


def _merged(earlier: list[ForgetReceipt], receipt: ForgetReceipt) -> ForgetReceipt:
    """`receipt` with what the same request did before a crash interrupted it (the
    retry finds that part gone, so its own run alone would report less than was done):
    the entries, sources restored and rewrites of both, and every removal counted once
    per place and kind."""
    if not earlier:
        return receipt
    runs = [*earlier, receipt]

    def union(field: str) -> list[str]:
        return list(dict.fromkeys(i for r in runs for i in getattr(r, field)))

    counts: dict[tuple[str, str], int] = {}
    for run in runs:
        for removal in run.removed:
            key = (removal.place, removal.what)
            counts[key] = counts.get(key, 0) + removal.count
    return receipt.model_copy(
        update={
            "entries": union("entries"),
            "restored": union("restored"),
            "rewritten": union("rewritten"),
            "removed": [Removal(place=p, what=w, count=c) for (p, w), c in counts.items()],
            "history_keys_destroyed": sum(r.history_keys_destroyed for r in runs),
        }
    )


def stores_of(backend: StoreBackend) -> Callable[[str], AgentStores]:
    """Open an agent's three stores on `backend`, as a forget works on them: no embedding
    model (erasure and its verification need none, and an unreachable endpoint must not
    stop a forget)."""

    def open_stores(agent_id: str) -> AgentStores:
        return AgentStores(
            memory=backend.memory(agent_id),
            working=backend.working(agent_id),
            conversation=backend.conversations(agent_id),
        )

    return open_stores


def destroy_history_keys(keys: HistoryKeys | None, agent_id: str) -> int:
    """Destroy the agent's payload data keys, if the process has any; how many: a
    forget's key step where no sealing at rest needs the keys until its rows go."""
    return 0 if keys is None else keys.destroy(agent_id)


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


def _byte_needles(texts: Iterable[str]) -> list[bytes]:
    needles: set[bytes] = set()
    for text in texts:
        lowered = text.casefold()
        needles.add(lowered.encode("utf-8"))
        needles.add(json.dumps(lowered)[1:-1].encode("utf-8"))  # ASCII-escaped JSON
        needles.add(json.dumps(lowered, ensure_ascii=False)[1:-1].encode("utf-8"))
    return [n for n in needles if n]


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
