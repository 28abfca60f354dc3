"""SaveMemory: durable save with enrichment and dedup.

Started by update-with-start: the `save` update returns as soon as the raw original is
durable (and searchable); the LLM work happens after. Each enriched fact gets an id
derived here from the entry id, so a retried activity never mints a second entry. The
original is archived only after every replacement persisted and the replacements
together cover its specifics; otherwise it stays, with the reason in its metadata.
"""

from __future__ import annotations

import hashlib
from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError

with workflow.unsafe.imports_passed_through():
    from dreamkeeper.activities.payloads import (
        EmbedInput,
        EmbedResult,
        EnrichResult,
        EntryOpInput,
        EntryOpResult,
        MarkInput,
        SaveAck,
        SaveFactInput,
        SaveFactResult,
        SaveInput,
        SaveResult,
    )
    from dreamkeeper.policies.coverage import Source, find_missing_specifics
    from dreamkeeper.workflows.maintenance import STORE_RETRY

LLM_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=2),
    backoff_coefficient=2.0,
    maximum_interval=timedelta(minutes=1),
    maximum_attempts=6,
    non_retryable_error_types=["LLMRejected", "MalformedLLMOutput", "InvalidInput"],
)
STORE_STEP = {"start_to_close_timeout": timedelta(minutes=2), "retry_policy": STORE_RETRY}
EMBED_STEP = {
    "start_to_close_timeout": timedelta(minutes=10),
    "heartbeat_timeout": timedelta(minutes=3),
    "retry_policy": RetryPolicy(initial_interval=timedelta(seconds=5), maximum_attempts=3,
                                non_retryable_error_types=["InvalidInput"]),
}  # fmt: skip


def save_workflow_id(agent_id: str, entry_id: str) -> str:
    return f"save-{agent_id}-{entry_id}"


def derived_id(entry_id: str, index: int) -> str:
    return hashlib.sha256(f"{entry_id}/enriched/{index}".encode()).hexdigest()[:12]


@workflow.defn(name="SaveMemory")
class SaveMemory:
    def __init__(self) -> None:
        self._ack: SaveAck | None = None
        self._failure: str | None = None

    @workflow.update
    async def save(self) -> SaveAck:
        await workflow.wait_condition(lambda: self._ack is not None or self._failure is not None)
        if self._ack is None:
            raise ApplicationError(self._failure or "save failed", type="InvalidInput")
        return self._ack

    @workflow.run
    async def run(self, inp: SaveInput) -> SaveResult:
        result = await self._save(inp)
        # Vectors last: the caller has its answer long since, and a failure here only
        # means keyword search until the dream cycle's backfill.
        ids = [inp.entry_id, *(r.entry_id for r in result.replacements)]
        try:
            result.embeddings = await workflow.execute_activity(
                "embed_entries", EmbedInput(agent_id=inp.agent_id, ids=list(dict.fromkeys(ids))),
                result_type=EmbedResult, summary="embeddings", **EMBED_STEP,
            )  # fmt: skip
        except ActivityError as exc:
            workflow.logger.warning("save %s: embeddings deferred to the dream backfill: %s",
                                    inp.entry_id, exc.cause or exc)  # fmt: skip
        return result

    async def _save(self, inp: SaveInput) -> SaveResult:
        workflow.set_current_details("step 1/3: persisting the original")
        try:
            # A local activity: the caller is waiting on this step, and running it inside
            # the workflow task saves a round trip through the activity task queue.
            self._ack = await workflow.execute_local_activity(
                "persist_original", inp, result_type=SaveAck, summary="persist original",
                **STORE_STEP,
            )  # fmt: skip
        except ActivityError as exc:
            self._failure = str(exc.cause or exc)
            raise
        workflow.set_current_details("step 2/3: enrichment")
        try:
            enriched: EnrichResult = await workflow.execute_activity(
                "enrich_memory", inp, result_type=EnrichResult,
                start_to_close_timeout=timedelta(minutes=5),
                heartbeat_timeout=timedelta(seconds=15), retry_policy=LLM_RETRY,
                summary="LLM enrichment",
            )  # fmt: skip
        except ActivityError as exc:
            detail = f"enrichment failed: {exc.cause or exc}"
            await self._mark(inp, detail)
            return SaveResult(agent_id=inp.agent_id, entry_id=inp.entry_id, outcome="kept",
                              detail=detail)  # fmt: skip
        mark = MarkInput(agent_id=inp.agent_id, entry_id=inp.entry_id, enrichment="")
        if enriched.skipped is not None:
            workflow.logger.info(
                "save %s: %s; deduplicating it as is", inp.entry_id, enriched.skipped
            )
            result: SaveFactResult = await workflow.execute_activity(
                "dedup_original", mark, result_type=SaveFactResult, summary="dedup original",
                **STORE_STEP,
            )  # fmt: skip
            outcome = "kept" if result.outcome == "created" else "deduplicated"
            return SaveResult(agent_id=inp.agent_id, entry_id=inp.entry_id, outcome=outcome,
                              replacements=[result], detail=enriched.skipped)  # fmt: skip
        if not enriched.facts:
            await self._mark(inp, "kept: enrichment found nothing to extract")
            return SaveResult(agent_id=inp.agent_id, entry_id=inp.entry_id, outcome="kept",
                              detail="enrichment returned no facts")  # fmt: skip
        workflow.set_current_details(
            f"step 3/3: saving {len(enriched.facts)} fact(s) through dedup"
        )
        saved: list[SaveFactResult] = []
        for index, fact in enumerate(enriched.facts):
            new_id = derived_id(inp.entry_id, index)
            saved.append(await workflow.execute_activity(
                "save_fact",
                SaveFactInput(agent_id=inp.agent_id, new_id=new_id, op_id=f"{inp.entry_id}-{index}",
                              fact=fact, exclude=[inp.entry_id]),
                result_type=SaveFactResult, summary=f"save fact {index + 1}", **STORE_STEP,
            ))  # fmt: skip
        # Every replacement has persisted; retire the original only if they cover it.
        missing = find_missing_specifics(
            [Source(inp.content, inp.category)], "\n".join(f.content for f in enriched.facts)
        )
        if missing:
            detail = f"kept: replacements miss {', '.join(missing[:10])}"
            await self._mark(inp, detail)
            return SaveResult(agent_id=inp.agent_id, entry_id=inp.entry_id, outcome="kept",
                              replacements=saved, detail=detail)  # fmt: skip
        ids = sorted({s.entry_id for s in saved})
        await workflow.execute_activity(
            "archive_memory",
            EntryOpInput(agent_id=inp.agent_id, entry_id=inp.entry_id,
                         reason=f"enriched into [{', '.join(ids)}]"),
            result_type=EntryOpResult, summary="archive original", **STORE_STEP,
        )  # fmt: skip
        workflow.set_current_details(f"done: enriched into {len(ids)} entr(ies)")
        return SaveResult(agent_id=inp.agent_id, entry_id=inp.entry_id, outcome="enriched",
                          replacements=saved)  # fmt: skip

    async def _mark(self, inp: SaveInput, status: str) -> None:
        await workflow.execute_activity(
            "mark_original",
            MarkInput(agent_id=inp.agent_id, entry_id=inp.entry_id, enrichment=status),
            summary="record enrichment status", **STORE_STEP,
        )  # fmt: skip
