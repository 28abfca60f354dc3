"""Approval of a dream cycle's risky changes over HTTP: what waits, approve, reject.

They address the `Consolidation` step of the agent's cycle (`dream-{agent}-consolidation`,
the one `POST /v1/agents/{agent}/dream` and the schedule start); its workflow updates
`approve` / `reject` decide, its query `pending` tells (docs/dream-cycle-review.md).
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends
from temporalio.client import WorkflowUpdateFailedError
from temporalio.service import RPCError, RPCStatusCode

from dreamkeeper.agent import dream_ops
from dreamkeeper.core.dream_plan import ApprovalDecision, ApprovalState
from dreamkeeper.core.errors import InvalidInput, NotFound, Unavailable
from dreamkeeper.policies.access import Need
from dreamkeeper.service.access import check_route_access, needs
from dreamkeeper.service.state import ServiceState, state_of

# Operator routes: an admin token's (service.access checks it on the parsed agent id).
router = APIRouter(
    prefix="/v1/agents/{agent_id}/dream", tags=["dream"], dependencies=[Depends(check_route_access)]
)
ADMIN = needs(Need.ADMIN)
State = Annotated[ServiceState, Depends(state_of)]


async def _ask(state: ServiceState, agent_id: str, action: str, keys: list[str]) -> ApprovalState:
    handle = state.agent(agent_id)
    workflow_id = dream_ops.consolidation_workflow_id(handle.agent_id)
    try:
        if action == "pending":
            return await dream_ops.pending(state.memory, workflow_id)
        return await dream_ops.decide(state.memory, workflow_id, keys, approve=action == "approve")
    except WorkflowUpdateFailedError as exc:
        raise InvalidInput(str(exc.cause or exc)) from None
    except RPCError as exc:
        if exc.status == RPCStatusCode.NOT_FOUND:
            raise NotFound(f"no dream cycle of agent {agent_id} is running") from None
        raise Unavailable(f"cannot ask Temporal about {workflow_id}: {exc}") from None


@router.get("/pending", response_model=ApprovalState, openapi_extra=ADMIN)
async def pending(agent_id: str, state: State) -> ApprovalState:
    """What the agent's current cycle is waiting on an operator for."""
    return await _ask(state, agent_id, "pending", [])


@router.post("/approve", response_model=ApprovalState, openapi_extra=ADMIN)
async def approve(agent_id: str, body: ApprovalDecision, state: State) -> ApprovalState:
    """Approve pending items by key (none: all of them)."""
    return await _ask(state, agent_id, "approve", body.keys)


@router.post("/reject", response_model=ApprovalState, openapi_extra=ADMIN)
async def reject(agent_id: str, body: ApprovalDecision, state: State) -> ApprovalState:
    """Reject pending items by key (none: all of them): never applied."""
    return await _ask(state, agent_id, "reject", body.keys)
