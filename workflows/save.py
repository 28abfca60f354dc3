"""SaveMemory: durable save with enrichment and dedup.

Started by update-with-start: the `save` update returns as soon as the raw original is
durable (and searchable); the LLM work happens after. Each enriched fact gets an id and
an operation id derived here from the entry id, so a retried activity never mints a
second entry or reinforces twice, and one save reinforces an entry at most once. The
original is retired into its facts' entries by one store operation that finds them all
live and covering it (a dream may fold one in the meantime); otherwise it stays, with
the reason in its metadata.
"""

from __future__ import annotations

import hashlib
from datetime import timedelta

from temporalio import workflow
from temporalio.exceptions import ActivityError, ApplicationError

with workflow.unsafe.imports_passed_through():
    from dreamkeeper.activities.embeddings import NOT_CONFIGURED, EmbeddingActivities
    from dreamkeeper.activities.save import SaveActivities
    from dreamkeeper.core import names
    from dreamkeeper.core.errors import Conflict
    from dreamkeeper.core.payloads import (
        DedupOutcome,
        EmbedInput,
        EmbedResult,
        EnrichResult,
        MarkInput,
        RetireInput,
        SaveAck,
        SaveFactInput,
        SaveFactResult,
        SaveInput,
        SaveOutcome,
        SaveResult,
        content_sha256,
    )
    from dreamkeeper.workflows.options import (
        EMBED_STEP,
        ENRICH_STEP,
        PERSIST_STEP,
        STORE_STEP,
        local_with_summary,
        with_summary,
    )


SKIP_IDLE_STEPS = "save-skips-idle-steps"  # a workflow.patched id: histories carry it
ALREADY_SAVED = "already saved by an earlier run"


def derived_id(entry_id: str, index: int) -> str:
    return hashlib.sha256(f"{entry_id}/enriched/{index}".encode()).hexdigest()[:12]


def _root_failure(exc: ActivityError | ApplicationError) -> ApplicationError:
    """The activity's own error. A local activity that fails in the workflow task it
    was scheduled in surfaces it bare, not wrapped in an ActivityError."""
    cause = exc.cause if isinstance(exc, ActivityError) else exc
    if isinstance(cause, ApplicationError):
        return ApplicationError(
            cause.message,
            type=cause.type or "SaveFailed",
            non_retryable=True,
            category=cause.category,  # a caller's mistake stays benign (activities.stores)
        )
    return ApplicationError(str(cause or exc), type="SaveFailed", non_retryable=True)


def _done(result: SaveResult) -> str:
    """The closed run's current details: the outcome, never any memory content."""
    if result.detail == ALREADY_SAVED:
        return "done: an earlier run of this save finished it"
    if result.outcome is SaveOutcome.REFUSED:
        return "done: refused, nothing saved"
    if result.outcome is SaveOutcome.ENRICHED:
        return f"done: enriched into {len({r.entry_id for r in result.replacements})} entr(ies)"
    if result.outcome is SaveOutcome.DEDUPLICATED:
        into = result.replacements[0].entry_id if result.replacements else "an existing entry"
        return f"done: merged into {into}"
    return "done: kept as saved"


@workflow.defn(name=names.SAVE_MEMORY, sandboxed=False)
class SaveMemory:
    @workflow.init
    def __init__(self, inp: SaveInput) -> None:
        self._ack: SaveAck | None = None
        self._failure: ApplicationError | None = None
        self._content_sha = content_sha256(inp.content)

    @workflow.update
    async def save(self, content_sha256: str | None = None) -> SaveAck:
        """The caller's answer once the original is durable. `content_sha256` is what the
        caller means to save under this id (older clients send nothing)."""
        await workflow.wait_condition(lambda: self._ack is not None or self._failure is not None)
        if self._ack is None:
            assert self._failure is not None
            raise self._failure
        return self._ack

    @save.validator
    def _same_save(self, content_sha256: str | None = None) -> None:
        # The same id with other content is not a retry: refused as the store refuses it
        # once this run has finished (Conflict), never answered with another save's
        # id. A rejected update leaves no trace in the history.
        if content_sha256 is not None and content_sha256 != self._content_sha:
            raise ApplicationError(
                "this memory id is already being saved with other content",
                type=Conflict.failure_type,
                non_retryable=True,
            )

    @workflow.run
    async def run(self, inp: SaveInput) -> SaveResult:
        result = await self._save(inp)
        # What the UI shows for a closed run is the last detail set: without this, a
        # finished save still read "step 1/3" (or "step 3/3").
        workflow.set_current_details(_done(result))
        return result

    async def _save(self, inp: SaveInput) -> SaveResult:
        self._ack = await self._persist(inp)
        if self._ack.refused is not None:
            # Nothing was written; the caller has the reason from the update.
            return SaveResult(
                agent_id=inp.agent_id,
                entry_id=inp.entry_id,
                outcome=SaveOutcome.REFUSED,
                detail=self._ack.refused,
            )
        if self._ack.already_done:
            return SaveResult(
                agent_id=inp.agent_id,
                entry_id=inp.entry_id,
                outcome=SaveOutcome.KEPT,
                detail=ALREADY_SAVED,
            )
        # The persisting worker says what the next steps would only find out: with no
        # LLM (or flagged text) the enrichment activity is skipped, with no embedding
        # model the embeddings activity — two activity round trips fewer per save.
        # Histories from before this change ask the activities, as they did.
        told = workflow.patched(SKIP_IDLE_STEPS) and self._ack.embeddings is not None
        if told and self._ack.enrich_skipped is not None:
            result = await self._dedup_as_is(inp, self._ack.enrich_skipped)
        else:
            result = await self._enrich_and_retire(inp)
        if told and not self._ack.embeddings:
            result.embeddings = EmbedResult(skipped=NOT_CONFIGURED)
            return result
        # Vectors last: the caller has its answer long since, and a failure here only
        # means keyword search until the dream cycle's backfill.
        ids = list(dict.fromkeys([inp.entry_id, *(r.entry_id for r in result.replacements)]))
        try:
            result.embeddings = await workflow.execute_activity_method(
                EmbeddingActivities.embed_entries,
                EmbedInput(agent_id=inp.agent_id, ids=ids),
                **with_summary(EMBED_STEP, "embeddings"),
            )
        except ActivityError as exc:
            workflow.logger.warning(
                "save %s: embeddings deferred to the dream backfill: %s",
                inp.entry_id,
                exc.cause or exc,
            )
        return result

    async def _persist(self, inp: SaveInput) -> SaveAck:
        workflow.set_current_details("step 1/3: persisting the original")
        try:
            # A local activity: the caller is waiting on this step, and running it inside
            # the workflow task saves a round trip through the activity task queue.
            return await workflow.execute_local_activity_method(
                SaveActivities.persist_original,
                inp,
                **local_with_summary(PERSIST_STEP, "persist original"),
            )
        except (ActivityError, ApplicationError) as exc:
            self._failure = _root_failure(exc)
            workflow.set_current_details(f"failed: {self._failure.message}"[:300])
            # Deliver the failure through the waiting update first: a run that fails in the
            # same workflow task as the update's answer loses the answer (the caller would
            # see "workflow completed before the update completed").
            await workflow.wait_condition(workflow.all_handlers_finished)
            await workflow.sleep(timedelta(milliseconds=1))
            raise self._failure from None

    async def _enrich_and_retire(self, inp: SaveInput) -> SaveResult:
        done = SaveResult(agent_id=inp.agent_id, entry_id=inp.entry_id, outcome=SaveOutcome.KEPT)
        workflow.set_current_details("step 2/3: enrichment")
        try:
            enriched: EnrichResult = await workflow.execute_activity_method(
                SaveActivities.enrich_memory,
                inp,
                **with_summary(ENRICH_STEP, "LLM enrichment"),
            )
        except ActivityError as exc:
            done.detail = f"enrichment failed: {exc.cause or exc}"
            await self._mark(inp, done.detail)
            return done
        if enriched.skipped is not None:
            return await self._dedup_as_is(inp, enriched.skipped)
        if not enriched.facts:
            done.detail = "enrichment returned no facts"
            await self._mark(inp, "kept: enrichment found nothing to extract")
            return done
        done.replacements = await self._save_facts(inp, enriched)
        ids = sorted({s.entry_id for s in done.replacements})
        retired = await workflow.execute_activity_method(
            SaveActivities.retire_original,
            RetireInput(
                agent_id=inp.agent_id,
                entry_id=inp.entry_id,
                into=ids,
                reason=f"enriched into [{', '.join(ids)}]",
            ),
            **with_summary(STORE_STEP, "retire original into its facts"),
        )
        if not retired.retired:
            done.detail = f"kept: {retired.detail}"
            await self._mark(inp, done.detail)
            return done
        done.outcome = SaveOutcome.ENRICHED
        return done

    async def _dedup_as_is(self, inp: SaveInput, why: str) -> SaveResult:
        workflow.logger.info("save %s: %s; deduplicating it as is", inp.entry_id, why)
        mark = MarkInput(agent_id=inp.agent_id, entry_id=inp.entry_id, enrichment="")
        result: SaveFactResult = await workflow.execute_activity_method(
            SaveActivities.dedup_original,
            mark,
            **with_summary(STORE_STEP, "dedup original"),
        )
        outcome = (
            SaveOutcome.KEPT if result.outcome is DedupOutcome.CREATED else SaveOutcome.DEDUPLICATED
        )
        return SaveResult(
            agent_id=inp.agent_id,
            entry_id=inp.entry_id,
            outcome=outcome,
            replacements=[result],
            detail=why,
        )

    async def _save_facts(self, inp: SaveInput, enriched: EnrichResult) -> list[SaveFactResult]:
        workflow.set_current_details(
            f"step 3/3: saving {len(enriched.facts)} fact(s) through dedup"
        )
        saved: list[SaveFactResult] = []
        for index, fact in enumerate(enriched.facts):
            touched = sorted({s.entry_id for s in saved})  # this save counted there once
            saved.append(
                await workflow.execute_activity_method(
                    SaveActivities.save_fact,
                    SaveFactInput(
                        agent_id=inp.agent_id,
                        new_id=derived_id(inp.entry_id, index),
                        op_id=f"{inp.entry_id}-{index}",
                        fact=fact,
                        exclude=[inp.entry_id],
                        touched=touched,
                    ),
                    **with_summary(STORE_STEP, f"save fact {index + 1}"),
                )
            )
        return saved

    async def _mark(self, inp: SaveInput, status: str) -> None:
        await workflow.execute_activity_method(
            SaveActivities.mark_original,
            MarkInput(agent_id=inp.agent_id, entry_id=inp.entry_id, enrichment=status),
            **with_summary(STORE_STEP, "record enrichment status"),
        )
