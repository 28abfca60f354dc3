"""`forget` on the worker (docs/design.md, invariant 22): the Forget workflow's one step.

The request comes sealed with the agent's data key (`core.forgetting.ForgetInput`) and is
opened here; the store's forgetting (`stores.forget`, on this worker's backend, with the
per-agent payload data keys it destroys) does the erasure and writes the receipt.

Retries are safe without anything of their own: the forgetting journals a request (ids
only) before it erases anything, and finishes every request begun and not done before
its own. A worker killed mid-forget leaves its request pending; the retry, on any worker
of the store, finishes it first and lists it under the receipt's `resumed`, then runs
the request again, which finds what is already gone gone. A forget that completed but
whose answer was lost runs again the same way and changes nothing more.

After a forget the worker lets go of its open store of the agent: what that holds in
memory may be the erased entries.
"""

from __future__ import annotations

from temporalio import activity

from dreamkeeper.activities.stores import StoreRegistry
from dreamkeeper.client.codec import (
    PayloadDecodeError,
    PayloadErased,
    PayloadKeys,
    data_converter,
    open_sealed,
)
from dreamkeeper.core.errors import Conflict, InvalidInput
from dreamkeeper.core.forgetting import ForgetInput, ForgetOutcome, ForgetReceipt, ForgetRequest
from dreamkeeper.core.settings import StoreSettings
from dreamkeeper.stores.backends import open_backend
from dreamkeeper.stores.contract.forgetting import Forgetter

NO_KEY_NOTE = (
    "payloads are not encrypted here (no payload key): the agent's Temporal histories "
    "keep what they carried until the namespace's retention, this request's included"
)


def forgetting_for(settings: StoreSettings) -> Forgetter:
    """The forget runner of the backend the settings name (`open_backend`, the one
    switch): its stores, and the per-agent payload data keys this worker has (on a
    database that seals content at rest, the same keys seal its rows, and the keyring
    of their key-encryption keys is rotated)."""
    backend = open_backend(settings)
    keys = PayloadKeys.from_env(data_dir=settings.data_dir, key_store=backend.agent_keys)
    return backend.forgetting(history_keys=keys.agent_keys())


def forget(runner: Forgetter, agent_id: str, request: ForgetRequest) -> ForgetReceipt:
    """Run one forget request (blocking: it reads and rewrites files or rows)."""
    request.checked()
    caller = request.request_id
    if request.whole_agent:
        receipt = runner.forget_agent(agent_id, dry_run=request.dry_run, caller=caller)
    elif request.match is not None:
        receipt = runner.forget_match(
            agent_id,
            request.match,
            derived=request.derived,
            dry_run=request.dry_run,
            caller=caller,
        )
    else:
        receipt = runner.forget_entries(
            agent_id,
            request.ids,
            derived=request.derived,
            dry_run=request.dry_run,
            caller=caller,
        )
    if runner.history_keys is None:
        receipt.history_note = NO_KEY_NOTE
    return receipt


class ForgetActivities:
    def __init__(self, stores: StoreRegistry, settings: StoreSettings) -> None:
        self._stores = stores
        self._settings = settings

    def _request(self, inp: ForgetInput) -> ForgetRequest:
        """The sealed request, opened with this worker's keys (those its client seals
        and opens with: the payload key, the data directory's or the database's data
        keys)."""
        keys = PayloadKeys.from_env(
            data_dir=self._settings.data_dir,
            key_store=open_backend(self._settings).agent_keys,
        )
        try:
            return open_sealed(data_converter(keys), inp.sealed_request, ForgetRequest)
        except PayloadErased:
            raise Conflict(
                f"forget request {inp.request_id} of agent {inp.agent} was sealed with a data "
                "key that another forget of the agent destroyed before this one ran: nothing "
                "of it can be read any more; ask again"
            ) from None
        except PayloadDecodeError as exc:
            if isinstance(exc, Conflict):
                raise  # another store's key (PayloadKeyMismatch): said as a store mismatch
            raise InvalidInput(f"forget request {inp.request_id}: {exc}") from None

    @activity.defn(name="forget")
    def forget(self, inp: ForgetInput) -> ForgetOutcome:
        with self._stores.guarded(inp.agent, store_id=inp.store_id):
            request = self._request(inp)
            try:
                receipt = forget(forgetting_for(self._settings), inp.agent, request)
            finally:
                if not inp.dry_run:
                    self._stores.drop(inp.agent)
        # The request id the caller chose and the run's id carry; the store's journal
        # keeps its own (`resumed` lists those of requests a crash interrupted).
        receipt.request_id = inp.request_id
        return ForgetOutcome(receipt=receipt)
