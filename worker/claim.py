"""Claiming a task queue for this worker's store (see workflows.store_claim)."""

from __future__ import annotations

from pathlib import Path

from temporalio.client import Client
from temporalio.common import WorkflowIDConflictPolicy
from temporalio.exceptions import WorkflowAlreadyStartedError

from dreamkeeper.client.attributes import tagged
from dreamkeeper.client.claims import claimed_store
from dreamkeeper.client.codec import plain_payload
from dreamkeeper.core.errors import StoreMismatch
from dreamkeeper.core.names import CLAIM_LOCATION as LOCATION
from dreamkeeper.core.names import CLAIM_STORE_ID as STORE_ID
from dreamkeeper.core.names import claim_workflow_id
from dreamkeeper.stores.identity import StoreIdentity, directory_of, moved_into
from dreamkeeper.workflows.store_claim import StoreClaim


def moved_here(held: tuple[str, str], identity: StoreIdentity, data_dir: Path | None) -> bool:
    """Whether the store holding the queue (`held`: its id and location) is a data
    directory that `dreamkeeper migrate` copied into this store: its identity, read at the
    location it claimed from or in this worker's own data directory, records the move
    (stores.identity.record_move). The random store id it must carry is the proof it is
    that store, whichever host reads it."""
    places = [directory_of(held[1]), data_dir]
    return any(
        place is not None and moved_into(place, held[0]) == identity.store_id for place in places
    )


async def claim_task_queue(
    client: Client,
    task_queue: str,
    identity: StoreIdentity,
    *,
    reclaim: bool = False,
    data_dir: Path | None = None,
) -> str:
    """Claim the queue for this store; StoreMismatch if another store holds it, unless
    `reclaim`, or that store moved into this one (`moved_here`; `data_dir`: this worker's
    data directory, one more place its record may be read)."""
    held = await claimed_store(client, task_queue)
    if held is not None and held[0] == identity.store_id:
        return "already held by this store"
    moved = held is not None and moved_here(held, identity, data_dir)
    if held is not None and not reclaim and not moved:
        raise StoreMismatch(
            f"task queue {task_queue!r} already serves store {held[0]} at {held[1]}, but this "
            f"worker's data directory holds {identity.describe()}: two stores on one queue "
            "would split agents' memories. Point DREAMKEEPER_DATA at that directory, or use "
            "another DREAMKEEPER_TASK_QUEUE. If the store moved here with `dreamkeeper "
            "migrate`, a worker that can read that directory (DREAMKEEPER_DATA) takes the "
            "queue over by itself; elsewhere, start with --reclaim"
        )
    handle = client.get_workflow_handle(claim_workflow_id(task_queue))
    if held is not None:
        why = "moved into" if moved else "reclaimed by"
        await handle.terminate(f"task queue {why} {identity.describe()}")
    try:
        await client.start_workflow(
            StoreClaim.run,
            args=[identity.store_id, identity.location],
            id=claim_workflow_id(task_queue),
            task_queue=task_queue,
            # Plain, never sealed: a store id and a path (no memory content), which a
            # client or second worker without this store's payload key must read to
            # say which store it mismatches (client.claims).
            memo={
                STORE_ID: plain_payload(identity.store_id),
                LOCATION: plain_payload(identity.location),
            },
            static_summary=f"task queue {task_queue} serves {identity.describe()}",
            search_attributes=tagged(None, "claim"),
            id_conflict_policy=WorkflowIDConflictPolicy.FAIL,
        )
    except WorkflowAlreadyStartedError:
        # Another worker of some store claimed it in between: check which.
        return await claim_task_queue(client, task_queue, identity, data_dir=data_dir)
    if held is not None and moved:
        return f"taken over from store {held[0]} at {held[1]}, which moved here"
    return "reclaimed" if held is not None else "claimed"
