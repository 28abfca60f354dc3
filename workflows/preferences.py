"""PreferenceInference: the conversation log → LLM → preferences saved through dedup.

The log is rotated first (kept under `processed/`, not destroyed), so it is cleared for
this pass whatever happens next and turns written meanwhile wait for the next pass.
Each inferred preference is saved under `user-preferences/inferred`, tagged and sourced
`inferred`; the host, not the LLM, flags security, credential and money preferences
`requires_user_permission`.
"""

from __future__ import annotations

import hashlib

from temporalio import workflow
from temporalio.exceptions import ActivityError

with workflow.unsafe.imports_passed_through():
    from dreamkeeper.activities.preferences import PreferenceActivities
    from dreamkeeper.activities.save import SaveActivities
    from dreamkeeper.core import names
    from dreamkeeper.core.dream_payloads import (
        CycleInput,
        InferInput,
        InferResult,
        PreferenceInput,
        PreferenceResult,
        RotateResult,
    )
    from dreamkeeper.core.models import SOURCE_KEY
    from dreamkeeper.core.payloads import FactProposal, SaveFactInput
    from dreamkeeper.policies.preferences import INFERRED_CATEGORY, PERMISSION_KEY
    from dreamkeeper.policies.provenance import INFERRED
    from dreamkeeper.workflows.options import LLM_STEP, STORE_STEP, with_summary


@workflow.defn(name=names.PREFERENCE_INFERENCE)
class PreferenceInference:
    @workflow.run
    async def run(self, inp: PreferenceInput) -> PreferenceResult:
        as_of = inp.as_of or workflow.now()
        agent = inp.agent_id
        res = PreferenceResult(agent_id=agent)
        workflow.set_current_details("step 1/3: rotating the conversation log")
        rotated: RotateResult = await workflow.execute_activity_method(
            PreferenceActivities.rotate_conversation_log,
            CycleInput(agent_id=agent, as_of=as_of, store_id=inp.store_id),
            **with_summary(STORE_STEP, "rotate conversation log"),
        )
        res.rotated_to, res.turns = rotated.path, rotated.turns
        if rotated.path is None:
            res.skipped = "the conversation log is empty"
            return self._done(res)
        workflow.set_current_details(
            f"step 2/3: inferring preferences from {rotated.turns} turn(s)"
        )
        try:
            inferred: InferResult = await workflow.execute_activity_method(
                PreferenceActivities.infer_preferences,
                InferInput(agent_id=agent, path=rotated.path),
                **with_summary(LLM_STEP, "LLM preference inference"),
            )
        except ActivityError as exc:
            res.skipped = f"inference failed: {exc.cause or exc}"
            return self._done(res)
        if inferred.skipped:
            res.skipped = inferred.skipped
            return self._done(res)
        workflow.set_current_details(f"step 3/3: saving {len(inferred.facts)} preference(s)")
        name = rotated.path.rsplit("/", 1)[-1]
        for index, fact in enumerate(inferred.facts):
            metadata = {SOURCE_KEY: INFERRED}
            if fact.requires_user_permission:
                metadata[PERMISSION_KEY] = "true"
            proposal = FactProposal(
                content=fact.content,
                category=INFERRED_CATEGORY,
                tags=list(dict.fromkeys([*fact.tags, INFERRED])),
                importance=fact.importance,
                metadata=metadata,
            )
            key = f"{agent}/{name}/preference/{index}"
            res.saved.append(
                await workflow.execute_activity_method(
                    SaveActivities.save_fact,
                    SaveFactInput(
                        agent_id=agent,
                        new_id=hashlib.sha256(key.encode()).hexdigest()[:12],
                        op_id=f"pref-{hashlib.sha256(key.encode()).hexdigest()[:16]}",
                        fact=proposal,
                    ),
                    **with_summary(STORE_STEP, f"save preference {index + 1}"),
                )
            )
        return self._done(res)

    @staticmethod
    def _done(res: PreferenceResult) -> PreferenceResult:
        outcome = res.skipped or f"saved {len(res.saved)} preference(s) from {res.turns} turn(s)"
        workflow.logger.info("preference inference %s: %s", res.agent_id, outcome)
        workflow.set_current_details(f"done: {outcome}")
        return res
