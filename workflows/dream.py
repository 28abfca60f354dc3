"""Dream: an agent's maintenance cycle, each pass a child workflow with one `as_of`:
purge → embedding backfill → consolidation → preference inference → decay.

Purge runs first so the cycle works on what retention keeps; the backfill next, so
clustering can use cosine for every entry (it is an activity here, not a child: it
changes no entry, only vectors); consolidation before decay so merge arithmetic sees
importance as it stood; preference inference after consolidation so what it saves is
reviewed next cycle, not merged in the same one.

Before the passes, one activity counts each pass's work from what the store keeps (new
or changed entries, duplicates, conversation turns, archives past retention, decay
steps due, missing vectors): a pass with nothing to do is skipped and named in the
result's `idle` and the summary, so an idle agent costs one activity, not five
workflows.
"""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow
from temporalio.exceptions import ActivityError

with workflow.unsafe.imports_passed_through():
    from dreamkeeper.activities.embeddings import NOT_CONFIGURED, EmbeddingActivities
    from dreamkeeper.activities.idle import IdleCheckActivities
    from dreamkeeper.client.attributes import tagged
    from dreamkeeper.core import names
    from dreamkeeper.core.dream_payloads import (
        ConsolidationInput,
        ConsolidationResult,
        DreamInput,
        DreamResult,
        DreamWork,
        PreferenceInput,
        PreferenceResult,
        WorkInput,
        WorkResult,
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
    from dreamkeeper.workflows.options import EMBED_STEP, SCAN_STEP, with_summary
    from dreamkeeper.workflows.preferences import PreferenceInference

IDLE_CHECK = "dream-idle-check"  # workflow.patched id: passes with nothing to do skipped
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
    @workflow.init
    def __init__(self, inp: DreamInput) -> None:
        self._inp = inp
        # One as_of for the whole cycle, so every pass sees the same "now".
        self._as_of = inp.as_of or workflow.now()
        self._work: DreamWork | None = None
        self._idle: list[str] = []  # passes skipped: nothing to do

    @workflow.run
    async def run(self, inp: DreamInput) -> DreamResult:
        as_of = self._as_of
        agent = inp.agent_id
        cycle_id = workflow.info().run_id  # names this cycle's ledger: what undo takes
        tag_if_untagged(agent, "dream")
        if inp.dry_run:
            return await dry_run(inp, as_of)
        work = self._work = await self._check(agent, as_of, inp.store_id)
        if self._due("purge", "purge"):
            workflow.set_current_details("step 1/5: purging archived entries past retention")
            purge: PurgeResult = await workflow.execute_child_workflow(
                ArchivePurge.run,
                PurgeInput(agent_id=agent, as_of=as_of, store_id=inp.store_id),
                **self._child("purge"),
            )
        else:
            purge = PurgeResult(agent_id=agent, as_of=as_of)
        # The backfill also gives consolidation the model's dimension, so it runs
        # whenever consolidation does (and a model is configured).
        if work is None or (work.embeddings_configured and (work.vectors or work.consolidation)):
            embeddings = await self._backfill(agent)
        else:
            self._idle.append("embedding backfill")
            embeddings = EmbedResult(skipped=None if work.embeddings_configured else NOT_CONFIGURED)
        result = DreamResult(
            agent_id=agent,
            as_of=as_of,
            purge=purge,
            consolidation=await self._consolidation(cycle_id, embeddings.dim),
            preferences=await self._preferences(),
            decay=await self._decay(cycle_id),
            embeddings=embeddings,
            cycle_id=cycle_id,
            idle=self._idle,
        )
        self._report(result)
        return result

    def _child(self, op: str) -> dict:
        return _child_options(workflow.info().workflow_id, self._inp.agent_id, op)

    def _due(self, step: str, count: str) -> bool:
        """Whether the pass runs: always without a check, else when its `count` of the
        check's (a DreamWork field) is not zero."""
        if self._work is None or getattr(self._work, count):
            return True
        self._idle.append(step)
        return False

    async def _consolidation(self, cycle_id: str, dim: int | None) -> ConsolidationResult:
        inp, work = self._inp, self._work
        if not self._due("consolidation", "consolidation"):
            return ConsolidationResult(
                agent_id=inp.agent_id,
                as_of=self._as_of,
                cycle_id=cycle_id,
                total=work.live if work else 0,
                held_back=work.held_back if work else 0,
            )
        workflow.set_current_details("step 3/5: consolidation")
        return await workflow.execute_child_workflow(
            Consolidation.run,
            ConsolidationInput(
                agent_id=inp.agent_id,
                as_of=self._as_of,
                embedding_dim=dim,
                store_id=inp.store_id,
                cycle_id=cycle_id,
                **inp.consolidation.model_dump(),
            ),
            **self._child("consolidation"),
        )

    async def _preferences(self) -> PreferenceResult:
        inp = self._inp
        if not self._due("preference inference", "preferences"):
            return PreferenceResult(agent_id=inp.agent_id, skipped="the conversation log is empty")
        workflow.set_current_details("step 4/5: preference inference")
        return await workflow.execute_child_workflow(
            PreferenceInference.run,
            PreferenceInput(agent_id=inp.agent_id, as_of=self._as_of, store_id=inp.store_id),
            **self._child("preferences"),
        )

    async def _decay(self, cycle_id: str) -> DecayResult:
        inp = self._inp
        if not self._due("decay", "decay"):
            return DecayResult(agent_id=inp.agent_id, as_of=self._as_of)
        workflow.set_current_details("step 5/5: importance decay")
        return await workflow.execute_child_workflow(
            ImportanceDecay.run,
            DecayInput(
                agent_id=inp.agent_id, as_of=self._as_of, store_id=inp.store_id, cycle_id=cycle_id
            ),
            **self._child("decay"),
        )

    @staticmethod
    def _report(result: DreamResult) -> None:
        summary = (
            f"purged {len(result.purge.purged)}; {result.embeddings.embedded} vector(s) made; "
            f"{result.consolidation.summary()}; "
            f"{len(result.preferences.saved)} preference(s) inferred; "
            f"decayed {result.decay.decayed} of {result.decay.considered}"
        )
        if result.idle:
            summary += f"; nothing to do for {', '.join(result.idle)} (skipped)"
        workflow.logger.info("dream cycle complete for %s — %s", result.agent_id, summary)
        workflow.set_current_details(f"done: {summary}")

    @staticmethod
    async def _check(agent: str, as_of, store_id: str | None) -> DreamWork | None:  # noqa: ANN001
        """What each pass has to do (None: run them all, as cycles before the check did).
        A failed check runs every pass: skipping is an optimisation, never a risk."""
        if not workflow.patched(IDLE_CHECK):
            return None
        workflow.set_current_details("checking which passes have work")
        try:
            got: WorkResult = await workflow.execute_activity_method(
                IdleCheckActivities.dream_work,
                WorkInput(agent_ids=[agent], as_of=as_of, store_id=store_id),
                **with_summary(SCAN_STEP, "which passes have work"),
            )
        except ActivityError as exc:
            workflow.logger.warning(
                "dream %s: idle check failed, running every pass: %s", agent, exc.cause or exc
            )
            return None
        return got.agents[0]

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
