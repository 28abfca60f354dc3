"""Reversible dreams from a client: a dry run's plan, applying a plan, undoing a cycle —
each a workflow started by name on the memory client's task queue. An agent calls them
as `me.dream(dry_run=True)`, `me.apply_plan(plan)` and `me.undo_dream(run_id)` (or the
client's `dry_run_dream`, `apply_dream_plan` and `undo_dream`)."""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING

from temporalio.client import WorkflowUpdateFailedError
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError, RPCStatusCode

from dreamkeeper.client.attributes import tagged
from dreamkeeper.core import names
from dreamkeeper.core.dream_payloads import DreamInput, DreamResult
from dreamkeeper.core.dream_plan import (
    ApplyPlanInput,
    ApplyPlanResult,
    ApprovalDecision,
    ApprovalState,
    DreamPlan,
    UndoInput,
    UndoResult,
)
from dreamkeeper.core.errors import InvalidInput
from dreamkeeper.core.validation import validate_agent_id, validate_cycle_id

if TYPE_CHECKING:
    from dreamkeeper.agent.client import MemoryClient


def _suffix() -> str:
    return uuid.uuid4().hex[:8]


async def dry_run(memory: MemoryClient, agent_id: str) -> DreamResult:
    """Everything a cycle would do, applied nowhere: the result's `plan`."""
    validate_agent_id(agent_id)
    await memory.ready_to_start(memory.task_queue)
    return await memory.client.execute_workflow(
        names.DREAM,
        DreamInput(agent_id=agent_id, store_id=memory.store_id, dry_run=True),
        id=f"{names.dream_workflow_id(agent_id)}-dry-{_suffix()}",
        task_queue=memory.task_queue,
        result_type=DreamResult,
        static_summary=f"dream dry run for agent {agent_id}",
        search_attributes=tagged(agent_id, "dream"),
        execution_timeout=names.DREAM_TIMEOUT,
    )


async def apply_plan(memory: MemoryClient, plan: DreamPlan) -> ApplyPlanResult:
    validate_agent_id(plan.agent_id)
    await memory.ready_to_start(memory.task_queue)
    return await memory.client.execute_workflow(
        names.APPLY_DREAM_PLAN,
        ApplyPlanInput(plan=plan, store_id=memory.store_id),
        id=f"{names.dream_workflow_id(plan.agent_id)}-apply-{_suffix()}",
        task_queue=memory.task_queue,
        result_type=ApplyPlanResult,
        static_summary=f"apply a dream plan for agent {plan.agent_id}",
        search_attributes=tagged(plan.agent_id, "dream"),
        execution_timeout=names.DREAM_TIMEOUT,
    )


async def undo(memory: MemoryClient, agent_id: str, cycle_id: str) -> UndoResult:
    validate_agent_id(agent_id)
    validate_cycle_id(cycle_id)
    await memory.ready_to_start(memory.task_queue)
    return await memory.client.execute_workflow(
        names.UNDO_DREAM,
        UndoInput(agent_id=agent_id, cycle_id=cycle_id, store_id=memory.store_id),
        # One id per cycle: a second undo while the first runs joins it.
        id=f"undo-{agent_id}-{cycle_id}-{_suffix()}",
        task_queue=memory.task_queue,
        result_type=UndoResult,
        static_summary=f"undo dream cycle {cycle_id} of agent {agent_id}",
        search_attributes=tagged(agent_id, "dream"),
        execution_timeout=names.DREAM_TIMEOUT,
    )


def consolidation_workflow_id(agent_id: str) -> str:
    """The consolidation step of the agent's (scheduled or started) dream cycle."""
    return f"{names.dream_workflow_id(agent_id)}-consolidation"


async def pending(memory: MemoryClient, workflow_id: str) -> ApprovalState:
    """What the agent's consolidation is waiting on; nothing when it never ran (an idle
    cycle skips the pass) or its run is gone: no cycle, nothing pending."""
    handle = memory.client.get_workflow_handle(workflow_id)
    try:
        return await handle.query("pending", result_type=ApprovalState)
    except RPCError as exc:
        if exc.status != RPCStatusCode.NOT_FOUND:
            raise
        return ApprovalState()


async def decide(
    memory: MemoryClient, workflow_id: str, keys: list[str], *, approve: bool
) -> ApprovalState:
    """Approve or reject `keys` (none: every pending item). A key that is not pending
    (mistyped, or decided already) is `InvalidInput` naming the keys that are: the
    workflow's validator refused the update, so nothing was decided."""
    handle = memory.client.get_workflow_handle(workflow_id)
    try:
        return await handle.execute_update(
            "approve" if approve else "reject",
            ApprovalDecision(keys=keys),
            result_type=ApprovalState,
        )
    except WorkflowUpdateFailedError as exc:
        refusal = exc.cause
        if not isinstance(refusal, ApplicationError) or not str(refusal.message).startswith(
            "not pending:"
        ):
            raise
    state = await pending(memory, workflow_id)
    waiting = [p.key for p in state.pending]
    unknown = [k for k in keys if k not in waiting]
    raise InvalidInput(
        f"{', '.join(unknown) or 'those keys'}: not pending in {workflow_id}; nothing was "
        + ("approved" if approve else "rejected")
        + (
            f". Pending: {', '.join(waiting)}"
            if waiting
            else ". Nothing is pending there now (decided, timed out, or the cycle ended)"
        )
    )
