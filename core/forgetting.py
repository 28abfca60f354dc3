"""What `forget` asks and answers: the request, the receipt of an erasure (docs/design.md,
invariant 22), and the Forget workflow's payloads.

A receipt names places and counts, never the forgotten text: it is printed, returned
over HTTP, kept in the Forget workflow's history and may be kept by the person who
asked, so it must not quote what it erased.
"""

from __future__ import annotations

import re
import uuid
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

Scope = Literal["entries", "match", "agent"]
Derived = Literal["report", "forget", "rewrite"]


class _Model(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True)


class Removal(_Model):
    """One place content was removed from, and how much."""

    place: str  # a path relative to the data directory, or a named store part
    what: str  # "entry file", "vector", "ledger lines", "turns", ...
    count: int


class Verification(_Model):
    """The proof run after the erasure, with the forgotten text held in memory only."""

    searches: int = 0  # searches run (one per forgotten text) over every tier
    search_matches: int = 0  # hits that still contain a forgotten text: 0 when clean
    # Every file under the agent's directory, or every row the database keeps for it
    # (`scanned` says which), read as raw bytes (and opened, when sealed).
    files_scanned: int = 0
    files_containing: list[str] = Field(default_factory=list)  # places: empty when clean
    scanned: Literal["files", "rows"] = "files"
    # What else was checked and held (the keys destroyed, the key chain rotated, ...).
    checked: list[str] = Field(default_factory=list)
    # Checks that did not hold: empty when clean.
    failed: list[str] = Field(default_factory=list)

    @property
    def clean(self) -> bool:
        return self.search_matches == 0 and not self.files_containing and not self.failed


class ForgetReceipt(_Model):
    request_id: str
    agent_id: str
    scope: Scope
    dry_run: bool = False
    entries: list[str] = Field(default_factory=list)  # entry ids erased
    # Entries whose mergedFrom chain includes a forgotten entry: with derived="report"
    # they are listed and kept, with "forget" they are erased too (and listed in both),
    # with "rewrite" those that can be are rewritten without it (`rewritten`).
    derived: list[str] = Field(default_factory=list)
    # Archived entries a forgotten one was made from (an enrichment's or dedup's
    # original, a merge's source) that carry the forgotten text too: erased with it.
    copies: list[str] = Field(default_factory=list)
    # Derived entries rewritten without the forgotten text: their sentences that carry
    # it dropped, kept only if every other source's specifics survive (the merge's
    # coverage check); the others stay as they were, reported in `derived`.
    rewritten: list[str] = Field(default_factory=list)
    # Sources of an erased derived entry that had been archived into it: brought back,
    # because the erased entry was the only live carrier of their own content.
    restored: list[str] = Field(default_factory=list)
    removed: list[Removal] = Field(default_factory=list)
    history_keys_destroyed: int = 0  # per-agent payload data keys destroyed
    history_note: str = ""  # why Temporal histories were not shredded, when they were not
    # Whether the store kept the content sealed at rest with the agent's data key (on a
    # database: what a DELETE leaves behind is unreadable once the key is destroyed);
    # None on the file backend, where a removed file is the erasure.
    sealed_at_rest: bool | None = None
    # What the store cannot do itself and an operator must (age out WAL, dead tuples,
    # backups, replicas): plain sentences, no content.
    left_to_operator: list[str] = Field(default_factory=list)
    verification: Verification = Field(default_factory=Verification)
    resumed: list[str] = Field(default_factory=list)  # earlier requests finished first

    @property
    def kept_derived(self) -> list[str]:
        """Derived entries left as they were: they may carry the forgotten information
        in other words, so the erasure is not complete while any is left."""
        done = set(self.entries) | set(self.rewritten)
        return [i for i in self.derived if i not in done]

    @property
    def verified(self) -> bool:
        return self.verification.clean and not self.kept_derived


REQUEST_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_\-]{0,63}")


def new_request_id() -> str:
    return uuid.uuid4().hex[:16]


class ForgetRequest(_Model):
    """What to forget: entry ids, a phrase, or the whole agent (exactly one). The
    request id names the request: asked again with the same id, it is the same Forget
    run (a retry waits for that run's receipt instead of forgetting twice)."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid")

    ids: list[str] = Field(default_factory=list, max_length=10_000)
    match: str | None = Field(default=None, max_length=1_000)
    whole_agent: bool = False
    derived: Derived = "report"
    dry_run: bool = False
    request_id: str | None = Field(default=None, pattern=REQUEST_ID.pattern, max_length=64)

    @property
    def scope(self) -> Scope:
        return "agent" if self.whole_agent else "match" if self.match is not None else "entries"

    def checked(self) -> ForgetRequest:
        """The request, or `InvalidInput` when it names not exactly one kind of target."""
        from dreamkeeper.core.errors import InvalidInput

        given = sum((bool(self.ids), self.match is not None, self.whole_agent))
        if given != 1:
            raise InvalidInput("forget takes entry ids, a match phrase, or the whole agent: one")
        return self


class ForgetInput(_Model):
    """The Forget workflow's input, and its activity's. The one part that can carry
    content, the request (its `--match` phrase), travels sealed on its own with the
    agent's data key (`client.codec.seal_for_agent`, base64 of the sealed payload), so
    the forget's own key destruction makes it undecodable. The rest is ids and flags,
    and names the agent as `agent`, not `agent_id`: the codec seals a payload that
    names an agent at its top level with that agent's key, and this one must stay
    readable to a worker that replays the run after the forget destroyed that key."""

    agent: str
    request_id: str
    scope: Scope
    id_count: int = 0  # how many entry ids the request names (the ids are sealed with it)
    dry_run: bool = False
    sealed_request: str  # base64 of a serialized Payload holding the ForgetRequest
    store_id: str | None = None  # the caller's store: the worker refuses another


class ForgetOutcome(_Model):
    """The Forget workflow's result: the receipt, one level down, so the payload names no
    agent at its top level. Sealed with the deployment's payload key rather than the
    agent's data key, it stays readable as the record of the forget after the key the
    forget destroyed is gone, and a whole-agent forget mints no new key for the agent
    it erased just to seal its own receipt. The receipt holds no content."""

    receipt: ForgetReceipt


def describe_request(scope: Scope, count: int, dry_run: bool) -> str:
    """What a forget does, in words with no content (a workflow summary, a step's
    details): never the phrase, only how many ids."""
    what = {
        "entries": f"forget {count} memor{'y' if count == 1 else 'ies'} by id",
        "match": "forget the memories matching a phrase",
        "agent": "forget the whole agent",
    }[scope]
    return f"dry run: {what}" if dry_run else what
