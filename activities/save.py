"""Save activities: persist the raw original, enrich it with the LLM, save each fact
through dedup, and record the outcome on the original."""

from __future__ import annotations

from datetime import datetime, timedelta

from temporalio import activity

from dreamkeeper.activities.llm import (
    ENRICH_PROMPT,
    MAX_FACTS_PER_REPLY,
    Enrichment,
    ask_llm,
    enrich_message,
    parse_enrichment,
)
from dreamkeeper.activities.stores import StoreRegistry
from dreamkeeper.core.errors import Conflict, InvalidInput, NotFound
from dreamkeeper.core.models import SOURCE_KEY, MemoryEntry
from dreamkeeper.core.payloads import (
    EnrichResult,
    FactProposal,
    MarkInput,
    RetireInput,
    RetireResult,
    SaveAck,
    SaveFactInput,
    SaveFactResult,
    SaveInput,
)
from dreamkeeper.core.settings import HighValueFloor, LLMSettings
from dreamkeeper.core.validation import check_moment, parse_moment, validate_replaces
from dreamkeeper.policies.dedup import Candidate
from dreamkeeper.policies.in_flight import ENRICHMENT_KEY, PENDING, save_in_flight
from dreamkeeper.policies.injection import flag_if_instruction, flagged, reads_as_instruction
from dreamkeeper.policies.provenance import fact_importance, parse_source
from dreamkeeper.stores.contract import MemoryStore
from dreamkeeper.stores.longterm.conflicts import note_conflicts
from dreamkeeper.stores.longterm.dedup_save import dedup_existing, save_fact
from dreamkeeper.stores.longterm.supersede import apply_replaces, check_replaceable
from dreamkeeper.stores.search.query import search

NEIGHBOURS = 5  # existing entries shown with a note, that one of its facts may replace
# How far past the save an LLM may date a fact's start ("starting Monday", "from next
# month"); a caller's own valid_from may go further (`core.validation`).
LLM_VALID_FROM_MAX_AHEAD = timedelta(days=31)


def proposed_valid_from(text: str, saved_at: datetime) -> datetime | None:
    """An LLM's validFrom, if well-formed and within its bound of the save; else None."""
    try:
        moment = parse_moment(text, "validFrom")
        return check_moment(moment, "validFrom", now=saved_at, ahead=LLM_VALID_FROM_MAX_AHEAD)
    except InvalidInput:
        return None


def enrichment_result(reply: Enrichment, category: str | None, entry_id: str) -> EnrichResult:
    """The facts to save: each already valid by the store's rules (a fact without a
    valid category of its own takes the caller's), with what was dropped or ignored."""
    if reply.dropped or reply.ignored:
        activity.logger.warning(
            "enrichment of %s: dropped %d fact(s) the store would refuse, ignored %d past "
            "the cap of %d",
            entry_id,
            reply.dropped,
            reply.ignored,
            MAX_FACTS_PER_REPLY,
        )
    return EnrichResult(
        facts=[
            FactProposal(
                content=fact.content,
                category=fact.category or category,
                tags=fact.tags,
                importance=fact.importance,
                metadata=fact.metadata or {},
            )
            for fact in reply.facts
        ],
        dropped=reply.dropped,
        ignored=reply.ignored,
    )


NO_LLM_SKIP = "no LLM configured: the original is kept verbatim"
FLAGGED_SKIP = "reads as an instruction to the memory system: kept verbatim, not enriched"


def refused_save(inp: SaveInput, refusal: InvalidInput | NotFound | Conflict) -> SaveAck:
    """An answer, not a failure: the caller learns why and no run is left failed (the
    update returns it, the run completes as refused)."""
    activity.logger.info("save %s of agent %s refused: %s", inp.entry_id, inp.agent_id, refusal)
    return SaveAck(
        agent_id=inp.agent_id,
        entry_id=inp.entry_id,
        refused=str(refusal),
        refused_type=refusal.failure_type,
    )


class SaveActivities:
    def __init__(self, stores: StoreRegistry, llm: LLMSettings, floor: HighValueFloor) -> None:
        self._stores = stores
        self._llm = llm
        self._floor = floor

    @activity.defn(name="persist_original")
    def persist_original(self, inp: SaveInput) -> SaveAck:
        """Durable before the caller's answer. With an LLM, the original is marked
        in flight until the save records its outcome (see policies.in_flight)."""
        parsed = parse_source(inp.source)
        metadata, importance = flag_if_instruction(
            inp.content, {SOURCE_KEY: parsed.value} if parsed.value else {}, inp.importance
        )
        if self._llm.configured and not flagged(metadata):
            metadata[ENRICHMENT_KEY] = PENDING
        replaces = validate_replaces(inp.replaces)
        with self._stores.using(inp.agent_id, store_id=inp.store_id) as store, store.writing():
            # One lock hold: what it replaces is checked (a refusal writes nothing), the
            # original written, then each replaced entry superseded by it, exactly once.
            try:
                forced = self._replaceable(store, inp, replaces)
            except (InvalidInput, NotFound, Conflict) as exc:
                return refused_save(inp, exc)
            existing = store.get(inp.entry_id)
            entry = store.create(
                inp.content,
                category=inp.category,
                tags=inp.tags,
                metadata=metadata,
                importance=importance,
                entry_id=inp.entry_id,
                valid_from=inp.valid_from,
            )
            replaced = apply_replaces(store, inp.entry_id, replaces, forced=forced)
        # A retried call whose earlier run finished: the entry is retired or marked.
        done = existing is not None and (
            entry.is_archived or entry.metadata.get(ENRICHMENT_KEY, PENDING) != PENDING
        )
        return SaveAck(
            agent_id=inp.agent_id,
            entry_id=inp.entry_id,
            note=parsed.note,
            already_done=done,
            enrich_skipped=self._enrich_skipped(metadata, inp.content),
            embeddings=self._stores.embeddings is not None,
            replaced=replaced,
        )

    @staticmethod
    def _replaceable(store: MemoryStore, inp: SaveInput, replaces: list[str]) -> dict[str, str]:
        """The entries the save may replace, checked under the caller's lock; those
        replaced over the subject check (forced) are logged with why."""
        forced = check_replaceable(
            store,
            replaces,
            inp.entry_id,
            content=inp.content,
            category=inp.category,
            force=inp.force_replace,
        )
        for old_id, why in forced.items():
            activity.logger.warning(
                "save %s of agent %s replaces %s over the subject check (%s): forced",
                inp.entry_id,
                inp.agent_id,
                old_id,
                why,
            )
        return forced

    def _enrich_skipped(self, metadata: dict[str, str], content: str) -> str | None:
        """Why the save will not be enriched, or None when it will be."""
        if not self._llm.configured:
            return NO_LLM_SKIP
        if flagged(metadata) or reads_as_instruction(content):
            return FLAGGED_SKIP
        return None

    @activity.defn(name="enrich_memory")
    async def enrich_memory(self, inp: SaveInput) -> EnrichResult:
        if not self._llm.configured:
            return EnrichResult(skipped=NO_LLM_SKIP)
        if reads_as_instruction(inp.content):
            return EnrichResult(skipped=FLAGGED_SKIP)  # never shown to an LLM that may obey
        shown, saved_at = self._neighbours(inp)
        existing = [(e.id, e.category, e.content) for e in shown]
        messages = [
            {"role": "system", "content": ENRICH_PROMPT},
            {"role": "user", "content": enrich_message(inp.content, existing, saved_at)},
        ]
        reply = await ask_llm(
            self._llm, messages, parse_enrichment, f"enrichment of {inp.entry_id}"
        )
        result = enrichment_result(reply, inp.category, inp.entry_id)
        # Only what was shown can be replaced, as it was shown (its fingerprint): the
        # store refuses it later if it changed, went, or was replaced meanwhile.
        seen = {e.id: e.fingerprint for e in shown}
        unusable = 0
        for fact, proposed in zip(result.facts, reply.facts, strict=True):
            fact.replaces = {i: seen[i] for i in proposed.replaces if i in seen}
            # The caller's own date stands; else the LLM's reading of the note, if it is
            # a date at all and not past the bound (a misread year, an invented plan).
            fact.valid_from = inp.valid_from
            if fact.valid_from is None and proposed.valid_from is not None:
                fact.valid_from = proposed_valid_from(proposed.valid_from, saved_at)
                unusable += fact.valid_from is None
        if unusable:
            activity.logger.warning(
                "enrichment of %s: %d validFrom proposal(s) ignored (malformed, or more "
                "than %d days past the save)",
                inp.entry_id,
                unusable,
                LLM_VALID_FROM_MAX_AHEAD.days,
            )
        source = parse_source(inp.source).value
        result.facts = [self._shaped(fact, inp, source) for fact in result.facts]
        return result

    def _neighbours(self, inp: SaveInput) -> tuple[list[MemoryEntry], datetime]:
        """The current entries nearest the note: what a fact of it may replace. Never
        the note itself, one flagged as an instruction, or one still being saved. And
        when the note was saved (what its relative dates mean)."""
        with self._stores.using(inp.agent_id) as store:
            now = store.now()
            original = store.get(inp.entry_id)
            saved_at = original.created_at if original is not None else now
            # The note's own category first (a replaced fact is usually filed where its
            # new version will be), then anywhere: many entries sharing a name must not
            # crowd the previous version out.
            scopes = [inp.category, None] if inp.category else [None]
            hits = [
                h
                for scope in scopes
                for h in search(store, inp.content, category=scope, limit=NEIGHBOURS + 1)
            ]
        shown: dict[str, MemoryEntry] = {}
        for h in hits:
            entry = h.entry
            if entry.id != inp.entry_id and not flagged(entry.metadata):
                if not save_in_flight(entry, now):
                    shown.setdefault(entry.id, entry)
        return list(shown.values())[:NEIGHBOURS], saved_at

    def _shaped(self, fact: FactProposal, inp: SaveInput, source: str | None) -> FactProposal:
        """An LLM cannot mint a memory worth more than what it was given, and text that
        reads as an instruction is flagged (policies.provenance, policies.injection)."""
        importance = fact_importance(
            fact.importance,
            original_importance=inp.importance,
            original_source=source,
            floor=self._floor.importance,
        )
        metadata, importance = flag_if_instruction(fact.content, fact.metadata, importance)
        return fact.model_copy(update={"importance": importance, "metadata": metadata})

    @activity.defn(name="save_fact")
    def save_fact(self, inp: SaveFactInput) -> SaveFactResult:
        fact = inp.fact
        candidate = Candidate(
            fact.content,
            fact.category,
            tuple(fact.tags),
            tuple(fact.metadata.items()),
            fact.importance,
        )
        vector = self._vector(fact.content)
        with self._stores.using(inp.agent_id) as store:
            saved = save_fact(
                store,
                candidate,
                new_id=inp.new_id,
                op_id=inp.op_id,
                exclude=frozenset(inp.exclude),
                touched=frozenset(inp.touched),
                candidate_vector=vector,
                replaces=fact.replaces,
                valid_from=fact.valid_from,
            )
        return SaveFactResult(
            outcome=saved.outcome,
            entry_id=saved.entry_id,
            replaced=list(saved.replaced),
            conflicts=list(saved.conflicts),
        )

    @activity.defn(name="retire_original")
    def retire_original(self, inp: RetireInput) -> RetireResult:
        """Archive the original into its facts' entries — only if they are all live and
        cover it, checked by the store under its lock (a dream may have folded one)."""
        with self._stores.using(inp.agent_id) as store:
            done = store.retire_into(inp.entry_id, inp.into, reason=inp.reason)
        return RetireResult(retired=done.retired, detail=done.detail, missing=len(done.missing))

    @activity.defn(name="dedup_original")
    def dedup_original(self, inp: MarkInput) -> SaveFactResult:
        with self._stores.using(inp.agent_id) as store:
            content = store.require(inp.entry_id).content
        vector = self._vector(content)  # not under the store: an HTTP call
        with self._stores.using(inp.agent_id) as store:
            saved = dedup_existing(store, inp.entry_id, candidate_vector=vector)
        return SaveFactResult(
            outcome=saved.outcome, entry_id=saved.entry_id, conflicts=list(saved.conflicts)
        )

    def _vector(self, text: str):
        """The text's embedding, for cosine dedup; None (Jaccard) without a model or when
        the endpoint does not answer."""
        client = self._stores.embeddings
        return client.embed([text])[0] if client is not None else None

    @activity.defn(name="mark_original")
    def mark_original(self, inp: MarkInput) -> None:
        """Record why the original stays as saved (enrichment found nothing, failed, or
        its facts could not retire it); it is a fact of its own then, so a current entry
        it likely changes is linked to it as a conflict (`stores.longterm.conflicts`)."""
        with self._stores.using(inp.agent_id) as store, store.writing():
            store.mutate(
                inp.entry_id,
                lambda e: e.model_copy(
                    update={"metadata": {**e.metadata, ENRICHMENT_KEY: inp.enrichment[:500]}}
                ),
                reason="enrichment status",
            )
            note_conflicts(store, inp.entry_id)
