"""An audit of agents' stores (and of the workflows that wrote them) after a run.

Reads only what is stored — each agent's store opened fresh, its entries and its change
feed — plus, for the workflow part, the Temporal visibility list. One set of checks for
every backend (`audit_entries`): `audit_store` feeds it a file store's entry files,
journal and op ledgers as they lie on disk; `audit_memory_store` feeds it any store
through the store contract (its entries and `changes()`, the change feed), which is how
a PostgreSQL store is audited. Used by `bench/killstorm.py`; written as plain functions
so tests can run it on a store they built by hand.

What it checks, per agent:
- coverage: every acknowledged save is live, or archived into entries (`retiredInto`
  when the entry has that field, else its `archiveReason`: "enriched into [a, b]",
  "merged into x"; chains followed) that are live and together hold every specific of
  the acknowledged content (`find_missing_specifics`). One whose specifics went with an
  entry archived "flagged ephemeral by consolidation" is a deliberate prune, not a loss
  — unless the way there had a dead end or a retirement into an entry that was
  already archived. That last is also reported for every entry of the store
  (invariant 13: retire only into something live), covered or not.
- duplicate live entries: current entries (neither archived nor superseded) of one
  category with the same whitespace-collapsed content (the ones beyond the first of each
  group are counted). A superseded entry is history: a later save of the same words is
  the fact true again (A, then B, then A), not a copy of it.
- files (rows) without a journal (feed) record: a stored entry whose id no record of the
  change feed names (or, when records carry `rev` and entries `revision`, whose revision
  none does); and, beyond that, entries whose current state the feed never recorded: the
  last record of the id has another content fingerprint, or the entry is archived (live)
  while the feed's last archive/restore record says the opposite.
- ops applied twice: one op reason ("save {op}", "absorbed {id}", "folded exact
  duplicates [...]", "merge of [...]") recorded twice on one entry; an entry whose
  reinforcementCount exceeds what every op that could reach it adds up to (its creation
  or its merge sources, each distinct reinforcing op in the journal or the op ledgers,
  the copies folded into it); and an acknowledged save whose content also persisted
  under another id (a retry that minted a new id after the first attempt landed).

And across agents: which worker served which agent (`worker_split`), from the workflow
histories: every completed activity counted for the worker identity that completed it.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
from collections import Counter, defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from temporalio.api.history.v1 import HistoryEvent

from dreamkeeper.core.models import MemoryEntry, content_fingerprint
from dreamkeeper.policies.consolidation import EPHEMERAL_REASON
from dreamkeeper.policies.coverage import Source, find_missing_specifics
from dreamkeeper.stores.contract import MemoryStore
from dreamkeeper.stores.contract.feed import JournalRecord
from dreamkeeper.stores.files.entry_files import EMBEDDINGS_DIR
from dreamkeeper.stores.files.memory_store import FileMemoryStore
from dreamkeeper.workflows.save import derived_id

_ENRICHED = re.compile(r"^enriched into \[([0-9a-f, ]*)\]$")
_MERGED = re.compile(r"^merged into ([0-9a-f]{12})$")
_ID_LIST = re.compile(r"[0-9a-f]{12}")
OP_REASON = re.compile(r"^(save |absorbed |folded exact duplicates |merge of )")
# A fold's record: "folded N exact duplicate(s)" with the op id (the copies it summed are
# the op's detail in the survivor's appliedOps); "folded exact duplicates [ids]" before.
FOLD_REASON = re.compile(r"^folded (exact duplicates |\d+ exact duplicate\(s\))")
COUNTING_ACTIONS = {"reinforced", "extended", "merged"}
MAX_DERIVED = 64  # enrichment facts per save the coverage of a retry copy looks through


@dataclass(frozen=True)
class AckedSave:
    agent: str
    entry_id: str
    content: str
    category: str | None = None


@dataclass(frozen=True)
class Loss:
    entry_id: str
    missing: list[str]
    fate: str  # where the content went, for a person to follow


@dataclass
class StoreAudit:
    agent: str
    acked: int = 0
    covered: int = 0
    lost: list[Loss] = field(default_factory=list)
    pruned: list[str] = field(default_factory=list)  # acked ids gone by ephemeral prune
    duplicate_groups: list[list[str]] = field(default_factory=list)
    unjournaled_files: list[str] = field(default_factory=list)  # paths
    unrecorded_states: list[str] = field(default_factory=list)  # "id: why"
    late_retirements: list[str] = field(default_factory=list)  # invariant 13, any entry
    journaled_but_missing: list[str] = field(default_factory=list)
    temp_files: int = 0
    # Files whose records a journal compaction dropped (not unjournaled: the journal said
    # so up to the compaction, and its new generation starts from the files).
    compacted_files: int = 0
    twice_records: list[str] = field(default_factory=list)  # "id: reason ×n"
    over_reinforced: list[str] = field(default_factory=list)  # "id: count > bound"
    retry_copies: list[str] = field(default_factory=list)  # "acked id: copy ids"
    problems: list[str] = field(default_factory=list)  # files the store skipped
    live: int = 0
    archived: int = 0

    @property
    def duplicates(self) -> int:
        return sum(len(g) - 1 for g in self.duplicate_groups)

    @property
    def applied_twice(self) -> int:
        return len(self.twice_records) + len(self.over_reinforced) + len(self.retry_copies)


# -- reading what is on disk ----------------------------------------------------------


def entry_files(memory_dir: Path) -> tuple[dict[str, tuple[Path, dict]], int]:
    """Every `memory/**/*.json` entry file as id -> (path, raw JSON), and how many
    leftover temp files lie beside them. Unreadable files are left to the store's report."""
    files: dict[str, tuple[Path, dict]] = {}
    temps = 0
    if not memory_dir.is_dir():
        return files, 0
    for dirpath, dirnames, filenames in os.walk(memory_dir):
        dirnames[:] = [d for d in dirnames if d != EMBEDDINGS_DIR and not d.startswith(".")]
        for name in filenames:
            if name.endswith(".tmp"):
                temps += 1
            if not name.endswith(".json") or name.startswith("."):
                continue
            path = Path(dirpath) / name
            try:
                raw = json.loads(path.read_text("utf-8"))
            except (OSError, ValueError):
                continue
            if isinstance(raw, dict):
                files[path.stem] = (path, raw)
    return files, temps


def journal_records(path: Path) -> list[dict]:
    """The journal's complete lines as raw dicts (fields this code does not know kept)."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return []
    records = []
    for line in data[: data.rfind(b"\n") + 1].splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict) and "id" in record and record.get("action") != "epoch":
            records.append(record)  # (the epoch line is the store's identity, no change)
    return records


def op_ledgers(ops_dir: Path) -> tuple[dict[str, str], list[dict]]:
    """Save-op ledgers as op id -> target id, and the fold ledgers."""
    targets: dict[str, str] = {}
    folds: list[dict] = []
    if not ops_dir.is_dir():
        return targets, folds
    for path in ops_dir.glob("*.json"):
        try:
            raw = json.loads(path.read_text("utf-8"))
        except (OSError, ValueError):
            continue
        if path.stem.startswith("fold-"):
            folds.append(raw)
        elif isinstance(raw, dict) and "target" in raw:
            targets[path.stem] = raw["target"]
    return targets, folds


def retired_into(entry: MemoryEntry, raw: dict | None) -> list[str] | None:
    """The entries an archived entry was retired into, or None if it was not retired
    into anything (pruned, deleted, or a reason this code does not know)."""
    if raw is not None and isinstance(raw.get("retiredInto"), list) and raw["retiredInto"]:
        return [str(i) for i in raw["retiredInto"]]
    reason = entry.archive_reason or ""
    if m := _ENRICHED.match(reason):
        return _ID_LIST.findall(m.group(1))
    if m := _MERGED.match(reason):
        return [m.group(1)]
    return None


# -- (a) coverage of acknowledged saves ----------------------------------------------


def archive_order(records: list[dict]) -> dict[str, int]:
    """Each archived id's position in the journal's sequence of archives (the last one):
    the order they happened in, whatever `archivedAt` says (a dream stamps its `as_of`)."""
    order: dict[str, int] = {}
    for index, record in enumerate(records):
        if record.get("action") == "archived":
            order[record["id"]] = index
        elif record.get("action") == "restored":
            order.pop(record["id"], None)
    return order


def late_retirements(
    entries: dict[str, MemoryEntry], raw: dict[str, dict], order: dict[str, int]
) -> list[str]:
    """Entries archived into a replacement that was already archived (or never existed)
    when they were retired — what invariant 13 forbids, whether or not a chain from the
    replacement still reaches the content."""
    found = []
    for eid, entry in sorted(entries.items()):
        if not entry.is_archived:
            continue
        for target in retired_into(entry, raw.get(eid)) or []:
            other = entries.get(target)
            if other is None:
                found.append(f"{eid} retired into {target}, which has no file")
            elif other.is_archived and order.get(target, -1) < order.get(eid, -1):
                found.append(
                    f"{eid} ({entry.archive_reason}) retired into {target}, already "
                    f"archived {other.archive_reason!r}"
                )
    return found


def follow(
    entry_id: str,
    entries: dict[str, MemoryEntry],
    raw: dict[str, dict],
    order: dict[str, int] | None = None,
) -> tuple[list[MemoryEntry], bool, list[str]]:
    """Where an entry's content lives now: the live entries reached by following what
    it was retired into, whether an ephemeral prune cut a branch, and the dead ends
    (with `order`, a retirement into an entry archived before it counts as one)."""
    order = order or {}
    live: dict[str, MemoryEntry] = {}
    pruned = False
    dead: list[str] = []
    done: set[str] = set()

    def visit(eid: str, path: tuple[str, ...]) -> None:
        nonlocal pruned
        if eid in path:
            dead.append(f"{eid} reached again: the retirement chain loops")
            return
        if eid in done:  # another branch got here first (a merge of two retirees)
            return
        done.add(eid)
        entry = entries.get(eid)
        if entry is None:
            dead.append(f"{eid} has no file")
            return
        if not entry.is_archived:
            live[eid] = entry
            return
        targets = retired_into(entry, raw.get(eid))
        if not targets:
            if entry.archive_reason == EPHEMERAL_REASON:
                pruned = True
            else:
                dead.append(f"{eid} archived {entry.archive_reason!r}")
            return
        for target in targets:
            other = entries.get(target)
            if (
                other is not None
                and other.is_archived
                and order.get(target, -1) < order.get(eid, -1)
            ):
                dead.append(f"{eid} retired into {target} after {target} was archived")
            visit(target, (*path, eid))

    visit(entry_id, ())
    return list(live.values()), pruned, dead


def check_coverage(
    audit: StoreAudit,
    acked: Iterable[AckedSave],
    entries: dict[str, MemoryEntry],
    raw: dict[str, dict],
    order: dict[str, int] | None = None,
) -> None:
    """An ephemeral prune explains a missing specific only when nothing else went wrong
    on the way there (no dead end, no retirement into an already archived entry)."""
    for save in acked:
        audit.acked += 1
        entry = entries.get(save.entry_id)
        if entry is not None and not entry.is_archived:
            audit.covered += 1
            continue
        live, pruned, dead = follow(save.entry_id, entries, raw, order)
        text = "\n".join(e.content for e in live)
        missing = find_missing_specifics([Source(save.content, save.category)], text)
        if not missing:
            audit.covered += 1
        elif pruned and not dead:
            audit.pruned.append(save.entry_id)
        else:
            where = [f"live: {', '.join(e.id for e in live) or 'none'}", *dead]
            if entry is not None:
                where.insert(0, f"archived {entry.archive_reason!r}")
            audit.lost.append(Loss(save.entry_id, missing, "; ".join(where)))


# -- (b) duplicate live entries ------------------------------------------------------


def duplicate_groups(entries: Iterable[MemoryEntry]) -> list[list[str]]:
    groups: dict[tuple[str | None, str], list[str]] = defaultdict(list)
    for entry in entries:
        if entry.is_current:
            groups[(entry.category, " ".join(entry.content.split()))].append(entry.id)
    return [sorted(ids) for ids in groups.values() if len(ids) > 1]


# -- (c) files and the journal -------------------------------------------------------


def check_journal(
    audit: StoreAudit,
    files: dict[str, tuple[str, dict]],
    records: list[dict],
    entries: dict[str, MemoryEntry],
    *,
    compacted: bool = False,
) -> None:
    """`files`: each stored entry as id -> (where it lies, its raw JSON). `compacted`:
    the journal was compacted (docs/storage.md, "Compacting the file journal"), so an
    entry unchanged since has no record left, and one archived or restored before has
    none of that: only what the records kept can be checked against the files."""
    by_id: dict[str, list[dict]] = defaultdict(list)
    for record in records:
        by_id[record["id"]].append(record)
    for eid, (path, raw) in sorted(files.items()):
        mine = by_id.get(eid)
        if not mine:
            if compacted:
                audit.compacted_files += 1  # its records went with the old generation
            else:
                audit.unjournaled_files.append(str(path))
            continue
        revision = raw.get("revision")
        if revision is not None and any("rev" in r for r in mine):
            if not any(r.get("rev") == revision for r in mine):
                audit.unjournaled_files.append(f"{path} (revision {revision})")
                continue
        content = raw.get("content")
        if isinstance(content, str) and mine[-1].get("fingerprint") not in (
            None,
            content_fingerprint(content),
        ):
            audit.unrecorded_states.append(
                f"{eid}: file content {content_fingerprint(content)}, last record "
                f"{mine[-1].get('action')} {mine[-1].get('fingerprint')}"
            )
            continue
        states = [r["action"] for r in mine if r.get("action") in ("archived", "restored")]
        if compacted and not states:
            continue  # its archive state was recorded, if ever, before the compaction
        journal_archived = bool(states) and states[-1] == "archived"
        file_archived = raw.get("archivedAt") is not None
        if file_archived != journal_archived:
            audit.unrecorded_states.append(
                f"{eid}: file {'archived' if file_archived else 'live'}, journal says "
                f"{'archived' if journal_archived else 'live'}"
            )
    for eid, mine in sorted(by_id.items()):
        if eid not in files and mine[-1].get("action") != "purged":
            audit.journaled_but_missing.append(eid)


# -- (d) ops applied twice -----------------------------------------------------------


def _ids(text: str) -> list[str]:
    return _ID_LIST.findall(text)


def fold_copies(survivor: MemoryEntry | None, op: str | None) -> list[str]:
    """The copies a fold `op` summed into `survivor`, from its appliedOps ("merged:a,b");
    none when the op aged out of them (the bound is then lower, never looser)."""
    if survivor is None or not op or op not in survivor.applied_ops:
        return []
    _, _, detail = survivor.applied_ops[op].partition(":")
    return [c for c in detail.split(",") if c]


def void_writes(records: list[dict]) -> frozenset[int]:
    """Indexes of journaled writes whose file never landed: each `repaired` record voids
    the latest earlier record of the same entry and revision (a retry may then journal
    that revision again, for real)."""
    latest: dict[tuple[str, object], int] = {}
    void: set[int] = set()
    for index, record in enumerate(records):
        key = (record.get("id", ""), record.get("rev"))
        if record.get("action") == "repaired":
            if key in latest:
                void.add(latest.pop(key))
        else:
            latest[key] = index
    return frozenset(void)


def check_applied_twice(
    audit: StoreAudit, records: list[dict], entries: dict[str, MemoryEntry], ops_dir: Path | None
) -> None:
    reasons: Counter[tuple[str, str]] = Counter()
    created: set[str] = set()
    merge_sources: dict[str, list[str]] = {}
    reinforcing: dict[str, set[str]] = defaultdict(set)  # id -> distinct op keys
    folded: dict[str, set[tuple[str, ...]]] = defaultdict(set)  # survivor -> copy groups
    # A write journaled ahead whose file never landed (the process died in between) is
    # void: the next writer's `repaired` record names its revision. Not an application.
    void = void_writes(records)
    for index, record in enumerate(records):
        eid, action, reason = record["id"], record.get("action"), record.get("reason") or ""
        if index in void:
            continue
        if action == "created":
            created.add(eid)
        op = record.get("op")
        if action in COUNTING_ACTIONS and op:
            reasons[(eid, f"op {op}")] += 1  # one op, applied once, whatever its reason
        elif action in COUNTING_ACTIONS and OP_REASON.match(reason):
            reasons[(eid, reason)] += 1
        if action in ("reinforced", "extended") and reason:
            reinforcing[eid].add(reason)
        elif action == "merged" and reason.startswith("merge of "):
            merge_sources.setdefault(eid, _ids(reason))
        elif action == "merged" and FOLD_REASON.match(reason):
            folded[eid].add(tuple(sorted(_ids(reason) or fold_copies(entries.get(eid), op))))
    targets, folds = op_ledgers(ops_dir) if ops_dir is not None else ({}, [])
    for op_id, target in targets.items():
        reinforcing[target].add(f"save {op_id}")
    for fold in folds:
        if isinstance(fold, dict) and "survivor" in fold:
            folded[fold["survivor"]].add(tuple(sorted(fold.get("copies", []))))
    audit.twice_records = [
        f"{eid}: {reason!r} ×{n}" for (eid, reason), n in sorted(reasons.items()) if n > 1
    ]

    def count(eid: str) -> int:
        entry = entries.get(eid)
        return entry.reinforcement_count if entry is not None else 0

    for eid, entry in sorted(entries.items()):
        if eid in created:
            base = 1
        elif eid in merge_sources:
            base = sum(count(s) for s in merge_sources[eid])
        else:
            continue  # made some other way (seeded, restored from elsewhere): no bound
        bound = base + len(reinforcing[eid]) + sum(count(c) for g in folded[eid] for c in g)
        if entry.reinforcement_count > bound:
            audit.over_reinforced.append(
                f"{eid}: reinforced {entry.reinforcement_count}× > "
                f"{bound} the ops reaching it add up to"
            )


def check_retry_copies(
    audit: StoreAudit, acked: Iterable[AckedSave], entries: dict[str, MemoryEntry]
) -> None:
    """Acknowledged saves whose exact content also lies under an id that is neither
    theirs nor derived from theirs: an earlier attempt of the same save that landed."""
    by_content: dict[str, list[str]] = defaultdict(list)
    for entry in entries.values():
        if "mergedFrom" not in entry.metadata:
            by_content[entry.content].append(entry.id)
    for save in acked:
        own = {save.entry_id, *(derived_id(save.entry_id, i) for i in range(MAX_DERIVED))}
        copies = sorted(i for i in by_content.get(save.content, []) if i not in own)
        if copies:
            audit.retry_copies.append(f"{save.entry_id}: also {', '.join(copies)}")


# -- one agent -------------------------------------------------------------------------


def audit_entries(
    agent: str,
    acked: Iterable[AckedSave],
    entries: list[MemoryEntry],
    records: list[dict],
    *,
    documents: dict[str, tuple[str, dict]] | None = None,
    problems: Iterable[str] = (),
    temp_files: int = 0,
    ops_dir: Path | None = None,
) -> StoreAudit:
    """Every check above for one agent, whatever the backend: `entries` as the store
    serves them, `records` its change feed (oldest first, as dicts), `documents` each
    entry as stored (id -> (where, raw JSON); default: the entries' own JSON)."""
    acked = [a for a in acked if a.agent == agent]
    audit = StoreAudit(agent=agent)
    # A compacted file journal's marker names no entry; it says earlier records are gone.
    compacted = any(r.get("action") == "compacted" for r in records)
    records = [r for r in records if r.get("action") != "compacted"]
    by_id = {e.id: e for e in entries}
    audit.live = sum(1 for e in entries if not e.is_archived)
    audit.archived = len(entries) - audit.live
    audit.problems = list(problems)
    audit.temp_files = temp_files
    if documents is None:
        documents = {e.id: (f"entry {e.id}", json.loads(e.to_json())) for e in entries}
    raw = {eid: data for eid, (_, data) in documents.items()}
    order = archive_order(records)
    check_coverage(audit, acked, by_id, raw, order)
    audit.late_retirements = late_retirements(by_id, raw, order)
    audit.duplicate_groups = duplicate_groups(entries)
    check_journal(audit, documents, records, by_id, compacted=compacted)
    check_applied_twice(audit, records, by_id, ops_dir)
    check_retry_copies(audit, acked, by_id)
    return audit


def audit_store(data_dir: Path, agent: str, acked: Iterable[AckedSave]) -> StoreAudit:
    """Every check for one agent's file store, from what is on disk now: the entry files
    as they lie (not as the store loads them), the journal's lines, the op ledgers."""
    store = FileMemoryStore(data_dir, agent)
    files, temps = entry_files(store.memory_dir)
    return audit_entries(
        agent,
        acked,
        store.entries(include_archived=True),
        journal_records(store.journal.path),
        documents={eid: (str(path), data) for eid, (path, data) in files.items()},
        problems=[f"{path}: {why}" for path, why in store.problems().items()],
        temp_files=temps,
        ops_dir=store.root / "ops",
    )


def feed_record(record: JournalRecord) -> dict:
    """A change-feed record as the audit reads it (the journal line's fields)."""
    return dict(json.loads(record.to_line()))


def audit_memory_store(store: MemoryStore, acked: Iterable[AckedSave]) -> StoreAudit:
    """Every check for one agent's store of any backend, through the store contract:
    its entries (live and archived) and its change feed (`changes()`). Open the store
    fresh, so nothing cached in this process stands in for what is stored."""
    return audit_entries(
        store.agent_id,
        acked,
        store.entries(include_archived=True),
        [feed_record(r) for r in store.changes()],
        problems=[f"{where}: {why}" for where, why in store.problems().items()],
    )


# -- (e), (f): the workflows ---------------------------------------------------------


@dataclass
class WorkflowAudit:
    total: int = 0
    by_status: Counter = field(default_factory=Counter)  # (type, status) -> n
    not_completed: list[str] = field(default_factory=list)  # "type id status"
    dreams_completed: dict[str, int] = field(default_factory=dict)  # agent -> n


async def audit_workflows(client, agents: Iterable[str], query: str | None = None) -> WorkflowAudit:
    """Every workflow execution visible (or those `query` selects): status by type, the
    ones not completed, and completed `Dream` runs per agent (id `dream-{agent}`)."""
    from temporalio.client import WorkflowExecutionStatus

    result = WorkflowAudit(dreams_completed={a: 0 for a in agents})
    async for wf in client.list_workflows(query):
        status = wf.status.name if wf.status is not None else "UNKNOWN"
        result.total += 1
        result.by_status[(wf.workflow_type, status)] += 1
        if wf.status != WorkflowExecutionStatus.COMPLETED:
            result.not_completed.append(f"{wf.workflow_type} {wf.id} {status}")
        elif wf.workflow_type == "Dream" and wf.id.startswith("dream-"):
            agent = wf.id[len("dream-") :]
            if agent in result.dreams_completed:
                result.dreams_completed[agent] += 1
    return result


# -- (g) which worker served which agent ---------------------------------------------

LOCAL_ACTIVITY_MARKER = "core_local_activity"  # the SDK core's marker for a local activity
WORKER_IDENTITY = re.compile(r"^killstorm-w(\d+)-")


def worker_of(identity: str) -> str:
    """The worker slot an identity `killstorm-w{n}-{pid}` names ("w{n}"), whichever of
    its restarts it was; another identity as it is."""
    match = WORKER_IDENTITY.match(identity)
    return f"w{match[1]}" if match else (identity or "unknown")


def completed_by(events: Iterable[HistoryEvent]) -> Iterator[str]:
    """The worker of each activity a history completed: a regular activity by the identity
    on its completed event; a local activity (a marker) by the workflow task that
    recorded it, whose completed event comes just before its commands' events."""
    task_identity = ""
    for event in events:
        if event.HasField("workflow_task_completed_event_attributes"):
            task_identity = event.workflow_task_completed_event_attributes.identity
        elif event.HasField("activity_task_completed_event_attributes"):
            yield worker_of(event.activity_task_completed_event_attributes.identity)
        elif (
            event.HasField("marker_recorded_event_attributes")
            and event.marker_recorded_event_attributes.marker_name == LOCAL_ACTIVITY_MARKER
        ):
            yield worker_of(task_identity)


async def worker_split(client, agents: Iterable[str], *, parallel: int = 8) -> dict[str, Counter]:
    """Per agent, how many activities each worker completed for it, read from the
    histories of every visible workflow tagged with the agent (`AgentId`)."""
    from dreamkeeper.client.attributes import AGENT_ID

    split: dict[str, Counter] = {a: Counter() for a in agents}
    gate = asyncio.Semaphore(parallel)

    async def count(wf) -> None:
        agent = wf.typed_search_attributes.get(AGENT_ID)
        if agent not in split:
            return
        async with gate:
            history = await client.get_workflow_handle(wf.id, run_id=wf.run_id).fetch_history()
        split[agent].update(completed_by(history.events))

    await asyncio.gather(*[count(wf) async for wf in client.list_workflows()])
    return split
