"""Approval of a cycle's risky changes, as the consolidation workflow runs it.

With `approval=risky`, merges that would archive a high-value source, merges of at least
`risky_sources` sources, and the prunes when there are more than `risky_prunes` of them
wait for an operator (`approval=all`: every merge and prune waits). The workflow's
updates `approve` and `reject` decide items by key (none given: every pending item);
the query `pending` and the workflow's current details show what waits. What is still
pending after `approval_timeout_minutes` is dropped — never applied — and left unstamped,
so the next cycle proposes it again. Everything not risky applies as before.
"""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from dreamkeeper.core.dream_payloads import ConsolidationInput, MergeCheck, MergeReviewPayload
    from dreamkeeper.core.dream_plan import ApprovalDecision, ApprovalState, PendingItem
    from dreamkeeper.policies.consolidation import merge_id
    from dreamkeeper.policies.prune_cap import weekly_prune_room

APPROVAL_PATCH = "approval-17"
WEEKLY_PRUNE_PATCH = "weekly-prune-cap"


def over_weekly_cap(
    inp: ConsolidationInput,
    prunes: list[str],
    live: int,
    recent: int,
    already: list[PendingItem],
    budget: int,
) -> tuple[int, list[PendingItem]]:
    """The prunes past what the rolling week still allows (policies.prune_cap), as items
    waiting for an operator; those already waiting for another reason are not repeated.
    Only prunes this cycle could apply count: past the cycle's archive budget they are
    deferred anyway, and asking about them would hold up a cycle for nothing. Returns the
    room too: the cycle archives at most that many prunes plus those approved."""
    room = weekly_prune_room(live, recent, inp.weekly_prune_share, inp.min_weekly_prunes)
    if min(len(prunes), budget) <= room:
        return room, []
    waiting = {p.key for p in already}
    why = (
        f"weekly prune cap: {recent} pruned in the last 7 days, {len(prunes)} more proposed, "
        f"room for {room}"
    )
    return room, [
        PendingItem(key=f"prune:{i}", kind="prune", ids=[i], why=why)
        for i in prunes[room:budget]
        if f"prune:{i}" not in waiting
    ]


def risky_items(
    inp: ConsolidationInput,
    merges: list[MergeCheck],
    reviews: list[MergeReviewPayload],
    accepted: list[int],
    prunes: list[str],
) -> list[PendingItem]:
    every = inp.approval == "all"
    items = []
    for index in accepted:
        sources = list(merges[index].merge.source_ids)
        why = []
        if every:
            why.append("approval=all")
        if reviews[index].high_value:
            why.append("archives a high-value source")
        if len(sources) >= inp.risky_sources:
            why.append(f"{len(sources)} sources")
        if why:
            new_id = merge_id(sources, merges[index].merge.content)
            items.append(
                PendingItem(key=f"merge:{new_id}", kind="merge", ids=sources, why=", ".join(why))
            )
    if prunes and (every or len(prunes) > inp.risky_prunes):
        many = "approval=all" if every else f"{len(prunes)} prunes (over {inp.risky_prunes})"
        items += [PendingItem(key=f"prune:{i}", kind="prune", ids=[i], why=many) for i in prunes]
    return items


class Approval:
    def __init__(self) -> None:
        self.state = ApprovalState()

    def details(self) -> str:
        keys = ", ".join(f"{p.key} ({p.why})" for p in self.state.pending[:20])
        return (
            f"step 5/7: awaiting approval of {len(self.state.pending)} risky change(s): {keys}"
            " — update `approve` or `reject` (keys, or none for all)"
        )

    def validate(self, decision: ApprovalDecision) -> None:
        known = {p.key for p in self.state.pending}
        unknown = [k for k in decision.keys if k not in known]
        if unknown:
            raise ValueError(f"not pending: {', '.join(unknown)}")

    def decide(self, decision: ApprovalDecision, *, approve: bool) -> ApprovalState:
        wanted = set(decision.keys) or {p.key for p in self.state.pending}
        target = self.state.approved if approve else self.state.rejected
        target += [p.key for p in self.state.pending if p.key in wanted]
        self.state.pending = [p for p in self.state.pending if p.key not in wanted]
        if self.state.pending:
            workflow.set_current_details(self.details())
        return self.state

    async def wait(self, items: list[PendingItem], timeout_minutes: float) -> ApprovalState:
        self.state.pending = list(items)
        workflow.set_current_details(self.details())
        try:
            await workflow.wait_condition(
                lambda: not self.state.pending, timeout=timedelta(minutes=timeout_minutes)
            )
        except TimeoutError:
            self.state.timed_out = [p.key for p in self.state.pending]
            self.state.pending = []
        return self.state
