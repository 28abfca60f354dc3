"""`forget` for the local clients (the CLI, `MemoryClient`, the service): the store-side
erasure (`stores.forget`) of the configured backend, with its per-agent payload data keys
(`client.agent_keys`: the data directory's, or the database's), so forgetting reaches the
agent's Temporal histories too."""

from __future__ import annotations

from dreamkeeper.client.codec import PayloadKeys
from dreamkeeper.core.forgetting import ForgetReceipt, ForgetRequest
from dreamkeeper.core.settings import StoreSettings
from dreamkeeper.stores.backends import open_backend
from dreamkeeper.stores.contract.forgetting import Forgetter

NO_KEY_NOTE = (
    "payloads are not encrypted here (no payload key): the agent's Temporal histories "
    "keep what they carried until the namespace's retention"
)


def forgetting(store: StoreSettings) -> Forgetter:
    """The forget runner of the backend `store` names (`StoreBackend.forgetting`): its
    stores, and the per-agent data keys of the payload keys this process has (on a
    database that seals content at rest, the same keys seal its rows, and the keyring
    of their key-encryption keys is rotated)."""
    backend = open_backend(store)
    keys = PayloadKeys.from_env(data_dir=store.data_dir, key_store=backend.agent_keys)
    return backend.forgetting(history_keys=keys.agent_keys())


def forget(store: StoreSettings, agent_id: str, request: ForgetRequest) -> ForgetReceipt:
    """Run one forget request (blocking: it reads and rewrites files or rows)."""
    request.checked()
    runner = forgetting(store)
    if request.whole_agent:
        receipt = runner.forget_agent(agent_id, dry_run=request.dry_run)
    elif request.match is not None:
        receipt = runner.forget_match(
            agent_id, request.match, derived=request.derived, dry_run=request.dry_run
        )
    else:
        receipt = runner.forget_entries(
            agent_id, request.ids, derived=request.derived, dry_run=request.dry_run
        )
    if runner.history_keys is None:
        receipt.history_note = NO_KEY_NOTE
    return receipt
