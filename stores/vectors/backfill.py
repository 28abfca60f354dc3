"""Generating vectors for long-term entries: after a save (the given ids) and as the dream
cycle's backfill (every live entry). Never on a caller's path: a save has returned
before its vector is made, and a search uses whatever vectors exist.

A backfill first embeds a probe to learn the model's current dimension, so vectors left
by a model that changed dimension are regenerated, not merely skipped at search time.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from dreamkeeper.core.models import MemoryEntry
from dreamkeeper.stores.contract import MemoryStore
from dreamkeeper.stores.vectors.embedder import BATCH_SIZE, Embedder

PROBE_TEXT = "dimension probe"
DEFAULT_LIMIT = 512


@dataclass
class EmbedReport:
    embedded: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)  # no vector this time; retried later
    fresh: int = 0  # already had a current vector
    remaining: int = 0  # stale or missing, past this call's limit
    dim: int | None = None
    skipped: str | None = None


def embed_entries(
    store: MemoryStore,
    client: Embedder,
    ids: Iterable[str] | None = None,
    *,
    limit: int = DEFAULT_LIMIT,
    on_batch: Callable[[int, int], None] | None = None,
) -> EmbedReport:
    """Embed the live entries among `ids` (None: all of them, checking each vector's
    dimension against the model's current one) whose vector is missing or stale."""
    report = EmbedReport()
    dim = None
    if ids is None:
        probe = client.embed([PROBE_TEXT])[0]
        if probe is None:
            report.skipped = "the embedding endpoint did not answer; vectors left as they are"
            return report
        dim = report.dim = probe.size
        candidates: Iterable[MemoryEntry | None] = store.entries()
    else:
        candidates = (store.get(i) for i in dict.fromkeys(ids))
    todo = []
    for entry in candidates:
        if entry is None or entry.is_archived:
            continue
        if store.stored_vector(entry, client.model_key, dim) is not None:
            report.fresh += 1
        else:
            todo.append(entry)
    report.remaining = max(0, len(todo) - limit)
    todo = todo[:limit]
    for start in range(0, len(todo), BATCH_SIZE):
        batch = todo[start : start + BATCH_SIZE]
        vectors = client.embed([e.content for e in batch])
        for entry, vector in zip(batch, vectors, strict=True):
            if vector is None or (dim is not None and vector.size != dim):
                report.failed.append(entry.id)
            elif store.write_vector(entry.id, vector, entry.fingerprint):
                report.embedded.append(entry.id)
                report.dim = vector.size
            # else: edited while we embedded it; the next pass makes the new vector
        if on_batch is not None:
            on_batch(start + len(batch), len(todo))
    return report
