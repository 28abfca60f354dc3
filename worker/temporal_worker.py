"""Building the Temporal worker that hosts every Dreamkeeper workflow and activity."""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from temporalio.client import Client
from temporalio.worker import Worker

from dreamkeeper.activities.agents import AgentActivities
from dreamkeeper.activities.consolidation import ConsolidationActivities
from dreamkeeper.activities.dream_review import DreamReviewActivities
from dreamkeeper.activities.dream_undo import UndoActivities
from dreamkeeper.activities.embeddings import EmbeddingActivities
from dreamkeeper.activities.entry_ops import EntryActivities
from dreamkeeper.activities.maintenance import MaintenanceActivities
from dreamkeeper.activities.preferences import PreferenceActivities
from dreamkeeper.activities.save import SaveActivities
from dreamkeeper.activities.stores import StoreRegistry
from dreamkeeper.core.settings import (
    EmbeddingSettings,
    LLMSettings,
    StoreSettings,
    embedding_settings,
)
from dreamkeeper.stores.embedding_client import embedding_client
from dreamkeeper.workflows.consolidation import Consolidation
from dreamkeeper.workflows.dream import Dream
from dreamkeeper.workflows.dream_ops import ApplyDreamPlan, UndoDream
from dreamkeeper.workflows.entry_ops import ArchiveMemory, RestoreMemory, UpdateMemoryImportance
from dreamkeeper.workflows.maintenance import ArchivePurge, ImportanceDecay
from dreamkeeper.workflows.preferences import PreferenceInference
from dreamkeeper.workflows.save import SaveMemory
from dreamkeeper.workflows.store_claim import StoreClaim
from dreamkeeper.workflows.sweep import DreamSweep

DEFAULT_TASK_QUEUE = "dreamkeeper"
WORKFLOWS = [
    SaveMemory,
    DreamSweep,
    Dream,
    Consolidation,
    PreferenceInference,
    ArchivePurge,
    ImportanceDecay,
    ArchiveMemory,
    RestoreMemory,
    UpdateMemoryImportance,
    StoreClaim,
    ApplyDreamPlan,
    UndoDream,
]


def worker_activities(
    settings: StoreSettings,
    llm: LLMSettings | None = None,
    embeddings: EmbeddingSettings | None = None,
) -> list[Callable]:
    """Every activity, bound to one store registry (one open store per agent)."""
    llm = llm if llm is not None else LLMSettings.from_env()
    embeddings = embeddings if embeddings is not None else embedding_settings()
    stores = StoreRegistry(settings.data_dir, embedding_client(embeddings))
    entries = EntryActivities(stores)
    save = SaveActivities(stores, llm, settings.floor)
    maintenance = MaintenanceActivities(
        stores,
        retention=settings.archive_retention,
        decay=settings.decay,
        floor=settings.floor,
    )
    dream = ConsolidationActivities(stores, llm, settings.floor)
    preferences = PreferenceActivities(stores, llm)
    review = DreamReviewActivities(
        stores, floor=settings.floor, decay=settings.decay, retention=settings.archive_retention
    )
    return [
        maintenance.purge_archived,
        maintenance.decay_importance,
        AgentActivities(settings.data_dir).list_agents,
        entries.archive_memory,
        entries.restore_memory,
        entries.update_memory_importance,
        save.persist_original,
        save.enrich_memory,
        save.save_fact,
        save.retire_original,
        save.dedup_original,
        save.mark_original,
        dream.fold_exact_duplicates,
        dream.gate_candidates,
        dream.propose_consolidation,
        dream.review_merges,
        dream.repair_merge,
        dream.save_merged_entry,
        dream.archive_merged_sources,
        dream.prune_ephemeral,
        dream.stamp_reviewed,
        preferences.rotate_conversation_log,
        preferences.infer_preferences,
        EmbeddingActivities(stores).embed_entries,
        review.plan_details,
        review.check_plan_sources,
        review.apply_fold,
        review.apply_decay,
        review.apply_purge,
        review.record_canaries,
        review.check_recall,
        UndoActivities(stores).undo_dream,
    ]


def build_worker(
    client: Client,
    settings: StoreSettings,
    *,
    task_queue: str = DEFAULT_TASK_QUEUE,
    executor: ThreadPoolExecutor,
    llm: LLMSettings | None = None,
    embeddings: EmbeddingSettings | None = None,
    activities: list[Callable] | None = None,
) -> Worker:
    """Store activities are synchronous file I/O, so they run on `executor`'s threads."""
    return Worker(
        client,
        task_queue=task_queue,
        workflows=WORKFLOWS,
        activities=(
            activities if activities is not None else worker_activities(settings, llm, embeddings)
        ),
        activity_executor=executor,
    )
