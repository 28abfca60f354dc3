"""`forget` for the local clients (the CLI, `MemoryClient`, the service): the store-side
erasure (`stores.forget`) with the backend's per-agent payload data keys
(`client.agent_keys`: the data directory's, or the database's), so forgetting reaches the
agent's Temporal histories too."""

from __future__ import annotations

from pathlib import Path

from dreamkeeper.client.codec import PayloadKeys
from dreamkeeper.core.forgetting import ForgetReceipt, ForgetRequest
from dreamkeeper.stores.forget import Forgetting, file_backend

NO_KEY_NOTE = (
    "payloads are not encrypted here (no payload key): the agent's Temporal histories "
    "keep what they carried until the namespace's retention"
)


def forgetting(data_dir: Path, database_url: str | None = None) -> Forgetting:
    """The forget runner of the configured backend: the database when a URL is set (the
    stores, the per-agent data keys that also seal content at rest, and the keyring of
    their key-encryption keys), else the data directory."""
    if database_url is not None:
        from dreamkeeper.stores.postgres.database import database
        from dreamkeeper.stores.postgres.forget import postgres_forgetting

        return postgres_forgetting(database(database_url), data_dir)
    keys = PayloadKeys.from_env(data_dir=data_dir).agent_keys()
    return Forgetting(data_dir, file_backend(data_dir), history_keys=keys)


def forget(
    data_dir: Path, agent_id: str, request: ForgetRequest, database_url: str | None = None
) -> ForgetReceipt:
    """Run one forget request (blocking: it reads and rewrites files or rows)."""
    request.checked()
    runner = forgetting(data_dir, database_url)
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
