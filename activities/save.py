"""Save activities: persist the raw original, enrich it with the LLM, save each fact
through dedup, and record the outcome on the original."""

from __future__ import annotations

from temporalio import activity

from dreamkeeper.activities.llm import (
    ENRICH_PROMPT,
    LLMSettings,
    ask_llm,
    parse_enrichment,
)
from dreamkeeper.activities.payloads import (
    EnrichResult,
    FactProposal,
    MarkInput,
    SaveAck,
    SaveFactInput,
    SaveFactResult,
    SaveInput,
)
from dreamkeeper.activities.stores import StoreRegistry
from dreamkeeper.policies.dedup import Candidate
from dreamkeeper.policies.provenance import parse_source
from dreamkeeper.stores.dedup_save import dedup_existing, save_fact
from dreamkeeper.stores.models import SOURCE_KEY
from dreamkeeper.stores.validation import InvalidInput, validate_category

ENRICHMENT_KEY = "enrichment"


class SaveActivities:
    def __init__(self, stores: StoreRegistry, llm: LLMSettings) -> None:
        self._stores = stores
        self._llm = llm

    @activity.defn(name="persist_original")
    def persist_original(self, inp: SaveInput) -> SaveAck:
        parsed = parse_source(inp.source)
        metadata = {SOURCE_KEY: parsed.value} if parsed.value else {}
        with self._stores.using(inp.agent_id) as store:
            store.create(
                inp.content, category=inp.category, tags=inp.tags, metadata=metadata,
                importance=inp.importance, entry_id=inp.entry_id,
            )  # fmt: skip
        return SaveAck(agent_id=inp.agent_id, entry_id=inp.entry_id, note=parsed.note)

    @activity.defn(name="enrich_memory")
    async def enrich_memory(self, inp: SaveInput) -> EnrichResult:
        if not self._llm.configured:
            return EnrichResult(skipped="no LLM configured: the original is kept verbatim")
        messages = [
            {"role": "system", "content": ENRICH_PROMPT},
            {"role": "user", "content": inp.content},
        ]
        facts = await ask_llm(
            self._llm, messages, parse_enrichment, f"enrichment of {inp.entry_id}"
        )
        proposals = []
        for fact in facts:
            try:
                category = validate_category(fact.category) if fact.category else inp.category
            except InvalidInput:
                category = inp.category  # a bad category from the LLM: keep the caller's
            proposals.append(FactProposal(
                content=fact.content, category=category, tags=fact.tags,
                importance=fact.importance, metadata=fact.metadata or {},
            ))  # fmt: skip
        return EnrichResult(facts=proposals)

    @activity.defn(name="save_fact")
    def save_fact(self, inp: SaveFactInput) -> SaveFactResult:
        fact = inp.fact
        candidate = Candidate(
            fact.content, fact.category, tuple(fact.tags), tuple(fact.metadata.items()),
            fact.importance,
        )  # fmt: skip
        with self._stores.using(inp.agent_id) as store:
            saved = save_fact(
                store, candidate, new_id=inp.new_id, op_id=inp.op_id,
                exclude=frozenset(inp.exclude), candidate_vector=self._vector(fact.content),
            )  # fmt: skip
        return SaveFactResult(outcome=str(saved.outcome), entry_id=saved.entry_id)

    @activity.defn(name="dedup_original")
    def dedup_original(self, inp: MarkInput) -> SaveFactResult:
        with self._stores.using(inp.agent_id) as store:
            original = store.require(inp.entry_id)
            saved = dedup_existing(store, inp.entry_id,
                                   candidate_vector=self._vector(original.content))  # fmt: skip
        return SaveFactResult(outcome=str(saved.outcome), entry_id=saved.entry_id)

    def _vector(self, text: str):
        """The text's embedding, for cosine dedup; None (Jaccard) without a model or when
        the endpoint does not answer."""
        client = self._stores.embeddings
        return client.embed([text])[0] if client is not None else None

    @activity.defn(name="mark_original")
    def mark_original(self, inp: MarkInput) -> None:
        with self._stores.using(inp.agent_id) as store:
            store.mutate(
                inp.entry_id,
                lambda e: e.model_copy(
                    update={"metadata": {**e.metadata, ENRICHMENT_KEY: inp.enrichment[:500]}}
                ),
                reason="enrichment status",
            )
