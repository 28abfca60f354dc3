"""Dream: an agent's maintenance cycle, each pass a child workflow with one `as_of`:
purge → embedding backfill → consolidation → preference inference → decay.

Purge runs first so the cycle works on what retention keeps; the backfill next, so
clustering can use cosine for every entry (it is an activity here, not a child: it
changes no entry, only vectors); consolidation before decay so merge arithmetic sees
importance as it stood; preference inference after consolidation so what it saves is
reviewed next cycle, not merged in the same one.
"""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow
from temporalio.exceptions import ActivityError

with workflow.unsafe.imports_passed_through():
    from dreamkeeper.activities.embeddings import EmbeddingActivities
    from dreamkeeper.client.attributes import tagged
    from dreamkeeper.core import names
    from dreamkeeper.core.dream_payloads import (
        ConsolidationInput,
        ConsolidationResult,
        DreamInput,
        DreamResult,
        PreferenceInput,
        PreferenceResult,
    )
    from dreamkeeper.core.payloads import (
        DecayInput,
        DecayResult,
        EmbedInput,
        EmbedResult,
        PurgeInput,
        PurgeResult,
    )
    from dreamkeeper.workflows.consolidation import Consolidation
    from dreamkeeper.workflows.dream_dry_run import dry_run
    from dreamkeeper.workflows.maintenance import ArchivePurge, ImportanceDecay
    from dreamkeeper.workflows.options import EMBED_STEP, with_summary
    from dreamkeeper.workflows.preferences import PreferenceInference

TAGS_ITSELF = "dream-tags-itself"  # workflow.patched id: search attributes when started bare
BACKFILL_BATCH = 512
BACKFILL_ROUNDS = 40  # at most 20k vectors a cycle; the rest next cycle
STEP_TIMEOUT = timedelta(minutes=90)


def _child_options(run_id: str, agent: str, op: str) -> dict:
    """A pass's child workflow: named after the cycle, tagged, and bounded in time."""
    return {
        "id": f"{run_id}-{op}",
        "static_summary": f"{op} for agent {agent}",
        "search_attributes": tagged(agent, op),
        "execution_timeout": STEP_TIMEOUT,
    }


def tag_if_untagged(agent: str | None, op: str) -> None:
    """Add AgentId / MemoryOp when the run was started without them (the documented
    `temporal workflow start --type Dream`), so `AgentId = 'a1'` finds it as it finds
    the runs Dreamkeeper starts. Only a bare start records the patch marker: the runs
    that carry their tags, and the histories of older bare runs, replay unchanged."""
    have = workflow.info().typed_search_attributes
    missing = [pair for pair in tagged(agent, op) if have.get(pair.key) is None]
    if missing and workflow.patched(TAGS_ITSELF):
        workflow.upsert_search_attributes([pair.key.value_set(pair.value) for pair in missing])


@workflow.defn(name=names.DREAM)
class Dream:
    @workflow.run
    async def run(self, inp: DreamInput) -> DreamResult:
        # One as_of for the whole cycle, so every pass sees the same "now".
        as_of = inp.as_of or workflow.now()
        agent = inp.agent_id
        run_id = workflow.info().workflow_id
        cycle_id = workflow.info().run_id  # names this cycle's ledger: what undo takes
        tag_if_untagged(agent, "dream")
        if inp.dry_run:
            return await dry_run(inp, as_of)

        def child(op: str) -> dict:
            return _child_options(run_id, agent, op)

        workflow.set_current_details("step 1/5: purging archived entries past retention")
        purge: PurgeResult = await workflow.execute_child_workflow(
            ArchivePurge.run,
            PurgeInput(agent_id=agent, as_of=as_of, store_id=inp.store_id),
            **child("purge"),
        )
        embeddings = await self._backfill(agent)
        workflow.set_current_details("step 3/5: consolidation")
        consolidation: ConsolidationResult = await workflow.execute_child_workflow(
            Consolidation.run,
            ConsolidationInput(
                agent_id=agent,
                as_of=as_of,
                embedding_dim=embeddings.dim,
                store_id=inp.store_id,
                cycle_id=cycle_id,
                **inp.consolidation.model_dump(),
            ),
            **child("consolidation"),
        )
        workflow.set_current_details("step 4/5: preference inference")
        preferences: PreferenceResult = await workflow.execute_child_workflow(
            PreferenceInference.run,
            PreferenceInput(agent_id=agent, as_of=as_of, store_id=inp.store_id),
            **child("preferences"),
        )
        workflow.set_current_details("step 5/5: importance decay")
        decay: DecayResult = await workflow.execute_child_workflow(
            ImportanceDecay.run,
            DecayInput(agent_id=agent, as_of=as_of, store_id=inp.store_id, cycle_id=cycle_id),
            **child("decay"),
        )
        result = DreamResult(
            agent_id=agent,
            as_of=as_of,
            purge=purge,
            consolidation=consolidation,
            preferences=preferences,
            decay=decay,
            embeddings=embeddings,
            cycle_id=cycle_id,
        )
        self._report(result)
        return result

    @staticmethod
    def _report(result: DreamResult) -> None:
        summary = (
            f"purged {len(result.purge.purged)}; {result.embeddings.embedded} vector(s) made; "
            f"{result.consolidation.summary()}; "
            f"{len(result.preferences.saved)} preference(s) inferred; "
            f"decayed {result.decay.decayed} of {result.decay.considered}"
        )
        workflow.logger.info("dream cycle complete for %s — %s", result.agent_id, summary)
        workflow.set_current_details(f"done: {summary}")

    @staticmethod
    async def _backfill(agent: str) -> EmbedResult:
        """Vectors for live entries that lack a current one, a batch per activity."""
        total = EmbedResult()
        for round_ in range(BACKFILL_ROUNDS):
            workflow.set_current_details(
                f"step 2/5: embedding backfill ({total.embedded} made so far)"
            )
            try:
                got: EmbedResult = await workflow.execute_activity_method(
                    EmbeddingActivities.embed_entries,
                    EmbedInput(agent_id=agent, limit=BACKFILL_BATCH),
                    **with_summary(EMBED_STEP, f"embedding backfill {round_ + 1}"),
                )
            except ActivityError as exc:
                total.skipped = f"embedding backfill failed: {exc.cause or exc}"
                break
            if got.skipped is not None:
                total.skipped = got.skipped
                break
            total.embedded += got.embedded
            total.failed += got.failed
            total.fresh = total.fresh or got.fresh
            total.remaining, total.dim = got.remaining, got.dim
            if got.remaining == 0 or got.embedded == 0:
                break
        if total.skipped:
            workflow.logger.info("dream %s: %s", agent, total.skipped)
        return total
