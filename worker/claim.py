"""Claiming a task queue for this worker's store (see workflows.store_claim)."""

from __future__ import annotations

from pathlib import Path

from temporalio.client import Client
from temporalio.common import WorkflowIDConflictPolicy
from temporalio.exceptions import WorkflowAlreadyStartedError

from dreamkeeper.client.attributes import tagged
from dreamkeeper.client.claims import claim_of
from dreamkeeper.client.codec import plain_payload, sealing_key_id
from dreamkeeper.core.errors import StoreMismatch
from dreamkeeper.core.names import CLAIM_LOCATION as LOCATION
from dreamkeeper.core.names import CLAIM_SEALED_WITH as SEALED_WITH
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
    data directory, one more place its record may be read). The claim says whether this
    worker seals payloads (the id of its sealing key): a client that cannot seal reads it
    and starts nothing (agent.client). A claim of this store that says otherwise (made by
    the same store's worker before a key was set or removed) is made again."""
    sealed_with = sealing_key_id(client.data_converter)
    claim = await claim_of(client, task_queue)
    held = (claim.store_id, claim.location) if claim is not None else None
    renewed = claim is not None and claim.store_id == identity.store_id
    if renewed:
        assert claim is not None
        if claim.sealed_with == sealed_with:
            return "already held by this store"
        reclaim = True
    moved = held is not None and not renewed and moved_here(held, identity, data_dir)
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
        why = (
            "its payload sealing changed" if renewed else "moved into" if moved else "reclaimed by"
        )
        await handle.terminate(f"task queue {why}: {identity.describe()}")
    try:
        await start_claim(client, task_queue, identity, sealed_with)
    except WorkflowAlreadyStartedError:
        # Another worker of some store claimed it in between: check which.
        return await claim_task_queue(client, task_queue, identity, data_dir=data_dir)
    if renewed:
        return "claimed again: this worker's payload sealing differs from the old claim's"
    if held is not None and moved:
        return f"taken over from store {held[0]} at {held[1]}, which moved here"
    return "reclaimed" if held is not None else "claimed"


async def start_claim(
    client: Client, task_queue: str, identity: StoreIdentity, sealed_with: str | None
) -> None:
    """Start the workflow that holds the queue for this store; WorkflowAlreadyStartedError
    if a claim runs already."""
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
            **({SEALED_WITH: plain_payload(sealed_with)} if sealed_with else {}),
        },
        static_summary=f"task queue {task_queue} serves {identity.describe()}",
        search_attributes=tagged(None, "claim"),
        id_conflict_policy=WorkflowIDConflictPolicy.FAIL,
    )
