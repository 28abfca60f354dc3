"""Copying one store into another (`dreamkeeper migrate --to postgresql://...`): first
the access tokens of `serve` (`carry_tokens`: the mark that tokens were issued before
anything else, so a server on the target never starts open, even if the copy stops
half-way), then every agent's long-term memory through the bulk path (`import_entries`), its live working
memory, its conversations and its dream-state documents, then a check that both sides
hold the same entries. Then the per-agent payload data keys (`carry_agent_keys`): still
wrapped, so the payloads the data directory's workers sealed open on every worker of the
database, and what was destroyed there still reads "erased".

Safe to re-run after a crash at any point, with no duplicate: `import_entries` is
idempotent by id (an entry already there with the same content is left as it is);
a working-memory key is overwritten, not added; a session's turns are appended only past
those the target already has; a document is replaced whole. The source is only read.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass, field

from dreamkeeper.core.models import MemoryEntry
from dreamkeeper.stores.contract import ConversationStore, WorkingMemoryStore
from dreamkeeper.stores.contract.backend import ExportsAgentKeys, ImportsAgentKeys, StoreBackend
from dreamkeeper.stores.contract.documents import AgentDocuments
from dreamkeeper.stores.contract.tokens import TokenStore
from dreamkeeper.stores.faults import MIGRATE_AGENT_COPIED, crash_point

WORKING_LIST_CAP = 1_000_000  # every live key: a namespace holds a bounded number


@dataclass
class AgentCopy:
    agent_id: str
    entries: int = 0  # long-term entries in the source, archived included
    created: int = 0  # of them, new in the target by this run
    conflicts: list[str] = field(default_factory=list)  # ids the target holds otherwise
    working: int = 0
    turns: int = 0  # turns appended by this run
    documents: int = 0


@dataclass
class Mismatch:
    agent_id: str
    what: str

    def __str__(self) -> str:
        return f"agent {self.agent_id}: {self.what}"


@dataclass
class TokensCopy:
    tokens: int = 0  # token records in the source, revoked ones included
    carried: int = 0  # of them, new in the target by this run
    revoked: int = 0  # revocations carried to a record the target already had
    issued: bool = False  # the target is marked as a store that issued tokens
    mismatches: list[str] = field(default_factory=list)


@dataclass
class MigrationReport:
    agents: list[AgentCopy] = field(default_factory=list)
    mismatches: list[Mismatch] = field(default_factory=list)
    tokens: TokensCopy = field(default_factory=TokensCopy)

    @property
    def entries(self) -> int:
        return sum(a.entries for a in self.agents)

    @property
    def created(self) -> int:
        return sum(a.created for a in self.agents)

    @property
    def verified(self) -> bool:
        return not self.mismatches and not self.tokens.mismatches


def content_digest(entries: list[MemoryEntry]) -> str:
    """One hash over an agent's entries as stored, archived ones too, in id order; a
    store's own bookkeeping (revision, applied ops) is left out: an import starts it
    afresh, so it differs between copies of the same memories."""
    digest = hashlib.sha256()
    for entry in sorted(entries, key=lambda e: e.id):
        digest.update(entry.model_dump_json(exclude={"revision", "applied_ops"}).encode())
        digest.update(b"\n")
    return digest.hexdigest()


def _copy_working(source: WorkingMemoryStore, target: WorkingMemoryStore) -> int:
    now = source.now()
    copied = 0
    for entry in source.list(cap=WORKING_LIST_CAP).entries:
        ttl = entry.expires_at - now
        if ttl.total_seconds() <= 0:
            continue  # expired between the listing and now: nothing to carry over
        if entry.key.startswith("stash/"):
            target.put_stash(entry.key, entry.value, ttl=ttl, tags=list(entry.tags))
        else:
            target.save(
                entry.namespace,
                entry.key,
                entry.value,
                ttl=ttl,
                category=entry.category,
                tags=list(entry.tags),
            )
        copied += 1
    return copied


def _copy_conversations(source: ConversationStore, target: ConversationStore) -> int:
    appended = 0
    for session_id in source.sessions():
        turns = source.conversation(session_id).turns
        # Only past what the target has: a re-run after a crash mid-session appends the
        # rest, never a turn twice.
        have = len(target.conversation(session_id))
        for turn in turns[have:]:
            target.add_turn(session_id, turn.role, turn.content)
            appended += 1
    return appended


def _copy_documents(theirs: AgentDocuments, ours: AgentDocuments) -> int:
    copied = 0
    for name in theirs.names(""):
        data = theirs.read(name)
        if data is not None and ours.read(name) != data:
            ours.write(name, data)
            copied += 1
    return copied


def copy_agent(source: StoreBackend, target: StoreBackend, agent_id: str) -> AgentCopy:
    copy = AgentCopy(agent_id)
    theirs = source.memory(agent_id)
    ours = target.memory(agent_id)
    entries = theirs.entries(include_archived=True)
    copy.entries = len(entries)
    report = ours.import_entries(entries)
    copy.created = len(report.entries) - len(report.unchanged)
    copy.conflicts = list(report.conflicts)
    copy.working = _copy_working(source.working(agent_id), target.working(agent_id))
    copy.turns = _copy_conversations(source.conversations(agent_id), target.conversations(agent_id))
    # Last: the conversation log among them replaces what appending turns logged.
    copy.documents = _copy_documents(source.documents(agent_id), target.documents(agent_id))
    return copy


def verify_agent(source: StoreBackend, target: StoreBackend, agent_id: str) -> list[Mismatch]:
    """Counts and the content digest of the agent's long-term entries on both sides."""
    theirs = source.memory(agent_id).entries(include_archived=True)
    ours = target.memory(agent_id).entries(include_archived=True)
    found: list[Mismatch] = []
    if len(theirs) != len(ours):
        found.append(Mismatch(agent_id, f"{len(theirs)} entries in the source, {len(ours)} here"))
    elif content_digest(theirs) != content_digest(ours):
        differ = sorted(
            {e.id for e in theirs} ^ {e.id for e in ours}
            or {
                a.id
                for a, b in zip(
                    sorted(theirs, key=lambda e: e.id),
                    sorted(ours, key=lambda e: e.id),
                    strict=True,
                )
                if content_digest([a]) != content_digest([b])
            }
        )
        found.append(Mismatch(agent_id, f"content differs in {', '.join(differ[:5])}"))
    return found


def carry_tokens(source: TokenStore, target: TokenStore) -> TokensCopy:
    """Copy `serve`'s access tokens as stored (salted hashes: no secret is ever needed or
    seen), revoked ones and revocations too, then check that the target holds every
    record exactly. The target is marked as a store that issued tokens before the first
    record, and whenever the source is (even one whose tokens are damaged: then none is
    carried, and servers on the target stay closed until an operator issues new ones).
    Idempotent; a revocation never goes back to active."""
    copy = TokensCopy()
    found = source.snapshot()
    if found.issued:
        target.mark_issued()
        copy.issued = True
    if found.damage is not None:
        copy.mismatches.append(
            f"the source's access tokens are damaged ({found.damage}): none was carried, "
            "and servers on the target refuse every request until tokens are issued there"
        )
        return copy
    copy.tokens = len(found.records)
    for record in found.records.values():
        held = target.find(record.id)
        if held is None:
            target.add(record)
            copy.carried += 1
        elif held != record and held.active and record.revoked_at is not None:
            target.revoke(record.id, record.revoked_at)
            copy.revoked += 1
    held_now = target.snapshot()
    if held_now.damage is not None:
        copy.mismatches.append(f"the target's access tokens are damaged: {held_now.damage}")
    if found.issued and not held_now.issued:
        copy.mismatches.append("the target is not marked as a store that issued tokens")
    for record in found.records.values():
        there = held_now.find(record.id)
        if there is None:
            copy.mismatches.append(f"token {record.id} is not in the target")
        elif there != record:
            what = "revoked there, active in the source" if not there.active else "another record"
            copy.mismatches.append(f"token {record.id} differs in the target ({what})")
    return copy


def migrate(
    source: StoreBackend,
    target: StoreBackend,
    *,
    progress: Callable[[int, int, AgentCopy], None] | None = None,
) -> MigrationReport:
    """Carry the access tokens, then copy every agent of `source` into `target` and
    verify each; `progress(done, total, copy)` after each agent."""
    report = MigrationReport()
    report.tokens = carry_tokens(source.tokens(), target.tokens())
    agents = source.agents()
    for number, agent_id in enumerate(agents, start=1):
        copy = copy_agent(source, target, agent_id)
        report.agents.append(copy)
        crash_point(MIGRATE_AGENT_COPIED)
        if progress is not None:
            progress(number, len(agents), copy)
    for agent_id in agents:
        report.mismatches.extend(verify_agent(source, target, agent_id))
    return report


@dataclass
class KeysCopy:
    keys: int = 0  # agent data keys under the data directory
    carried: int = 0  # of them, new in the database by this run
    destroyed: int = 0  # destroyed key ids new on the database's list by this run
    mismatches: list[str] = field(default_factory=list)


def carry_agent_keys(source: ExportsAgentKeys, target: ImportsAgentKeys) -> KeysCopy:
    """Copy the source's payload data keys (a data directory's `agent-keys/`) into the
    target's (the database's key tables), as stored (wrapped: the payload key is not
    needed here, and no key is ever in clear), then check that every key of the source
    is in the target (or was destroyed there) and every destroyed id is on its list.
    Idempotent like the rest of `migrate`."""
    export = source.export_agent_keys()
    copy = KeysCopy(keys=len(export.keys), mismatches=list(export.unreadable))
    # The destroyed ids first: a key whose forget was interrupted (its id listed, its file
    # not yet deleted) is then refused by the database rather than brought back to life.
    copy.destroyed = target.import_destroyed_keys(export.destroyed)
    for agent_id, stored in export.keys:
        copy.carried += target.import_agent_key(agent_id, stored)
    held, held_gone = target.held_agent_keys()
    for agent_id, stored in export.keys:
        if (agent_id, stored.key_id) not in held and stored.key_id not in held_gone:
            copy.mismatches.append(
                f"agent {agent_id}: data key {stored.key_id} is not in the database"
            )
    if export.destroyed - held_gone:
        missing = len(export.destroyed - held_gone)
        copy.mismatches.append(f"{missing} destroyed key ids are not in the database")
    return copy
