"""Forget: a person's request to erase, run by the worker like every other write, with
the receipt as its result (docs/design.md, invariant 22).

One step, the store's forgetting, which is idempotent under retries (its journal). The
run's id is the agent's and the request's (`names.forget_workflow_id`): asked again with
the same request id, the same run answers. Nothing here names content: the request's
phrase travels sealed with the agent's data key inside the input, and the details say
what kind of forget it is and how many ids, never which.
"""

from __future__ import annotations

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from dreamkeeper.activities.forget import ForgetActivities
    from dreamkeeper.core import names
    from dreamkeeper.core.forgetting import ForgetInput, ForgetOutcome, describe_request
    from dreamkeeper.workflows.options import SCAN_STEP, with_summary


@workflow.defn(name=names.FORGET)
class Forget:
    @workflow.run
    async def run(self, inp: ForgetInput) -> ForgetOutcome:
        what = describe_request(inp.scope, inp.id_count, inp.dry_run)
        workflow.set_current_details(f"{what} of agent {inp.agent}")
        outcome = await workflow.execute_activity_method(
            ForgetActivities.forget, inp, **with_summary(SCAN_STEP, what)
        )
        verified = "verified" if outcome.receipt.verified else "NOT verified"
        done = "previewed" if inp.dry_run else verified
        workflow.set_current_details(f"done: {what} of agent {inp.agent} ({done})")
        return outcome
