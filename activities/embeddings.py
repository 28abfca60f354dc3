"""The embedding activity: vectors after a save, and the dream cycle's backfill.

Never a caller's wait: SaveMemory runs it after the save has been acknowledged, and a
failure leaves entries without a vector (keyword search still finds them) for the next
backfill. Transient endpoint trouble is retried inside the client and then by Temporal.
"""

from __future__ import annotations

from temporalio import activity
from temporalio.exceptions import ApplicationError

from dreamkeeper.activities.stores import StoreRegistry
from dreamkeeper.core.payloads import EmbedInput, EmbedResult
from dreamkeeper.stores.vectors.backfill import embed_entries

NOT_CONFIGURED = "no embedding model configured: keyword search only"


class EmbeddingActivities:
    def __init__(self, stores: StoreRegistry) -> None:
        self._stores = stores

    @activity.defn(name="embed_entries")
    def embed_entries(self, inp: EmbedInput) -> EmbedResult:
        client = self._stores.embeddings
        if client is None:
            return EmbedResult(skipped=NOT_CONFIGURED)
        with self._stores.using(inp.agent_id) as store:
            report = embed_entries(
                store,
                client,
                inp.ids,
                limit=inp.limit,
                on_batch=lambda done, total: activity.heartbeat(f"{done}/{total} embedded"),
            )
        if report.skipped is not None:
            raise ApplicationError(report.skipped, type="EmbeddingsUnavailable")
        if report.embedded or report.failed:
            activity.logger.info(
                "embeddings %s: %d embedded, %d failed, %d fresh, %d remaining",
                inp.agent_id,
                len(report.embedded),
                len(report.failed),
                report.fresh,
                report.remaining,
            )
        return EmbedResult(
            embedded=len(report.embedded),
            failed=len(report.failed),
            fresh=report.fresh,
            remaining=report.remaining,
            dim=report.dim,
        )
